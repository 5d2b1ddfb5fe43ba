import EventLoop
import Foundation
import Upstream

/// Header lines in both directions are Upstream's `HTTPField` (name as spelled on the wire, value),
/// so the proxy passes them between the server and curl without conversion.
extension Array where Element == HTTPField {
    /// Whether every field has a token name and a value without CR, LF or NUL: anything else could split the
    /// response (header injection). Each is judged where it lies (`allSatisfy` copied every field out, retaining
    /// and releasing its two strings).
    public var areSafeToSend: Bool {
        for index in indices {
            // A known name is one of the gateway's spellings, letters in any case: a token.
            guard self[index].known != .other || (!self[index].name.isEmpty && self[index].name.allBytes(HTTPField.isTokenByte)),
                  HTTPField.isSendableValue(self[index].value)
            else { return false }
        }
        return true
    }

    /// The first value of header `name`, if any.
    public func first(named name: String) -> String? {
        let known = KnownHeader(name)
        if known != .other { return first(named: known) }
        return first { $0.hasName(name) }?.value
    }

    /// The first value of the header `known` names, if any.
    public func first(named known: KnownHeader) -> String? {
        for index in indices where self[index].known == known { return self[index].value }
        return nil
    }
}

/// A complete inbound request, body read in full (within limits): what simple handlers see.
public struct HTTPRequest: Sendable {
    public let method: String
    /// The request target's path exactly as sent: still percent-encoded, always starting with "/".
    public let path: String
    /// Everything after the first "?", still percent-encoded; nil when the target has no "?".
    public let query: String?
    /// In the order received. Bytes that are not UTF-8 (obsolete header text) arrive as U+FFFD.
    public let headers: [HTTPField]
    public var body: [UInt8]
    /// The peer's IP address as text ("127.0.0.1", "::1").
    public let clientAddress: String
    /// "HTTP/1.1" or "HTTP/1.0".
    public let httpVersion: String
    /// How the client's connection is secured; nil for plain HTTP.
    public let tls: TLSInfo?

    public init(method: String, path: String, query: String?, headers: [HTTPField], body: [UInt8],
                clientAddress: String, httpVersion: String, tls: TLSInfo? = nil) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.clientAddress = clientAddress
        self.httpVersion = httpVersion
        self.tls = tls
    }

    public init(_ head: RequestHead, body: [UInt8]) {
        self.init(method: head.method, path: head.path, query: head.query, headers: head.headers, body: body,
                  clientAddress: head.clientAddress, httpVersion: head.httpVersion, tls: head.tls)
    }
}

/// A response body produced piece by piece. The server sends it with chunked transfer coding (HTTP/1.1) and
/// asks for the next piece only once the client has taken the previous ones (back-pressure).
public protocol HTTPBodyStream: AnyObject {
    /// The next piece of the body; nil at the end. Throwing aborts the response: the client sees the
    /// connection close without the final chunk, so a truncated body is never taken for a whole one.
    func nextChunk() async throws -> [UInt8]?
    /// Called exactly once when the server is done with the stream: after the end, an error, or a client
    /// that went away mid-body.
    func close()
}

public enum HTTPResponseBody {
    case bytes([UInt8])
    case stream(any HTTPBodyStream)
}

public struct HTTPResponse {
    public var status: Int
    /// Content-Length, Transfer-Encoding and Connection are left out: the server owns message framing.
    public var headers: [HTTPField]
    public var body: HTTPResponseBody

    public init(status: Int, headers: [HTTPField] = [], body: HTTPResponseBody = .bytes([])) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The gateway's error shape: `{"error":"<reason_code>","message":"…"}` as application/json.
    public static func error(status: Int, reason: String, message: String) -> HTTPResponse {
        let body = (try? errorEncoder.encode(ErrorBody(error: reason, message: message))) ?? Data()
        return HTTPResponse(status: status, headers: [HTTPField("Content-Type", "application/json")],
                            body: .bytes(Array(body)))
    }

    private struct ErrorBody: Encodable {
        let error: String
        let message: String
    }

    private static let errorEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
}

/// Answers requests on the event loop that owns the connection: it must not block (hand blocking work to a
/// `BlockingPool`), and it answers through the exchange.
public protocol HTTPHandler: AnyObject, Sendable {
    /// Starts answering `exchange`, on its loop; `done` once, when the handler has let go of it (the response
    /// may still be going out). Where nothing waits, all of it may happen before this returns: no task.
    func start(_ exchange: HTTPExchange, done: @escaping () -> Void)
    /// The server answered `status` itself (bad framing, bad target, limits): for logs and metrics.
    func rejected(method: String, target: String, clientAddress: String, status: Int, reason: String)
    /// Whether connections from this peer address are exempt from `perIPConnectionLimit` (a trusted proxy's).
    func exemptFromPerIPLimit(_ peerAddress: String) -> Bool
    /// A TLS handshake failed (`TLSFailure.reasonCodes`): counted, not logged per connection.
    func tlsHandshakeFailed(reason: String)
    /// An HTTP/2 connection or stream was cut for misbehaving (`HTTP2Connection.protectionReasons`): counted.
    func http2Protection(reason: String)
}

extension HTTPHandler {
    public func rejected(method: String, target: String, clientAddress: String, status: Int, reason: String) {}
    public func exemptFromPerIPLimit(_ peerAddress: String) -> Bool { false }
    public func tlsHandshakeFailed(reason: String) {}
    public func http2Protection(reason: String) {}
}

/// A handler written as one async function: each request is a task on its connection's loop.
public protocol AsyncHTTPHandler: HTTPHandler {
    func handle(_ exchange: HTTPExchange) async
}

extension AsyncHTTPHandler {
    public func start(_ exchange: HTTPExchange, done: @escaping () -> Void) {
        let done = Unchecked(done)
        Task(executorPreference: exchange.loop) { [self] in
            await handle(exchange)
            done.value()
        }
    }
}

/// A handler that takes a whole request and gives a whole response: built-in endpoints, admin, tests.
public protocol WholeRequestHandler: AsyncHTTPHandler {
    /// Largest body read for this request (413 beyond it).
    func maxBodyBytes(for head: RequestHead) -> Int
    func respond(to request: HTTPRequest) async -> HTTPResponse
}

extension WholeRequestHandler {
    public func handle(_ exchange: HTTPExchange) async {
        let body: [UInt8]
        do {
            body = try await exchange.readBody(limit: maxBodyBytes(for: exchange.head))
        } catch {
            await exchange.send(error.response)
            return
        }
        await exchange.send(await respond(to: HTTPRequest(exchange.head, body: body)))
    }
}

/// Resource bounds and timeouts of the inbound server (`server:` in the config).
public struct ServerLimits: Sendable, Equatable {
    /// Event-loop threads; each owns the connections it accepted.
    public var workers: Int
    /// Open client connections, all loops together; over it a connection gets a 503 and is closed.
    public var connectionLimit: Int
    /// 0 = no per-IP limit. Peers the handler exempts (trusted proxies, whose connections all share an
    /// address) are not counted.
    public var perIPConnectionLimit: Int
    /// The whole request head (request line and headers) must arrive within this.
    public var headerTimeoutMs: Int
    /// Longest pause between two reads of a request body.
    public var bodyTimeoutMs: Int
    /// An idle keep-alive connection is closed after this.
    public var keepaliveTimeoutMs: Int
    /// Longest time a client may leave written bytes unread before the connection is closed.
    public var sendTimeoutMs: Int
    /// Request line plus headers (431 beyond it).
    public var maxHeaderBytes: Int
    /// Largest request body accepted (413 beyond it).
    public var maxBodyBytes: Int
    /// Request-body bytes held in memory by all connections together (503 with Retry-After beyond it).
    public var maxBufferedBodyBytes: Int
    /// HTTP/2 streams open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    public var maxConcurrentStreams: Int
    /// Offer HTTP/2 by ALPN on a TLS listener.
    public var http2: Bool
    /// Accept prior-knowledge HTTP/2 in clear (a load balancer speaking h2 to its backends).
    public var h2c: Bool

    public init(workers: Int = ServerLimits.defaultWorkers, connectionLimit: Int = 16_384, perIPConnectionLimit: Int = 0,
                headerTimeoutMs: Int = 10_000, bodyTimeoutMs: Int = 30_000, keepaliveTimeoutMs: Int = 30_000,
                sendTimeoutMs: Int = 30_000, maxHeaderBytes: Int = 32_768, maxBodyBytes: Int = 1_048_576,
                maxBufferedBodyBytes: Int = 64 * 1_048_576, maxConcurrentStreams: Int = 100, http2: Bool = true, h2c: Bool = false) {
        self.workers = workers
        self.connectionLimit = connectionLimit
        self.perIPConnectionLimit = perIPConnectionLimit
        self.headerTimeoutMs = headerTimeoutMs
        self.bodyTimeoutMs = bodyTimeoutMs
        self.keepaliveTimeoutMs = keepaliveTimeoutMs
        self.sendTimeoutMs = sendTimeoutMs
        self.maxHeaderBytes = maxHeaderBytes
        self.maxBodyBytes = maxBodyBytes
        self.maxBufferedBodyBytes = maxBufferedBodyBytes
        (self.maxConcurrentStreams, self.http2, self.h2c) = (maxConcurrentStreams, http2, h2c)
    }

    public static var defaultWorkers: Int { max(1, ProcessInfo.processInfo.activeProcessorCount) }
    /// `server.per_ip_connection_limit` by default: one address cannot take a directly exposed gateway's
    /// connections (or head memory) alone; a carrier-grade NAT's many users rarely hold this many at once.
    public static let defaultPerIPConnectionLimit = 512
}
