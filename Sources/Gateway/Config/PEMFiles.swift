import Foundation

/// PEM files named in the configuration (`redis.tls`, `upstreams.<name>.tls`, `server.tls`): read and checked for
/// shape at start and on every reload, so a wrong path or a file of the wrong kind is a config error, not a failed
/// handshake later.
enum PEMFiles {
    static let maxFileBytes = 1024 * 1024

    /// The resolved path of a readable file holding at least one PEM block of one of `labels`.
    static func path(_ value: ConfigValue?, expecting labels: [String], baseDirectory: String) -> String? {
        guard let value, let text = value.string() else { return nil }
        let path = text.hasPrefix("/") ? text : "\(baseDirectory)/\(text)"
        guard let data = FileManager.default.contents(atPath: path) else {
            value.invalid("cannot read \(path)")
            return nil
        }
        guard data.count <= maxFileBytes, let pem = String(data: data, encoding: .utf8) else {
            value.invalid("\(path) is not a PEM file (over 1 MiB or not text)")
            return nil
        }
        guard labels.contains(where: { isPEMBlock(pem, label: $0) }) else {
            // The file's content stays out of the message: a key file is a secret.
            value.invalid("\(path) holds no PEM \(labels[0]) block (-----BEGIN \(labels[0])-----, base64, -----END \(labels[0])-----)")
            return nil
        }
        return path
    }

    /// A BEGIN/END pair of `label` around non-empty base64.
    private static func isPEMBlock(_ pem: String, label: String) -> Bool {
        guard let begin = pem.range(of: "-----BEGIN \(label)-----"),
              let end = pem.range(of: "-----END \(label)-----", range: begin.upperBound..<pem.endIndex) else { return false }
        let body = pem[begin.upperBound..<end.lowerBound].filter { !$0.isWhitespace }
        return !body.isEmpty && body.count % 4 == 0 && Data(base64Encoded: String(body)) != nil
    }
}
