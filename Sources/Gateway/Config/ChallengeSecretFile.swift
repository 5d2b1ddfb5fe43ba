import Foundation

extension ChallengeSecrets {
    /// A secret file is small: one or two lines.
    static let maxFileBytes = 4096

    /// `app_attest.challenge_secret_file`: one secret per line, at least 32 bytes each (e.g.
    /// `openssl rand -base64 48`), used as they are; the first signs, a second is the previous secret, still
    /// accepted during a rotation. Read at start and on every reload. Problems are reported without quoting
    /// the file. Answers the resolved path and the secrets, or (nil, nil) when the key is absent.
    static func read(_ value: ConfigValue?, baseDirectory: String) -> (String?, ChallengeSecrets?) {
        guard let value, let text = value.string() else { return (nil, nil) }
        let path = text.hasPrefix("/") ? text : "\(baseDirectory)/\(text)"
        guard let data = FileManager.default.contents(atPath: path) else {
            value.invalid("cannot read \(path)")
            return (path, nil)
        }
        guard data.count <= maxFileBytes else {
            value.invalid("\(path) is larger than \(maxFileBytes) bytes; it holds one or two secrets, one per line")
            return (path, nil)
        }
        let lines = Array(data).split(separator: UInt8(ascii: "\n")).map { line in
            Array(line.drop { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }.reversed().drop { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }.reversed())
        }.filter { !$0.isEmpty }
        guard (1...2).contains(lines.count) else {
            value.invalid("\(path) must hold one secret per line: the current one, then optionally the previous one (found \(lines.count) lines)")
            return (path, nil)
        }
        if let short = lines.firstIndex(where: { $0.count < minimumBytes }) {
            value.invalid("line \(short + 1) of \(path) is shorter than \(minimumBytes) bytes (make one with: openssl rand -base64 48)")
            return (path, nil)
        }
        return (path, ChallengeSecrets(lines))
    }
}
