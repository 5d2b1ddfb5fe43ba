import Foundation
import RedisClient

/// `redis.tls`: how the gateway checks Redis' certificate and which one it shows. Present (even `{}`) means
/// TLS: with `url`, only together with `rediss://`; with `cluster` or `sentinels` it is the only switch.
/// Its reading of the files serves `upstreams.<name>.tls` too (UpstreamTLSConfig.swift).
/// Files are read and checked for PEM shape at start and on every reload.
extension RedisTLSSettings {
    static let maxFileBytes = 1024 * 1024

    static func read(_ value: ConfigValue?, urlIsTLS: Bool, topology: RedisTopology, baseDirectory: String) -> RedisTLSSettings? {
        guard let value else { return urlIsTLS ? RedisTLSSettings() : nil }
        guard let section = value.mapping() else { return nil }
        defer { section.finish() }
        if topology == .single, !urlIsTLS { value.invalid("tls needs a rediss:// url (redis:// is plain TCP)") }
        return readFiles(section, baseDirectory: baseDirectory)
    }

    /// `ca_file`, `cert_file`, `key_file`, `server_name`: the shape `redis.tls` and `upstreams.<name>.tls` share.
    static func readFiles(_ section: ConfigMapping, baseDirectory: String) -> RedisTLSSettings {
        let caFile = pemFile(section.optional("ca_file"), expecting: ["CERTIFICATE"], baseDirectory: baseDirectory)
        let certValue = section.optional("cert_file"), keyValue = section.optional("key_file")
        let certFile = pemFile(certValue, expecting: ["CERTIFICATE"], baseDirectory: baseDirectory)
        let keyFile = pemFile(keyValue, expecting: ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"], baseDirectory: baseDirectory)
        if (certValue == nil) != (keyValue == nil) {
            (certValue ?? keyValue)?.invalid("cert_file and key_file go together (the client certificate and its key)")
        }
        var serverName: String?
        if let nameValue = section.optional("server_name"), let name = nameValue.string() {
            if name.isEmpty || name.count > 253 || !name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || ".-".contains($0)) }) {
                nameValue.invalid("expected a DNS name like redis.example.com, got \"\(name)\"")
            } else {
                serverName = name
            }
        }
        return RedisTLSSettings(caFile: caFile, certFile: certFile, keyFile: keyFile, serverName: serverName)
    }

    /// The resolved path of a readable file holding at least one PEM block of one of `labels`.
    private static func pemFile(_ value: ConfigValue?, expecting labels: [String], baseDirectory: String) -> String? {
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
