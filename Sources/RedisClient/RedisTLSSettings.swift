/// TLS to Redis (`redis.tls` / `rediss://`). The server's certificate is always verified, against `caFile` or
/// the system's CA store, and must name `serverName` (or the host connected to).
public struct RedisTLSSettings: Sendable, Equatable {
    /// PEM CA certificates to trust; nil: the system's default store.
    public let caFile: String?
    /// PEM client certificate (chain) and its key, for servers that require one: both or neither.
    public let certFile: String?
    public let keyFile: String?
    /// The name the certificate must carry (DNS name or IP address); nil: the host connected to.
    public let serverName: String?

    public init(caFile: String? = nil, certFile: String? = nil, keyFile: String? = nil, serverName: String? = nil) {
        (self.caFile, self.certFile, self.keyFile, self.serverName) = (caFile, certFile, keyFile, serverName)
    }
}

/// Why a `RedisTLSContext` could not be built: the file concerned and OpenSSL's reason.
public struct RedisTLSError: Error, Equatable, Sendable, CustomStringConvertible {
    public let message: String
    public var description: String { message }

    init(_ message: String) { self.message = message }
}
