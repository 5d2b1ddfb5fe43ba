import EventLoop
import TLS

/// A connected byte stream to one Redis node: plain TCP, or TLS over it (`TLSStream`). Loop thread only;
/// the delegate hears plaintext.
protocol RedisStream: AnyObject {
    var delegate: (any TCPConnectionDelegate)? { get set }
    var writeFailed: Bool { get }
    func startReading()
    func write(_ bytes: [UInt8])
    func close()
}

extension TCPConnection: RedisStream {}

/// The one way a connection reaches a Redis node: plain TCP when `tls` is nil, else TLS over it. `done` is called
/// once, with a stream ready for commands — for TLS, the handshake completed and the server's certificate verified —
/// or why not. A TLS handshake that does not complete within `handshakeTimeoutMs` fails with `.timeout`. The caller
/// owns the stream it gets: it keeps it and `close()`s it.
func connectRedisStream(_ loop: EventLoop, host: String, port: Int, tls: RedisTLSContext?,
                        handshakeTimeoutMs: Int = TLSStream.defaultHandshakeTimeoutMs,
                        done: @escaping (Result<any RedisStream, RedisClientError>) -> Void) {
    TCPConnection.connect(loop, host: host, port: port) { result in
        switch result {
        case .failure(let error):
            done(.failure(.unavailable("cannot connect to Redis at \(host):\(port): \(error)")))
        case .success(let connection):
            guard let tls else { return done(.success(connection)) }
            TLSStream.start(over: connection, loop: loop, context: tls, host: host, port: port,
                            handshakeTimeoutMs: handshakeTimeoutMs) { done($0.map { $0 }) }
        }
    }
}
