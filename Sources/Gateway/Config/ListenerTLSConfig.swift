import HTTPServer
import TLS

/// `server.tls`: the listener terminates TLS itself. The certificates are loaded while the file is read (start,
/// `check-config`, every SIGHUP), so a missing file, a key that does not match its certificate or a bad staple is
/// a config error — and a reload that meets one keeps the certificates in force.
public struct ListenerTLSConfig: Sendable {
    public let settings: TLSServerSettings
    public let handshakeTimeoutMs: Int
    /// The contexts built from `settings`, ready for new connections.
    public let context: TLSServerContext

    public var listenerTLS: ListenerTLS { ListenerTLS(context: context, handshakeTimeoutMs: handshakeTimeoutMs) }

    static let keyLabels = ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"]

    /// `http2`: `server.http2`, whether ALPN offers `h2` before `http/1.1`.
    static func read(_ value: ConfigValue?, http2: Bool, baseDirectory: String) -> ListenerTLSConfig? {
        guard let value, let section = value.mapping() else { return nil }
        defer { section.finish() }
        let minVersion = readMinVersion(section.optional("min_version"))
        let handshakeTimeoutMs = section.int("handshake_timeout_ms", default: 10_000, in: 100...120_000)
        let defaultCertificate = readCertificate(section, names: false, baseDirectory: baseDirectory)
        var certificates: [TLSServerCertificate] = []
        var seen = Set<String>()
        for item in section.optional("certificates")?.list() ?? [] {
            guard let entry = item.mapping() else { continue }
            defer { entry.finish() }
            guard let certificate = readCertificate(entry, names: true, baseDirectory: baseDirectory) else { continue }
            for name in certificate.serverNames where !seen.insert(name).inserted {
                item.invalid("server name \"\(name)\" is listed for two certificates")
            }
            certificates.append(certificate)
        }
        guard let defaultCertificate else { return nil }
        let settings = TLSServerSettings(defaultCertificate: defaultCertificate, certificates: certificates, minVersion: minVersion,
                                         alpn: http2 ? ["h2", "http/1.1"] : ["http/1.1"])
        do {
            return ListenerTLSConfig(settings: settings, handshakeTimeoutMs: handshakeTimeoutMs, context: try TLSServerContext(settings))
        } catch {
            value.invalid(error.message)
            return nil
        }
    }

    /// "1.2" or "1.3"; OpenSSL's spelling ("TLSv1.2") is read too.
    private static func readMinVersion(_ value: ConfigValue?) -> TLSVersion {
        guard let value, let written = value.string() else { return .tls12 }
        let text = written.lowercased().hasPrefix("tlsv") ? String(written.dropFirst(4)) : written
        if let version = TLSVersion(rawValue: text) { return version }
        if ["1", "1.0", "1.1"].contains(text) {
            value.invalid("TLS \(text) is refused (deprecated by RFC 8996, no modern client needs it): use \"1.2\" or \"1.3\"")
        } else {
            value.invalid("expected \"1.2\" or \"1.3\", got \"\(written)\"")
        }
        return .tls12
    }

    /// `cert_file`, `key_file`, `ocsp_staple_file` (and `server_names` for the SNI entries); nil when a file is wrong.
    private static func readCertificate(_ section: ConfigMapping, names: Bool, baseDirectory: String) -> TLSServerCertificate? {
        var serverNames: [String] = []
        if names, let list = section.required("server_names") {
            for item in list.list() ?? [] {
                guard let name = item.string() else { continue }
                guard isServerName(name) else {
                    item.invalid("expected a DNS name like api.example.com or *.example.com, got \"\(name)\"")
                    continue
                }
                serverNames.append(name.lowercased())
            }
            if serverNames.isEmpty, list.list()?.isEmpty == true { list.invalid("list at least one server name") }
        }
        let certValue = section.required("cert_file"), keyValue = section.required("key_file")
        let certFile = PEMFiles.path(certValue, expecting: ["CERTIFICATE"], baseDirectory: baseDirectory)
        let keyFile = PEMFiles.path(keyValue, expecting: keyLabels, baseDirectory: baseDirectory)
        let stapleFile = section.optional("ocsp_staple_file").flatMap { $0.string() }
            .map { $0.hasPrefix("/") ? $0 : "\(baseDirectory)/\($0)" }
        guard let certFile, let keyFile else { return nil }
        return TLSServerCertificate(serverNames: serverNames, certFile: certFile, keyFile: keyFile, ocspStapleFile: stapleFile)
    }

    /// Letters, digits, "-" and ".", labels not empty; "*." in front for a wildcard of one label.
    private static func isServerName(_ name: String) -> Bool {
        let bare = name.hasPrefix("*.") ? String(name.dropFirst(2)) : name
        guard !bare.isEmpty, bare.count <= 253 else { return false }
        return bare.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            !label.isEmpty && label.count <= 63 && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
        }
    }
}
