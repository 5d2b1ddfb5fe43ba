/// `upstreams.<name>.tls`: how an `https://` upstream's certificate is checked and which one the gateway shows
/// (nginx's `proxy_ssl_trusted_certificate`, `proxy_ssl_certificate(_key)`, `proxy_ssl_name`). Verification is
/// never off: the certificate must chain to `caFile` (or the system's CAs) and name `serverName` (or the host).
public struct UpstreamTLSSettings: Sendable, Equatable {
    /// PEM CA certificates to trust instead of the system's store.
    public let caFile: String?
    /// PEM client certificate (chain) and its key, for upstreams that require one (mTLS): both or neither.
    public let certFile: String?
    public let keyFile: String?
    /// The name verified and sent as SNI when it differs from the host dialled (an address, say).
    public let serverName: String?

    public init(caFile: String? = nil, certFile: String? = nil, keyFile: String? = nil, serverName: String? = nil) {
        (self.caFile, self.certFile, self.keyFile, self.serverName) = (caFile, certFile, keyFile, serverName)
    }
}

/// How curl reaches an `https://` target with a `server_name`: curl verifies the URL's host, so the URL names
/// `serverName` and CURLOPT_CONNECT_TO dials the configured host instead; `Host` stays the configured authority.
struct CurlAddressing: Sendable, Equatable {
    /// The base URL with `serverName` in place of the host.
    let baseURL: String
    /// "server_name:port:host:port" for CURLOPT_CONNECT_TO.
    let connectTo: String
    /// The configured authority, sent as `Host` unless the request carries its own.
    let hostHeader: String
}

extension CurlAddressing {
    /// nil when curl can use the base URL as it is.
    init?(baseURL: String, serverName: String?) {
        let scheme = "https://"
        guard let serverName, baseURL.lowercased().hasPrefix(scheme) else { return nil }
        let rest = baseURL.dropFirst(scheme.count)
        let authority = rest.prefix { $0 != "/" }
        // The port follows the last ':' outside an IPv6 literal's brackets.
        let portStart = authority.lastIndex(of: ":").flatMap { colon in
            authority[colon...].contains("]") ? nil : colon
        }
        let host = portStart.map { authority[..<$0] } ?? authority
        let port = portStart.map { String(authority[authority.index(after: $0)...]) } ?? "443"
        self.baseURL = scheme + serverName + ":" + port + rest.dropFirst(authority.count)
        connectTo = serverName + ":" + port + ":" + host + ":" + port
        hostHeader = String(authority)
    }
}
