import EventLoop
import Upstream

/// One HTTP/2 request and its response, driven by an `HTTPExchange` as an HTTP/1.1 connection is: the request head
/// from the stream's header list (pseudo-headers checked, `:authority` as `Host`, cookie crumbs joined), the body
/// from DATA frames — at most one flow-control window held, more let in only as the consumer takes it — and the
/// response as HEADERS and DATA written as the client's window and socket allow. Loop thread only.
final class HTTP2Stream: ExchangeChannel, @unchecked Sendable {
    let id: Int32
    private weak var connection: HTTP2Connection?
    private let shared: ServerShared
    private let loop: EventLoop
    /// When the current wait (`waiting`) times out, in the loop's milliseconds; the connection's sweep checks it
    /// (one timer per connection, not one per stream).
    private(set) var deadline = UInt64.max
    private enum Waiting { case headers, body, send, nothing }
    private var waiting = Waiting.headers

    // The request head as it arrives: the pseudo-headers used (nghttp2 refuses repeated, unknown or late ones and
    // upper-case names), the fields — counted and compared as they come, Host's slot first, filled at the end (an
    // insert at the front copied the list).
    private var method: String?
    /// `:path` checked as it arrived (visible ASCII from "/", no fragment) and split at its first "?"; one that
    /// fails the check is kept whole for the refusal (`badTarget`).
    private var path: String?
    private var query: String?
    private var badTarget: String?
    private var authority: String?
    private var fields: [HTTPField] = HTTP2Stream.fieldsWithHostSlot()
    private var host: String?
    private var hostFields = 0
    private var contentLength: String?
    private var headerBytes = 0
    private var headersTooLarge = false
    private var badHeader = false
    private var exchange: HTTPExchange?

    // The body: received bytes not yet taken by the consumer (at most a window), and how reading goes.
    private var inbound: [UInt8] = []
    private var bodyComplete = false
    private var bodyReceived = 0
    private var bodyStarted = false
    private var bodyLimit = Int.max
    private var sink: ((UnsafeRawBufferPointer) -> Bool)?
    private var bodyEnd: ((BodyReadError?) -> Void)?
    private var paused = false
    /// Head and buffered-body bytes held against the process-wide budget.
    private var reserved = 0

    // The response.
    private var responseStarted = false
    private var responseEnded = false
    private var headOnly = false
    /// The response body not yet framed. Grown through a local (`var b = outgoing; outgoing = []; …; outgoing = b`):
    /// an access to a class's array that spans the array's own calls (growth, copy) makes the compiler check every
    /// access to it at run time; `inbound`, `fields` and `writableWaiters` are changed the same way.
    private var outgoing: [UInt8] = []
    private var sentOffset = 0
    private(set) var clientGone = false
    private var streamClosed = false
    private var writableWaiters: [() -> Void] = []
    /// `writeBody` answered false: the producer waits for `onWritable`.
    private var producerPaused = false
    private var finishedOutcome: ExchangeOutcome?
    private var outcomeOverride: ExchangeOutcome?
    private var handlerDone = false

    init(id: Int32, connection: HTTP2Connection) {
        self.id = id
        self.connection = connection
        shared = connection.shared
        loop = connection.loop
        arm(shared.limits.headerTimeoutMs)
    }

    // MARK: - Request head

    /// False once, when the list grows past `max_header_bytes` (counted as HPACK does: name + value + 32).
    func addHeader(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Bool {
        guard !headersTooLarge else { return true }
        headerBytes += name.count + value.count + 32
        if headerBytes > shared.limits.maxHeaderBytes {
            headersTooLarge = true
            (method, path, query, badTarget, authority, fields, host) = (nil, nil, nil, nil, nil, [], nil)
            return false
        }
        // Names compared as bytes and no dictionary: a request's few fields cost a hash and two strings each before.
        // A String only for what is kept (not for :scheme).
        if name.first == UInt8(ascii: ":") {
            if Self.named(name, ":method") {
                method = String(decoding: value, as: UTF8.self)
            } else if Self.named(name, ":path") {
                setTarget(value)
            } else if Self.named(name, ":authority") {
                authority = String(decoding: value, as: UTF8.self)
            }
            return true
        }
        let text = String(decoding: value, as: UTF8.self)
        if Self.named(name, "host") {
            hostFields += 1
            host = text
            return true
        }
        // The list is changed through a local (see `outgoing`).
        var fields = self.fields
        self.fields = []
        if Self.named(name, "cookie"), let index = fields.firstIndex(where: { $0.name == "cookie" }) {
            fields[index].value += "; " + text  // RFC 9113 §8.2.3, for HTTP/1.1 upstreams
        } else {
            if contentLength == nil, Self.named(name, "content-length") { contentLength = text }
            fields.append(HTTPField(String(decoding: name, as: UTF8.self), text))
        }
        self.fields = fields
        return true
    }

    /// One pass over `:path`'s bytes: the check and the "?" (a String's views cost 1,400 instructions a request).
    private func setTarget(_ bytes: UnsafeRawBufferPointer) {
        var mark: Int?
        var visible = bytes.first == UInt8(ascii: "/")
        for index in bytes.indices {
            let byte = bytes[index]
            if byte <= 0x20 || byte >= 0x7F || byte == UInt8(ascii: "#") { visible = false }
            if byte == UInt8(ascii: "?"), mark == nil { mark = index }
        }
        guard visible else {
            (path, query, badTarget) = (nil, nil, String(decoding: bytes, as: UTF8.self))
            return
        }
        guard let mark else {
            (path, query, badTarget) = (String(decoding: bytes, as: UTF8.self), nil, nil)
            return
        }
        path = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[..<mark]), as: UTF8.self)
        query = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[(mark + 1)...]), as: UTF8.self)
        badTarget = nil
    }

    /// The request target as sent, for the log line of a refusal.
    private var target: String { path.map { path in query.map { path + "?" + $0 } ?? path } ?? badTarget ?? "-" }

    /// An empty list with room for a request's usual fields, Host's slot first.
    private static func fieldsWithHostSlot() -> [HTTPField] {
        var fields: [HTTPField] = []
        fields.reserveCapacity(8)
        fields.append(HTTPField("host", ""))
        return fields
    }

    /// Whether a field's name (bytes from nghttp2) is `literal`: the length first, most names differ in it (the
    /// generic `elementsEqual` cost 200 instructions a comparison).
    private static func named(_ name: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
        guard name.count == literal.utf8CodeUnitCount else { return false }
        let bytes = literal.utf8Start
        for index in 0..<name.count where name[index] != bytes[index] { return false }
        return true
    }

    func headersDone(endStream: Bool) {
        disarm()
        waiting = .nothing
        bodyComplete = endStream
        let method = method ?? "-"
        if headersTooLarge {
            return reject(431, "headers_too_large", "the request headers exceed \(shared.limits.maxHeaderBytes) bytes")
        }
        guard let path else {
            return reject(400, "bad_request_target", "the request target must be an absolute path of visible ASCII without a fragment",
                          method: method, target: target)
        }
        if method == "CONNECT" { return reject(405, "method_not_allowed", "CONNECT is not proxied", method: method, target: target) }
        // :authority is the host; a Host field beside it must agree (RFC 9113 §8.3.1).
        guard let host = authority ?? self.host, !host.isEmpty else {
            return reject(400, "missing_host", "the request has no :authority", method: method, target: target)
        }
        guard hostFields <= 1, self.host == nil || self.host == host else {
            return reject(400, "duplicate_host", "Host disagrees with :authority", method: method, target: target)
        }
        var fields = self.fields
        self.fields = []
        fields[0].value = host
        let framing: RequestFraming
        if endStream {
            framing = .noBody
        } else if let length = contentLength.flatMap({ Int($0) }) {
            framing = .contentLength(length)  // nghttp2 checks it against the DATA received
        } else {
            framing = .chunked
        }
        guard shared.bodyBudget.reserve(headerBytes) else {
            return reject(503, "server_busy", BodyReadError.overloaded.message, method: method, target: target)
        }
        reserved = headerBytes
        let connection = self.connection  // one load of the weak reference
        let head = RequestHead(method: method, path: path, query: query, headers: fields, clientAddress: connection?.clientAddress ?? "",
                               httpVersion: "HTTP/2", framing: framing, tls: connection?.tls)
        let exchange = HTTPExchange(head: head, loop: loop, connection: self, memo: connection?.memo ?? ConnectionMemo())
        self.exchange = exchange
        headOnly = method == "HEAD"
        shared.requestStarted()
        // On the loop's next turn, not inside nghttp2's callback: a stream reset in the same read (rapid reset)
        // is gone by then, and its request never reaches the upstream.
        loop.executeOnLoop { [self] in shared.handler.start(exchange) { [self] in handlerReturned() } }
    }

    /// Refused before the handler: answered, reported for logs and metrics, as the HTTP/1.1 side does.
    private func reject(_ status: Int, _ reason: String, _ message: String, method: String = "-", target: String = "-") {
        shared.handler.rejected(method: method, target: target, clientAddress: connection?.clientAddress ?? "", status: status, reason: reason)
        let response = HTTPResponse.error(status: status, reason: reason, message: message)
        responseStarted = true
        outgoing = response.bodyBytes
        responseEnded = true
        _ = connection?.session.respond(id, status: status, headers: response.headers, contentLength: outgoing.count, hasBody: true)
        connection?.scheduleFlush()
    }

    // MARK: - Body

    func received(_ bytes: UnsafeRawBufferPointer) {
        bodyReceived += bytes.count
        // After the response, or for a refused stream: taken and dropped, so the client can finish its side.
        guard exchange != nil, !responseEnded, !clientGone else { return consume(bytes.count) }
        if bodyReceived > bodyLimit { return finishBody(.tooLarge(limit: bodyLimit)) }
        if let sink, !paused, inbound.isEmpty {
            if !sink(bytes) { paused = true }
            consume(bytes.count)
        } else {
            // At most the stream's window: the client may send no more. Through a local (see `outgoing`).
            var inbound = self.inbound
            self.inbound = []
            inbound.append(contentsOf: bytes)
            self.inbound = inbound
        }
        if bodyEnd != nil { arm(shared.limits.bodyTimeoutMs) }
    }

    func bodyDone() {
        bodyComplete = true
        deliver()
    }

    private func consume(_ count: Int) { connection?.session.consumed(id, count) }

    func bodyAtOnce(limit: Int) -> Result<[UInt8], BodyReadError>? {
        guard exchange != nil, !clientGone else { return .failure(.clientGone) }
        guard !bodyStarted else { return .success([]) }
        guard bodyComplete, bodyReceived == 0 else { return nil }
        bodyStarted = true
        return .success([])
    }

    func readBody(limit: Int, _ done: @escaping (Result<[UInt8], BodyReadError>) -> Void) {
        var collected: [UInt8] = []
        var overloaded = false
        streamBody(limit: limit, sink: { [unowned self] bytes in
            guard shared.bodyBudget.reserve(bytes.count) else {
                overloaded = true
                return true
            }
            reserved += bytes.count
            collected.append(contentsOf: bytes)
            return true
        }, end: { error in
            if overloaded { return done(.failure(.overloaded)) }
            done(error.map { .failure($0) } ?? .success(collected))
        })
    }

    func streamBody(limit: Int, sink: @escaping (UnsafeRawBufferPointer) -> Bool, end: @escaping (BodyReadError?) -> Void) {
        guard let exchange, !clientGone else { return end(.clientGone) }
        guard !bodyStarted else { return end(nil) }
        bodyStarted = true
        if let length = exchange.head.framing.declaredLength, length > limit { return end(.tooLarge(limit: limit)) }
        if bodyReceived > limit { return end(.tooLarge(limit: limit)) }
        (bodyLimit, self.sink, bodyEnd) = (limit, sink, end)
        waiting = .body
        deliver()
        if bodyEnd != nil { arm(shared.limits.bodyTimeoutMs) }
    }

    func resumeBody() {
        guard paused, bodyEnd != nil else { return }
        paused = false
        deliver()
    }

    /// What waits in `inbound` to the sink (its window reopened as it is taken), then the end once the body is whole.
    private func deliver() {
        guard let sink, bodyEnd != nil else { return }
        if !inbound.isEmpty, !paused {
            let pending = inbound
            inbound = []
            if !pending.withUnsafeBytes(sink) { paused = true }
            consume(pending.count)
        }
        if bodyComplete, inbound.isEmpty { finishBody(nil) }
    }

    private func finishBody(_ error: BodyReadError?) {
        guard let end = bodyEnd else { return }
        (bodyEnd, sink, paused) = (nil, nil, false)
        if waiting == .body {
            waiting = .nothing
            disarm()
        }
        end(error)
    }

    // MARK: - Response

    var canWrite: Bool {
        outgoing.count - sentOffset < HTTPConnection.highWatermark && !(connection?.socketFull ?? true) && !clientGone
    }

    func whenWritable(_ wake: @escaping () -> Void) {
        if canWrite || clientGone { return wake() }
        var waiters = writableWaiters  // through a local (see `outgoing`)
        writableWaiters = []
        waiters.append(wake)
        writableWaiters = waiters
    }

    private func wakeWriters() {
        let waiters = writableWaiters
        writableWaiters = []
        waiters.forEach { $0() }
        if producerPaused, !clientGone {
            producerPaused = false
            exchange?.onWritable?()
        }
    }

    /// What `writeBody` answers: false pauses the producer until `onWritable`.
    private func writable() -> Bool {
        let writable = canWrite
        if !writable { producerPaused = true }
        return writable
    }

    /// The socket drained: writers paused on it may go on.
    func connectionWritable() { if canWrite { wakeWriters() } }

    func startResponse(status: Int, headers: [HTTPField], contentLength: Int?) -> Bool {
        guard exchange != nil, !responseStarted, !clientGone else { return false }
        let safeHeaders = headers.areSafeToSend
        guard safeHeaders, (200...599).contains(status) else {
            let reason = safeHeaders ? "invalid_response_status" : "invalid_response_header"
            let error = HTTPResponse.error(status: 500, reason: reason, message: "the gateway produced an invalid response")
            _ = begin(500, error.headers, contentLength: error.bodyBytes.count)
            error.bodyBytes.withUnsafeBytes { _ = writeBody($0) }
            endResponse()
            return false
        }
        return begin(status, headers, contentLength: contentLength)
    }

    private func begin(_ status: Int, _ headers: [HTTPField], contentLength: Int?) -> Bool {
        responseStarted = true
        exchange?.status = status
        if status == 204 || status == 304 { headOnly = true }
        guard let connection else { return false }
        let submitted = connection.session.respond(id, status: status, headers: headers, contentLength: contentLength, hasBody: !headOnly)
        connection.scheduleFlush()
        return submitted
    }

    func writeBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let exchange, responseStarted, !responseEnded, !clientGone, !headOnly, bytes.count > 0 else { return writable() }
        var outgoing = self.outgoing
        self.outgoing = []
        if sentOffset > 0, sentOffset == outgoing.count { (outgoing, sentOffset) = ([], 0) }
        outgoing.append(contentsOf: bytes)
        self.outgoing = outgoing
        exchange.bytesSent += bytes.count
        connection?.resumeData(id)
        waiting = .send
        arm(shared.limits.sendTimeoutMs)
        return writable()
    }

    func endResponse() {
        guard responseStarted, !responseEnded else { return }
        responseEnded = true
        if clientGone { return }
        // The rest of a body the handler left unread is taken and dropped, so the client can end its side.
        if !inbound.isEmpty {
            consume(inbound.count)
            inbound = []
        }
        if headOnly { connection?.scheduleFlush() } else { connection?.resumeData(id) }
    }

    /// nghttp2 asks for the next DATA frame's bytes.
    func fill(_ buffer: UnsafeMutableRawBufferPointer) -> HTTP2Session.DataChunk {
        let available = outgoing.count - sentOffset
        guard available > 0 else {
            guard responseEnded else { return .deferred }
            if !bodyComplete { connection?.session.reset(id, .noError) }
            return .bytes(0, last: true)
        }
        let count = min(available, buffer.count)
        outgoing.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[sentOffset..<sentOffset + count])) }
        sentOffset += count
        let left = outgoing.count - sentOffset
        if left == 0 {
            (outgoing, sentOffset) = ([], 0)
            if waiting == .send { disarm() }
        } else {
            arm(shared.limits.sendTimeoutMs)  // progress: a fresh send timeout
        }
        if left <= HTTPConnection.lowWatermark, producerPaused || !writableWaiters.isEmpty {
            loop.executeOnLoop { [weak self] in self?.connectionWritable() }
        }
        let last = left == 0 && responseEnded
        // A whole response before the whole request (a refusal, a deny route): the client is asked to stop sending
        // (RFC 9113 §8.1); queued now, the reset goes out after this last DATA frame.
        if last, !bodyComplete { connection?.session.reset(id, .noError) }
        return .bytes(count, last: last)
    }

    func abort(_ outcome: ExchangeOutcome) {
        guard let exchange else { return }
        if !responseStarted {
            outcomeOverride = outcome
            let response = HTTPResponse.error(status: 502, reason: "upstream_aborted", message: "the upstream response failed")
            _ = begin(response.status, response.headers, contentLength: response.bodyBytes.count)
            response.bodyBytes.withUnsafeBytes { _ = writeBody($0) }
            endResponse()
            return
        }
        // The client must not take a truncated body for a whole one: the stream is reset.
        finish(exchange, outcome)
        clientGone = true
        connection?.session.reset(id, .internalError)
        connection?.scheduleFlush()
    }

    private func handlerReturned() {
        handlerDone = true
        guard exchange != nil, !clientGone else { return }
        if !responseStarted {
            let response = HTTPResponse.error(status: 500, reason: "no_response", message: "the gateway produced no response")
            _ = begin(500, response.headers, contentLength: response.bodyBytes.count)
            response.bodyBytes.withUnsafeBytes { _ = writeBody($0) }
            endResponse()
        } else if !responseEnded {
            abort(.upstreamAborted)
        }
    }

    // MARK: - Ending

    /// nghttp2 closed the stream: after our last frame (the response went out whole) or on a reset.
    func closed(errorCode: UInt32) {
        guard !streamClosed else { return }
        streamClosed = true
        disarm()
        // Bytes the consumer never took go back to the connection's window.
        connection?.session.consumedOnConnection(inbound.count)
        inbound = []
        guard let exchange else { return }
        // A HEAD (or 204/304) answer is whole once its HEADERS went out, whenever the handler says it is done.
        if errorCode == 0, responseEnded || headOnly && responseStarted, outgoing.count == sentOffset {
            finish(exchange, outcomeOverride ?? .completed)
        } else {
            clientLeft(exchange, .clientAborted)
        }
        // The exchange holds this stream (its channel): the reference back is dropped once the stream is over.
        self.exchange = nil
        (writableWaiters, outgoing) = ([], [])
    }

    /// The connection went away under the stream.
    func connectionClosed() { closed(errorCode: HTTP2Session.ErrorCode.cancel.rawValue) }

    private func clientLeft(_ exchange: HTTPExchange, _ outcome: ExchangeOutcome) {
        guard !clientGone || finishedOutcome == nil else { return }
        clientGone = true
        finishBody(.clientGone)
        let gone = exchange.onClientGone
        exchange.onClientGone = nil
        gone?()
        wakeWriters()
        finish(exchange, outcome)
    }

    /// Logs the exchange once (through its owner's callback) and gives back what it held.
    private func finish(_ exchange: HTTPExchange, _ outcome: ExchangeOutcome) {
        guard finishedOutcome == nil else { return }
        finishedOutcome = outcome
        shared.requestFinished(releasing: reserved)
        reserved = 0
        exchange.finished(outcome)
    }

    private func arm(_ milliseconds: Int) { deadline = loop.nowMs + UInt64(milliseconds) }
    private func disarm() { deadline = .max }

    /// The connection's sweep found `deadline` passed.
    func timedOut() {
        disarm()
        switch waiting {
        case .headers:
            // A header block left unfinished blocks the whole connection (no other frame may come between).
            connection?.close()
        case .body, .nothing:
            if bodyEnd != nil {
                finishBody(.timeout)
            }
        case .send:
            guard let exchange, outgoing.count > sentOffset else { return }
            clientLeft(exchange, .timeout)
            connection?.streamStalled(id)
        }
    }
}
