import EventLoop
import Upstream

/// The parsed request head, available before any body byte is read.
public struct RequestHead: Sendable {
    public let method: String
    /// The request target's path exactly as sent: still percent-encoded, always starting with "/".
    public let path: String
    /// Everything after the first "?", still percent-encoded; nil when the target has no "?".
    public let query: String?
    /// In the order received, values without surrounding whitespace.
    public let headers: [HTTPField]
    public let clientAddress: String
    /// "HTTP/1.1" or "HTTP/1.0".
    public let httpVersion: String
    public let framing: RequestFraming
    /// How the connection is secured; nil for plain HTTP.
    public let tls: TLSInfo?

    public init(method: String, path: String, query: String?, headers: [HTTPField], clientAddress: String, httpVersion: String,
                framing: RequestFraming, tls: TLSInfo? = nil) {
        (self.method, self.path, self.query, self.headers, self.clientAddress) = (method, path, query, headers, clientAddress)
        (self.httpVersion, self.framing, self.tls) = (httpVersion, framing, tls)
    }

    /// The raw target as sent ("/a/b?c"), for logs of refused requests.
    public var target: String { query.map { path + "?" + $0 } ?? path }
    public var hasBody: Bool { framing != .noBody && framing != .contentLength(0) }
}

/// The TLS of a client's connection, for the upstream's `X-Forwarded-Proto` and the access log.
public struct TLSInfo: Sendable, Equatable {
    /// "TLSv1.2", "TLSv1.3".
    public let version: String
    /// What ALPN settled on ("http/1.1"), nil when the client offered none.
    public let alpn: String?

    public init(version: String, alpn: String?) { (self.version, self.alpn) = (version, alpn) }
}

/// What an exchange drives: an HTTP/1.1 connection (one exchange at a time) or an HTTP/2 stream. Loop thread only;
/// the semantics are `HTTPExchange`'s.
protocol ExchangeChannel: AnyObject {
    var clientGone: Bool { get }
    var canWrite: Bool { get }
    func bodyAtOnce(limit: Int) -> Result<[UInt8], BodyReadError>?
    func readBody(limit: Int, _ done: @escaping (Result<[UInt8], BodyReadError>) -> Void)
    func streamBody(limit: Int, sink: @escaping (UnsafeRawBufferPointer) -> Bool, end: @escaping (BodyReadError?) -> Void)
    func resumeBody()
    func whenWritable(_ wake: @escaping () -> Void)
    func startResponse(status: Int, headers: [HTTPField], contentLength: Int?) -> Bool
    func writeBody(_ bytes: UnsafeRawBufferPointer) -> Bool
    func endResponse()
    func abort(_ outcome: ExchangeOutcome)
}

/// A client connection the server keeps track of (limits, drain), whatever protocol it speaks. Loop thread only.
protocol ServerConnection: AnyObject {
    var loop: EventLoop { get }
    var clientAddress: String { get }
    /// Whether this connection counts against its address's `per_ip_connection_limit`.
    var countedPerIP: Bool { get set }
    /// Closes the connection if no request is under way; a busy one finishes first (drain).
    func closeIfIdle()
    func close()
}

/// How an exchange ended, for the access log: `completed` only once the last byte was handed to the kernel.
public enum ExchangeOutcome: String, Sendable {
    case completed
    case clientAborted = "client_aborted"
    case upstreamAborted = "upstream_aborted"
    case timeout
}

/// Why a request body could not be read. Each maps to the response the client gets (if it is still there).
public enum BodyReadError: Error, Equatable, Sendable {
    case tooLarge(limit: Int)
    case timeout
    case clientGone
    /// The process-wide budget for buffered bodies is spent.
    case overloaded
    case malformed(String)
    /// Chunked framing bytes outside RFC 9112's grammar (see `ChunkedScan`).
    case badChunk(String)

    public var reasonCode: String {
        switch self {
        case .tooLarge: "body_too_large"
        case .timeout: "body_timeout"
        case .clientGone: "client_aborted"
        case .overloaded: "server_busy"
        case .malformed: "bad_body"
        case .badChunk: "bad_chunked_body"
        }
    }

    public var status: Int {
        switch self {
        case .tooLarge: 413
        case .timeout: 408
        case .clientGone: 499
        case .overloaded: 503
        case .malformed, .badChunk: 400
        }
    }

    public var message: String {
        switch self {
        case .tooLarge(let limit): "request body exceeds \(limit) bytes"
        case .timeout: "the request body stopped arriving"
        case .clientGone: "the client closed the connection"
        case .overloaded: "too many request bodies are buffered right now; retry shortly"
        case .malformed(let detail): "the request body is malformed: \(detail)"
        case .badChunk(let detail): "the chunked request body is malformed: \(detail)"
        }
    }

    public var response: HTTPResponse {
        var response = HTTPResponse.error(status: status, reason: reasonCode, message: message)
        if self == .overloaded { response.headers.append(HTTPField("Retry-After", "1")) }
        return response
    }
}

/// Where a handler keeps what it works out once for all of a connection's requests (what depends only on
/// the peer and the transport): one per connection, HTTP/1.1 or HTTP/2. Loop thread only, as the exchange.
public final class ConnectionMemo: @unchecked Sendable {
    /// The handler's own object; nil until it sets one.
    public var value: AnyObject? { get { stored } set { stored = newValue } }
    // Private storage, as HTTPExchange's: the whole-module build then drops the dynamic exclusivity check.
    private var stored: AnyObject?
}

/// One request and its response, as the handler drives them. Lives on its connection's loop: every method
/// must be called there (the handler's task runs on that loop).
public final class HTTPExchange: @unchecked Sendable {
    public let head: RequestHead
    public let loop: EventLoop
    /// The connection's memo.
    public let connectionMemo: ConnectionMemo
    private let connection: any ExchangeChannel
    /// Body bytes handed to the socket so far (the head excluded).
    public internal(set) var bytesSent: Int { get { sent } set { sent = newValue } }
    public internal(set) var status: Int? { get { answered } set { answered = newValue } }
    /// Called once, when the response was fully written (or failed, or the client left).
    public var onFinished: ((ExchangeOutcome) -> Void)? { get { finishedCallback } set { finishedCallback = newValue } }
    /// Called once if the client disappears (or stops reading past `send_timeout_ms`) before the end:
    /// whoever produces the body should stop.
    public var onClientGone: (() -> Void)? { get { goneCallback } set { goneCallback = newValue } }
    /// Called when a stream that `writeBody` reported full can take more.
    public var onWritable: (() -> Void)? { get { writableCallback } set { writableCallback = newValue } }

    // The storage of the properties above: a public stored property keeps Swift's dynamic exclusivity checks
    // (other modules could access it), private storage lets the whole-module build drop them (a few a request).
    private var sent = 0
    private var answered: Int?
    private var finishedCallback: ((ExchangeOutcome) -> Void)?
    private var goneCallback: (() -> Void)?
    private var writableCallback: (() -> Void)?

    init(head: RequestHead, loop: EventLoop, connection: any ExchangeChannel, memo: ConnectionMemo) {
        self.head = head
        self.loop = loop
        self.connection = connection
        connectionMemo = memo
    }

    /// The exchange is over: its callbacks are dropped, then `onFinished` is told how (once; the owner makes sure).
    func finished(_ outcome: ExchangeOutcome) {
        let callback = finishedCallback
        finishedCallback = nil
        writableCallback = nil
        callback?(outcome)
    }

    /// The whole body when there is nothing to wait for (no body, or one read already); nil when it has to be
    /// read (`readBody`).
    public func bodyAtOnce(limit: Int) -> Result<[UInt8], BodyReadError>? { connection.bodyAtOnce(limit: limit) }

    /// The whole body, up to `limit` bytes, to `done`: at once when there is nothing to wait for (no body,
    /// or one read already). Sends `100 Continue` first when the client asked for it.
    public func readBody(limit: Int, _ done: @escaping (Result<[UInt8], BodyReadError>) -> Void) {
        if let result = bodyAtOnce(limit: limit) { return done(result) }
        connection.readBody(limit: limit, done)
    }

    /// `readBody` for async callers.
    public func readBody(limit: Int) async throws(BodyReadError) -> [UInt8] {
        if let result = bodyAtOnce(limit: limit) { return try result.get() }
        let result = await withCheckedContinuation { continuation in
            connection.readBody(limit: limit) { continuation.resume(returning: Unchecked($0)) }
        }
        return try result.value.get()
    }

    /// The body piece by piece, for relaying it without holding it whole: `sink` answering false pauses
    /// reading until `resumeBody()`; `end` comes once (nil after the last byte, or why the body failed).
    public func streamBody(limit: Int, sink: @escaping (UnsafeRawBufferPointer) -> Bool, end: @escaping (BodyReadError?) -> Void) {
        connection.streamBody(limit: limit, sink: sink, end: end)
    }

    public func resumeBody() { connection.resumeBody() }

    /// Whether the client is still there to receive a response.
    public var isClientGone: Bool { connection.clientGone }

    /// Sends a response; `done` once it is handed over: at once for bytes in hand, after the last piece for
    /// a streamed body (relayed by a task, as the client takes it).
    public func send(_ response: HTTPResponse, then done: @escaping () -> Void) {
        guard case .bytes(let bytes) = response.body else {
            let (response, done) = (Unchecked(response), Unchecked(done))
            Task(executorPreference: loop) { [self] in
                await send(response.value)
                done.value()
            }
            return
        }
        send(status: response.status, headers: response.headers, bytes)
        done()
    }

    private func send(status: Int, headers: [HTTPField], _ bytes: [UInt8]) {
        guard startResponse(status: status, headers: headers, contentLength: bytes.count) else { return }
        if !bytes.isEmpty { bytes.withUnsafeBytes { _ = writeBody($0) } }
        endResponse()
    }

    /// Sends a whole response; a streamed body is relayed piece by piece as the client takes it.
    public func send(_ response: HTTPResponse) async {
        switch response.body {
        case .bytes(let bytes):
            send(status: response.status, headers: response.headers, bytes)
        case .stream(let stream):
            defer { stream.close() }
            guard startResponse(status: response.status, headers: response.headers, contentLength: nil) else { return }
            do {
                while let chunk = try await stream.nextChunk() {
                    if !chunk.isEmpty, !chunk.withUnsafeBytes({ writeBody($0) }) {
                        guard await writable() else { return }
                    }
                    if isClientGone { return }
                }
                endResponse()
            } catch {
                abort(.upstreamAborted)
            }
        }
    }

    /// Waits until the client has taken enough of what was written; false if it left meanwhile.
    public func writable() async -> Bool {
        if connection.canWrite { return true }
        if isClientGone { return false }
        await withCheckedContinuation { continuation in
            connection.whenWritable { continuation.resume() }
        }
        return !isClientGone
    }

    /// Writes the status line and headers. `contentLength` nil streams the body (chunked for HTTP/1.1).
    /// For HEAD, `contentLength` is announced and no body follows. False when the head could not be sent as
    /// given (a status outside 200–599, a header that could split the response): the client got a JSON 500
    /// `invalid_response_status` / `invalid_response_header` instead, and nothing more is to be written.
    public func startResponse(status: Int, headers: [HTTPField], contentLength: Int?) -> Bool {
        connection.startResponse(status: status, headers: headers, contentLength: contentLength)
    }

    /// Queues body bytes; false when the client is not keeping up: stop producing until `onWritable`.
    @discardableResult
    public func writeBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        connection.writeBody(bytes)
    }

    /// The body is complete; the exchange finishes once the client has been sent everything.
    public func endResponse() {
        connection.endResponse()
    }

    /// Ends the exchange without completing the response: the connection is closed, so a client never
    /// takes a truncated body for a whole one.
    public func abort(_ outcome: ExchangeOutcome) {
        connection.abort(outcome)
    }
}
