import Foundation
import RedisClient

/// `redis.tls`: how the gateway checks Redis' certificate and which one it shows. Present (even `{}`) means
/// TLS: with `url`, only together with `rediss://`; with `cluster` or `sentinels` it is the only switch.
/// Its reading of the files serves `upstreams.<name>.tls` too (UpstreamTLSConfig.swift).
/// Files are read and checked for PEM shape at start and on every reload.
extension RedisTLSSettings {
    static func read(_ value: ConfigValue?, urlIsTLS: Bool, topology: RedisTopology, baseDirectory: String) -> RedisTLSSettings? {
        guard let value else { return urlIsTLS ? RedisTLSSettings() : nil }
        guard let section = value.mapping() else { return nil }
        defer { section.finish() }
        if topology == .single, !urlIsTLS { value.invalid("tls needs a rediss:// url (redis:// is plain TCP)") }
        return readFiles(section, baseDirectory: baseDirectory)
    }

    /// `ca_file`, `cert_file`, `key_file`, `server_name`: the shape `redis.tls` and `upstreams.<name>.tls` share.
    static func readFiles(_ section: ConfigMapping, baseDirectory: String) -> RedisTLSSettings {
        let caFile = PEMFiles.path(section.optional("ca_file"), expecting: ["CERTIFICATE"], baseDirectory: baseDirectory)
        let certValue = section.optional("cert_file"), keyValue = section.optional("key_file")
        let certFile = PEMFiles.path(certValue, expecting: ["CERTIFICATE"], baseDirectory: baseDirectory)
        let keyFile = PEMFiles.path(keyValue, expecting: ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"], baseDirectory: baseDirectory)
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
}
