import EventLoop
import TLS

/// TLS client configuration for every Redis connection of the process, on any loop: built once, read-only after.
public final class RedisTLSContext: Sendable {
    let context: TLSClientContext
    public let settings: RedisTLSSettings

    public init(_ settings: RedisTLSSettings) throws(RedisTLSError) {
        if settings.serverName?.isEmpty == true {
            // OpenSSL reads an empty expected name as "check no name at all".
            throw RedisTLSError("the TLS server name is empty: leave it unset to check the host connected to")
        }
        do {
            context = try TLSClientContext(caFile: settings.caFile, certFile: settings.certFile, keyFile: settings.keyFile)
        } catch {
            throw RedisTLSError(error.message)
        }
        self.settings = settings
    }
}

extension TLSStream: RedisStream {
    static let defaultHandshakeTimeoutMs = 10_000

    /// Starts the handshake on a connected socket and returns the stream at once (writes wait for the handshake).
    /// `done` is called once: the handshake completed and the server's certificate was verified for
    /// `context.settings.serverName ?? host`, or why not (the stream is then closed) — unless `close()` came first.
    @discardableResult
    static func start(over connection: TCPConnection, loop: EventLoop, context: RedisTLSContext, host: String, port: Int,
                      handshakeTimeoutMs: Int = defaultHandshakeTimeoutMs,
                      done: @escaping (Result<TLSStream, RedisClientError>) -> Void) -> TLSStream? {
        let peer = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let session: TLSSession
        do {
            session = try TLSSession(context.context, serverName: context.settings.serverName ?? host)
        } catch {
            connection.close()
            done(.failure(.unavailable("TLS with \(peer) failed: \(error.message)")))
            return nil
        }
        let stream = TLSStream(over: connection, session: session, loop: loop, peer: peer)
        stream.handshake(timeoutMs: handshakeTimeoutMs) { [unowned stream] failure in
            guard let failure else { return done(.success(stream)) }
            switch failure.reasonCode {
            // A plaintext Redis waits silently for the end of a command line that a ClientHello never sends.
            case "timeout":
                done(.failure(.timeout("TLS handshake with \(peer) \(failure.message) (is that a TLS port?)")))
            case "closed" where failure.message == "the peer closed the connection":
                done(.failure(.unavailable("TLS handshake with \(peer) failed: the server closed the connection")))
            default:
                done(.failure(.unavailable("TLS handshake with \(peer) failed: \(failure.message)")))
            }
        }
        return stream
    }
}
