import EventLoop
// Replaced by TLSStream.swift (in progress on branch tls-stream).
public struct RedisTLSSettings: Sendable, Equatable {
    public var caFile: String?
    public var certFile: String?
    public var keyFile: String?
    public var serverName: String?
    public init(caFile: String? = nil, certFile: String? = nil, keyFile: String? = nil, serverName: String? = nil) {
        (self.caFile, self.certFile, self.keyFile, self.serverName) = (caFile, certFile, keyFile, serverName)
    }
}
public struct RedisTLSError: Error, Equatable, Sendable { public let message: String }
public final class RedisTLSContext: Sendable {
    public init(_ settings: RedisTLSSettings) throws(RedisTLSError) { throw RedisTLSError(message: "TLS is not built yet") }
}

func connectRedisStream(_ loop: EventLoop, host: String, port: Int, tls: RedisTLSContext?, handshakeTimeoutMs: Int,
                        done: @escaping (Result<any RedisStream, RedisClientError>) -> Void) {
    TCPConnection.connect(loop, host: host, port: port) { result in
        switch result {
        case .success(let connection): done(.success(connection))
        case .failure(let error): done(.failure(.unavailable("cannot connect to Redis at \(host):\(port): \(error)")))
        }
    }
}
