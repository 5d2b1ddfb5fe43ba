/// One protected API the gateway forwards to, and how long it may take.
public struct UpstreamTarget: Sendable, Equatable {
    /// Scheme, authority and optional path prefix, without a trailing slash ("http://127.0.0.1:8081").
    public let baseURL: String
    /// Phase by phase; a route may override them per exchange.
    public let timeouts: UpstreamTimeouts
    public var connectTimeoutMs: Int { timeouts.connectMs }
    /// Total time for one exchange, from connect to the last body byte (0 = none).
    public var timeoutMs: Int { timeouts.totalMs }
    /// Idle kept-alive connections held for reuse; more concurrent requests still work, but their
    /// connections are closed afterwards.
    public let maxIdleConnections: Int
    /// How long an idle kept-alive connection may wait for reuse; an upstream's `Keep-Alive: timeout=N`
    /// shortens it (loops' own client). Below the keep-alive timeout of common servers (Node and uvicorn
    /// 5 s, Apache 5 s), so the gateway lets a connection go before the upstream closes it under a request:
    /// that race costs a POST a 502, since it is never sent twice.
    public let keepAliveMs: Int
    public static let defaultKeepAliveMs = 4000
    /// The base URL taken apart for the loops' own HTTP/1.1 client; nil for `https://` (curl's). Settable
    /// inside the module so tests can drive curl's loop path against a plain loopback server.
    var plainHTTP: PlainHTTPEndpoint?
    /// `https://` only: the CA, client certificate and name to verify; nil: the system's CAs, the URL's host.
    public let tls: UpstreamTLSSettings?
    /// Set when `tls.serverName` differs from the host curl dials.
    let curlAddressing: CurlAddressing?
    /// What curl's URLs start with: the base URL, or with `tls.serverName` as its host.
    var curlBaseURL: String { curlAddressing?.baseURL ?? baseURL }

    /// A total limit that also bounds the first byte and every silence (Apple's APIs, the CLI).
    public init(
        baseURL: String, connectTimeoutMs: Int, timeoutMs: Int, maxIdleConnections: Int = 64,
        keepAliveMs: Int = UpstreamTarget.defaultKeepAliveMs
    ) throws(UpstreamError) {
        guard timeoutMs > 0 else { throw .invalidTarget("the total timeout must be positive, got \(timeoutMs) ms") }
        try self.init(baseURL: baseURL, timeouts: UpstreamTimeouts(connectMs: connectTimeoutMs, firstByteMs: timeoutMs,
                                                                   idleMs: timeoutMs, totalMs: timeoutMs),
                      maxIdleConnections: maxIdleConnections, keepAliveMs: keepAliveMs)
    }

    public init(baseURL: String, timeouts: UpstreamTimeouts, maxIdleConnections: Int = 64,
                keepAliveMs: Int = UpstreamTarget.defaultKeepAliveMs, tls: UpstreamTLSSettings? = nil) throws(UpstreamError) {
        try timeouts.validate()
        guard maxIdleConnections >= 0 else {
            throw .invalidTarget("maxIdleConnections must not be negative")
        }
        guard keepAliveMs > 0 else { throw .invalidTarget("keepAliveMs must be positive, got \(keepAliveMs)") }
        self.baseURL = try Self.validated(baseURL)
        plainHTTP = PlainHTTPEndpoint(baseURL: self.baseURL)
        if tls != nil, plainHTTP != nil || !self.baseURL.lowercased().hasPrefix("https://") {
            throw .invalidTarget("TLS settings apply to https:// upstreams only (got \"\(baseURL)\")")
        }
        self.tls = tls
        curlAddressing = CurlAddressing(baseURL: self.baseURL, serverName: tls?.serverName)
        self.timeouts = timeouts
        self.maxIdleConnections = maxIdleConnections
        self.keepAliveMs = keepAliveMs
    }

    /// Requests append their path to the base URL, so it must not carry a query, fragment or spaces.
    private static func validated(_ url: String) throws(UpstreamError) -> String {
        let lowered = url.lowercased()
        guard let scheme = ["http://", "https://"].first(where: { lowered.hasPrefix($0) }) else {
            throw .invalidTarget("base URL must start with http:// or https:// (got \"\(url)\")")
        }
        guard url.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") })
        else {
            throw .invalidTarget("base URL must be plain ASCII without spaces, query or fragment (got \"\(url)\")")
        }
        let trimmed = url.hasSuffix("/") ? String(url.dropLast()) : url
        let authority = trimmed.dropFirst(scheme.count).prefix { $0 != "/" }
        guard !authority.isEmpty else {
            throw .invalidTarget("base URL has no host (got \"\(url)\")")
        }
        return trimmed
    }
}
