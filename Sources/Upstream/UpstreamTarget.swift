/// One protected API the gateway forwards to, and how long it may take.
public struct UpstreamTarget: Sendable, Equatable {
    /// Scheme, authority and optional path prefix, without a trailing slash ("http://127.0.0.1:8081").
    public let baseURL: String
    public let connectTimeoutMs: Int
    /// Total time for one exchange, from connect to the last body byte (streams included).
    public let timeoutMs: Int
    /// Idle kept-alive connections held for reuse; more concurrent requests still work, but their
    /// connections are closed afterwards.
    public let maxIdleConnections: Int

    public init(
        baseURL: String, connectTimeoutMs: Int, timeoutMs: Int, maxIdleConnections: Int = 64
    ) throws(UpstreamError) {
        guard connectTimeoutMs > 0, timeoutMs > 0 else {
            throw .invalidTarget("timeouts must be positive (connect \(connectTimeoutMs) ms, total \(timeoutMs) ms)")
        }
        guard maxIdleConnections >= 0 else {
            throw .invalidTarget("maxIdleConnections must not be negative")
        }
        self.baseURL = try Self.validated(baseURL)
        self.connectTimeoutMs = connectTimeoutMs
        self.timeoutMs = timeoutMs
        self.maxIdleConnections = maxIdleConnections
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
