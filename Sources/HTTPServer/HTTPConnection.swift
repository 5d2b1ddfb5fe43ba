import EventLoop
import TLS
import Upstream

/// One client connection on its loop: reads and strictly checks request heads, frames bodies with
/// libhttp-parser, runs one exchange at a time (pipelined requests wait, bounded), writes responses with
/// back-pressure, and enforces the header, body, keep-alive and send timeouts. Confined to its loop's
/// thread (the unchecked Sendable lets a handler's task, which runs on that loop, hold it).
final class HTTPConnection: TCPConnectionDelegate, RequestParserDelegate, ExchangeChannel, ServerConnection, @unchecked Sendable {
    /// The transport: the TCP connection itself, or TLS over it (the same reads, writes and back-pressure).
    private let socket: any ByteStream
    private let shared: ServerShared
    let loop: EventLoop
    let clientAddress: String
    /// Set once the TLS handshake completed (nil on a plain listener): every request's head carries it.
    var tls: TLSInfo?
    /// What the handler works out once for all the connection's requests.
    private let memo = ConnectionMemo()
    /// Whether this connection counts against its address's `per_ip_connection_limit`.
    var countedPerIP = false
    private var timer: LoopTimer!
    private let parser = RequestParser()

    /// Bytes received and not yet consumed: a head being assembled, or what follows the current request.
    private var inbound: [UInt8] = []
    private var scanned = 0
    /// Bytes of `inbound` (an unfinished head, or pipelined bytes) held against the process-wide budget
    /// (see `budgetInbound`).
    private var inboundReserved = 0
    /// The first bytes are free of the budget: a normal request never touches it.
    private static let unbudgetedInbound = 4096
    /// Beyond this, bytes that arrive while a request is handled stop being read (pipelining bound).
    private static let pipelineBound = 64 * 1024
    /// Writes queued beyond this make `writeBody` report "full"; below `lowWatermark` writing resumes.
    static let highWatermark = 64 * 1024
    static let lowWatermark = 16 * 1024

    private enum Phase {
        case idle
        case head
        case handling(HTTPExchange)
        case closed
    }
    private var phase = Phase.idle

    /// Where the head's target and fields lie, from `HeadScan` (its storage reused from request to request).
    private var headParts = HeadScan.Parts()
    private var messageComplete = false

    // Body reading: pieces go to `bodySink` (false = pause until `resumeBody`), then `bodyEnd` once.
    private var bodyLimit = 0
    private var bodyReceived = 0
    private var bodySink: ((UnsafeRawBufferPointer) -> Bool)?
    // The body bytes of the read being parsed, handed to the sink in one piece once the parser has run over
    // the read: a chunked body of one-byte chunks is one parser callback per byte, and each piece passed on
    // was a write to the upstream (200,000 one-byte chunks made 167,000 system calls). A read's only piece
    // (any Content-Length body) is passed where it lies; several are joined.
    private var bodyPiece: UnsafeRawBufferPointer?
    private var bodyJoined: [UInt8] = []
    private var bodyEnd: ((BodyReadError?) -> Void)?
    private var bodyPaused = false
    private var bodyError: BodyReadError?
    private var bodyStarted = false
    /// The framing check of a chunked body, until its last byte (nil for other bodies).
    private var chunkedScan: ChunkedScan?
    private var reserved = 0

    // Response writing.
    private var responseStarted = false
    private var responseEnded = false
    private var chunked = false
    private var headOnly = false
    private var keepAlive = false
    /// The request being answered is HTTP/1.0.
    private var http10 = false
    private(set) var clientGone = false
    private var writableWaiters: [() -> Void] = []
    /// Response bytes gathered during one loop iteration and written together (head and body of a small
    /// response in one system call), flushed at the end of the iteration or past 16 KiB.
    private var outgoing: [UInt8] = []
    private var flushScheduled = false
    private var finishedOutcome: ExchangeOutcome?
    /// How an exchange answered with an error page in place of a failed response ends in the log.
    private var outcomeOverride: ExchangeOutcome?

    init(socket: any ByteStream, shared: ServerShared, loop: EventLoop) {
        self.socket = socket
        self.shared = shared
        self.loop = loop
        clientAddress = socket.peerAddress
        timer = LoopTimer(loop) { [unowned self] in timedOut() }
        parser.delegate = self
        socket.delegate = self
    }

    /// The transport is TLS (its handshake may still be under way).
    var isTLS: Bool { socket is TLSStream }
    /// No request has been read yet: an h2c preface may still come.
    private var fresh = true

    /// The connection turned out to speak HTTP/2: its transport now belongs to an `HTTP2Connection`.
    func handOver() {
        phase = .closed
        timer.close()
    }

    func start() {
        waitForRequest()
        socket.startReading()
    }

    /// An answer before any request, then close: the connection limit.
    func refuse(_ response: HTTPResponse) {
        phase = .closed
        (keepAlive, chunked) = (false, false)
        writeHead(status: response.status, headers: response.headers, contentLength: response.bodyBytes.count)
        response.bodyBytes.withUnsafeBytes { emit($0) }
        responseEnded = true
        timer.start(milliseconds: shared.limits.sendTimeoutMs)
    }

    // MARK: - Reading

    func received(_ bytes: UnsafeRawBufferPointer) {
        switch phase {
        case .idle, .head:
            if fresh, shared.limits.h2c, !isTLS {
                appendInbound(bytes)
                let preface = HTTP2Connection.preface
                if inbound.starts(with: preface.prefix(inbound.count)) {
                    // Prior-knowledge HTTP/2 (`server.h2c`): once the whole preface is in, HTTP/2 takes over.
                    if inbound.count >= preface.count { shared.upgrade(self, to: socket, tls: nil, initial: inbound) }
                    return
                }
                fresh = false
                let pending = inbound
                inbound = []
                return pending.withUnsafeBytes { received($0) }
            }
            fresh = false
            if case .idle = phase {
                phase = .head
                timer.start(milliseconds: shared.limits.headerTimeoutMs)  // the whole head, not per byte
            }
            appendInbound(bytes)
            parseHead()
        case .handling:
            let reading = bodyEnd != nil && !bodyPaused
            if reading && inbound.isEmpty {
                feedBody(bytes)
            } else {
                appendInbound(bytes)
                if reading { feedBufferedBody() }
                // Bytes waiting behind the exchange count against the budget too: past it, reading stops.
                if inbound.count > Self.pipelineBound || !budgetInbound() { socket.stopReading() }
            }
        case .closed:
            break
        }
    }

    func readEnded(error: LoopError?) {
        switch phase {
        case .idle, .head, .closed:
            close()
        case .handling(let exchange):
            // Everything is queued: a client that read it all and closed is no abort; the writes tell.
            if responseEnded && error == nil && !clientGone {
                keepAlive = false
                return
            }
            clientLeft(exchange)
        }
    }

    func drained() {
        if socket.writeFailed {
            if case .handling(let exchange) = phase { clientLeft(exchange) } else { close() }
            return
        }
        if unsentBytes <= Self.lowWatermark { wakeWriters() }
        if unsentBytes == 0 {
            if responseEnded { responseFlushed() } else if case .handling = phase, bodyEnd == nil { timer.stop() }
        } else {
            timer.start(milliseconds: shared.limits.sendTimeoutMs)  // progress: a fresh send timeout
        }
    }

    private func parseHead() {
        guard budgetInbound() else {
            shared.handler.rejected(method: "-", target: "-", clientAddress: clientAddress, status: 503, reason: "server_busy")
            socket.stopReading()
            return refuse(BodyReadError.overloaded.response)
        }
        var parts = headParts
        headParts = HeadScan.Parts()  // the local copy stays uniquely referenced
        let outcome = inbound.withUnsafeBytes { HeadScan.findEnd($0, from: scanned, parts: &parts) }
        headParts = parts
        switch outcome {
        case .incomplete(let upTo):
            scanned = upTo
            if inbound.count > shared.limits.maxHeaderBytes { rejectOversizedHead() }
        case .invalid(let violation):
            reject(violation)
        case .complete(let start, let end):
            guard end - start <= shared.limits.maxHeaderBytes else { return rejectOversizedHead() }
            beginRequest(headStart: start, headEnd: end)
        }
    }

    /// Received bytes not consumed yet (an unfinished head, pipelined requests) count against the budget of
    /// buffered bodies beyond their first 4 KiB, in 4 KiB steps, the reservation following `inbound` both
    /// ways: 12,000 connections each holding a 32 KiB head unfinished took 260 MiB, bounded only by their number.
    private func budgetInbound() -> Bool {
        let needed = max(0, inbound.count - Self.unbudgetedInbound + 4095) / 4096 * 4096
        if needed < inboundReserved {
            shared.bodyBudget.release(inboundReserved - needed)
        } else if needed > inboundReserved {
            guard shared.bodyBudget.reserve(needed - inboundReserved) else { return false }
        }
        inboundReserved = needed
        return true
    }

    /// Changed on a copy taken out and put back: an access held across the array's own code (which may free a
    /// buffer) would make every access to `inbound` an exclusivity-checked one (a dozen a request).
    private func appendInbound(_ bytes: UnsafeRawBufferPointer) {
        var buffer = inbound
        inbound = []
        buffer.append(contentsOf: bytes)
        inbound = buffer
    }

    private func releaseInbound() {
        shared.bodyBudget.release(inboundReserved)
        inboundReserved = 0
    }

    /// 414 when the request line alone is over the limit (the target is what is too long), else 431.
    private func rejectOversizedHead() {
        let limit = shared.limits.maxHeaderBytes
        if (inbound.firstIndex(of: 0x0A) ?? inbound.count) > limit {
            return reject(RequestFraming.Violation(status: 414, reason: "uri_too_long", message: "the request line exceeds \(limit) bytes"))
        }
        reject(RequestFraming.Violation(status: 431, reason: "headers_too_large", message: "the request line and headers exceed \(limit) bytes"))
    }

    private func beginRequest(headStart: Int, headEnd: Int) {
        parser.reset()
        messageComplete = false
        // The fields and target are read where HeadScan found them, the framing from them when HeadVerdict can.
        let (fed, fields, path, query, targetIsOriginForm) = inbound.withUnsafeBytes { bytes in
            let head = UnsafeRawBufferPointer(rebasing: bytes[headStart..<headEnd])
            let fields = headParts.fields.map { field in
                HTTPField(name: UnsafeRawBufferPointer(rebasing: head[field.name]), value: String(decoding: head[field.value], as: UTF8.self))
            }
            let target = head[headParts.target]
            let (path, query) = Self.split(target)
            // Visible ASCII only (RFC 9112); origin form; no "#": an upstream cutting the target at a fragment
            // would see another path than the one routed here.
            let originForm = target.first == UInt8(ascii: "/") && target.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != 0x23 })
            return (parser.readHead(head, parts: headParts, fields: fields), fields, path, query, originForm)
        }
        if case .failed(let detail) = fed, !parser.isUpgrade {
            // The parser refuses conflicting framing itself; the framing judge names it when it can.
            if case .failure(let violation) = RequestFraming.judge(fields, httpVersion: "HTTP/1.1") { return reject(violation) }
            let framing = fields.contains { $0.known == .contentLength || $0.known == .transferEncoding }
            return reject(RequestFraming.Violation(status: 400, reason: framing ? "ambiguous_framing" : "bad_request",
                                                   message: "malformed request: \(detail)"))
        }
        var rest = inbound
        inbound = []
        rest.removeFirst(headEnd)
        // A big head's buffer is not kept meanwhile.
        if !rest.isEmpty || rest.capacity <= 4096 { inbound = rest }
        scanned = 0
        let method = parser.method
        let version = parser.minorVersion == 0 ? "HTTP/1.0" : "HTTP/1.1"  // HeadScan admitted no other
        var rawTarget: String { query.map { path + "?" + $0 } ?? path }  // for refusals' log lines
        guard targetIsOriginForm else {
            return reject(RequestFraming.Violation(status: 400, reason: "bad_request_target",
                                                   message: "the request target must be an absolute path of visible ASCII without a fragment"),
                          method: method, target: rawTarget)
        }
        if method == "CONNECT" || parser.isUpgrade && method != "GET" {
            return reject(RequestFraming.Violation(status: 405, reason: "method_not_allowed", message: "\(method) is not proxied"),
                          method: method, target: rawTarget)
        }
        let framing: RequestFraming
        switch RequestFraming.judge(fields, httpVersion: version) {
        case .success(let judged): framing = judged
        case .failure(let violation): return reject(violation, method: method, target: rawTarget)
        }
        // The framing the gateway judged is the one the parser applies, or the request goes no further.
        guard (framing == .chunked) == parser.isChunked else {
            return reject(RequestFraming.Violation(status: 400, reason: "ambiguous_framing",
                                                   message: "Transfer-Encoding is not exactly \"chunked\""),
                          method: method, target: rawTarget)
        }
        guard !ConnectionTokens.exceedLimit(fields) else {
            return reject(RequestFraming.Violation(status: 400, reason: "bad_header",
                                                   message: "Connection lists more than \(ConnectionTokens.limit) names"),
                          method: method, target: rawTarget)
        }
        // The head is held until the exchange ends (and copied a few times on its way upstream): it counts
        // against the same process-wide budget as buffered bodies, so big heads cannot pile up without bound.
        let headBytes = headEnd - headStart
        _ = budgetInbound()  // the head is held from here on as the exchange's; what follows it still counts
        guard shared.bodyBudget.reserve(headBytes) else {
            shared.handler.rejected(method: method, target: rawTarget, clientAddress: clientAddress, status: 503, reason: "server_busy")
            socket.stopReading()
            return refuse(BodyReadError.overloaded.response)
        }
        let head = RequestHead(method: method, path: path, query: query, headers: fields, clientAddress: clientAddress,
                               httpVersion: version, framing: framing, tls: tls)
        keepAlive = parser.shouldKeepAlive
        http10 = version == "HTTP/1.0"
        if parser.isUpgrade { messageComplete = true }
        let exchange = HTTPExchange(head: head, loop: loop, connection: self, memo: memo)
        phase = .handling(exchange)
        (bodyError, bodyStarted, reserved, bodyReceived, bodyPaused) = (nil, false, headBytes, 0, false)
        chunkedScan = framing == .chunked ? ChunkedScan(maxTrailerBytes: shared.limits.maxHeaderBytes) : nil
        (responseStarted, responseEnded, chunked, headOnly, clientGone, finishedOutcome, outcomeOverride) = (false, false, false, method == "HEAD", false, nil, nil)
        timer.stop()
        if inbound.count > Self.pipelineBound { socket.stopReading() }
        shared.requestStarted()
        // Answered from here where nothing waits; a handler that waits starts its own task.
        // `done` captures the connection alone, which allocates nothing (with the exchange too, a context was
        // allocated every request). A request starts only once the handler of the one before returned, so the
        // call is always about the current exchange.
        shared.handler.start(exchange) { [self] in handlerReturned() }
    }

    /// Path and query, split at the first "?" of the target's bytes.
    private static func split(_ target: Slice<UnsafeRawBufferPointer>) -> (path: String, query: String?) {
        guard let mark = target.firstIndex(of: UInt8(ascii: "?")) else { return (String(decoding: target, as: UTF8.self), nil) }
        return (String(decoding: target[..<mark], as: UTF8.self), String(decoding: target[(mark + 1)...], as: UTF8.self))
    }

    // MARK: - Parser callbacks

    func parsedBody(_ bytes: UnsafeRawBufferPointer) {
        guard bodyError == nil, bodySink != nil else { return }
        guard bodyReceived + bytes.count <= bodyLimit else {
            bodyError = .tooLarge(limit: bodyLimit)
            return
        }
        bodyReceived += bytes.count
        if bodyPiece == nil, bodyJoined.isEmpty {
            bodyPiece = bytes
            return
        }
        var joined = bodyJoined  // taken out and put back, as `inbound`
        bodyJoined = []
        if let first = bodyPiece {
            joined.append(contentsOf: first)
            bodyPiece = nil
        }
        joined.append(contentsOf: bytes)
        bodyJoined = joined
    }

    func parsedMessageComplete() { messageComplete = true }

    // MARK: - Body

    /// What `readBody` would deliver at once when there is nothing to wait for (a request without a body,
    /// or one already read), so the exchange needs no continuation; nil when the body has to be read.
    func bodyAtOnce(limit: Int) -> Result<[UInt8], BodyReadError>? {
        guard case .handling(let exchange) = phase, !clientGone else { return .failure(.clientGone) }
        guard !bodyStarted else { return .success([]) }
        guard messageComplete else { return nil }
        bodyStarted = true
        if case .contentLength(let length) = exchange.head.framing, length > limit {
            keepAlive = false
            return .failure(.tooLarge(limit: limit))
        }
        return .success([])
    }

    /// The whole body, held within the process-wide budget.
    func readBody(limit: Int, _ done: @escaping (Result<[UInt8], BodyReadError>) -> Void) {
        var collected: [UInt8] = []
        streamBody(limit: limit, sink: { [unowned self] bytes in
            guard shared.bodyBudget.reserve(bytes.count) else {
                bodyError = .overloaded
                return true
            }
            reserved += bytes.count
            collected.append(contentsOf: bytes)
            return true
        }, end: { error in done(error.map { .failure($0) } ?? .success(collected)) })
    }

    /// The body piece by piece as it arrives: `sink` answering false pauses reading (the socket's too)
    /// until `resumeBody()`; `end` comes once, nil after the last byte.
    func streamBody(limit: Int, sink: @escaping (UnsafeRawBufferPointer) -> Bool, end: @escaping (BodyReadError?) -> Void) {
        guard case .handling(let exchange) = phase, !clientGone else { return end(.clientGone) }
        guard !bodyStarted else { return end(nil) }
        bodyStarted = true
        if case .contentLength(let length) = exchange.head.framing, length > limit {
            keepAlive = false  // the body stays unread
            return end(.tooLarge(limit: limit))
        }
        if messageComplete { return end(nil) }
        if exchange.head.httpVersion == "HTTP/1.1", exchange.head.headers.contains(where: { $0.hasName("Expect") && $0.value.lowercased() == "100-continue" }) {
            socket.write(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
        }
        (bodyLimit, bodySink, bodyEnd) = (limit, sink, end)
        feedBufferedBody()
        if bodyEnd != nil && !bodyPaused {
            socket.startReading()
            timer.start(milliseconds: shared.limits.bodyTimeoutMs)
        }
    }

    /// The consumer of a streamed body caught up.
    func resumeBody() {
        guard bodyPaused, bodyEnd != nil else { return }
        bodyPaused = false
        feedBufferedBody()
        if bodyEnd != nil && !bodyPaused {
            socket.startReading()
            timer.start(milliseconds: shared.limits.bodyTimeoutMs)
        }
    }

    private func feedBufferedBody() {
        guard !inbound.isEmpty else { return }
        let pending = inbound
        inbound = []
        pending.withUnsafeBytes { feedBody($0) }
        _ = budgetInbound()  // fewer bytes wait now: never more
    }

    private func feedBody(_ bytes: UnsafeRawBufferPointer) {
        // Chunked framing is checked before the parser sees it, and both must find the same end.
        var scannedEnd: Int?
        // Scanned on a copy taken out and put back, as `inbound`.
        var scan = chunkedScan
        chunkedScan = nil
        let scanned = scan?.scan(bytes)
        chunkedScan = scan
        switch scanned {
        case .invalid(let problem)?:
            if bodyError == nil { bodyError = .badChunk(problem) }
        case .ended(let end)?:
            (scannedEnd, chunkedScan) = (end, nil)
            fallthrough
        case .more?, nil:
            let fed = parser.feed(bytes)
            deliverReadBody()
            switch fed {
            case .consumed:
                if scannedEnd != nil, bodyError == nil { bodyError = .badChunk("the body's end is read two ways") }
            case .messageComplete(let consumed):
                if chunkedScan != nil || scannedEnd.map({ $0 != consumed }) == true, bodyError == nil {
                    bodyError = .badChunk("the body's end is read two ways")
                }
                appendInbound(UnsafeRawBufferPointer(rebasing: bytes[consumed...]))  // the next pipelined request
            case .failed(let detail):
                if bodyError == nil { bodyError = .malformed(detail) }
            }
        }
        if let bodyError {
            keepAlive = false
            socket.stopReading()
            finishBody(bodyError)
        } else if messageComplete {
            finishBody(nil)
        } else if bodyPaused {
            // The consumer's pace now, not the client's: no body timeout while it catches up.
            socket.stopReading()
            timer.stop()
        } else {
            timer.start(milliseconds: shared.limits.bodyTimeoutMs)  // between reads
        }
    }

    /// What the parser found of the body in the read just fed, to the sink at once (the piece points into it).
    private func deliverReadBody() {
        defer { (bodyPiece, bodyJoined) = (nil, []) }
        guard bodyError == nil, let sink = bodySink else { return }
        let taken: Bool
        if let piece = bodyPiece {
            taken = sink(piece)
        } else if !bodyJoined.isEmpty {
            taken = bodyJoined.withUnsafeBytes { sink($0) }
        } else {
            return
        }
        if !taken { bodyPaused = true }
    }

    private func finishBody(_ error: BodyReadError?) {
        guard let end = bodyEnd else { return }
        (bodyEnd, bodySink, bodyPaused) = (nil, nil, false)
        timer.stop()
        if inbound.count > Self.pipelineBound { socket.stopReading() }
        end(error)
    }

    // MARK: - Writing

    var canWrite: Bool { unsentBytes < Self.highWatermark && !clientGone }

    func whenWritable(_ wake: @escaping () -> Void) {
        if canWrite || clientGone { return wake() }
        var waiters = writableWaiters  // taken out and put back, as `inbound`
        writableWaiters = []
        waiters.append(wake)
        writableWaiters = waiters
    }

    private func wakeWriters() {
        let waiters = writableWaiters
        writableWaiters = []
        waiters.forEach { $0() }
        if case .handling(let exchange) = phase, !clientGone { exchange.onWritable?() }
    }

    /// False when the head cannot be sent as given (a status outside 200–599, a header that could split the
    /// response): a JSON 500 goes out in its place, and whatever body follows is dropped.
    func startResponse(status: Int, headers: [HTTPField], contentLength: Int?) -> Bool {
        guard case .handling = phase, !responseStarted else { return false }
        let safeHeaders = headers.areSafeToSend
        guard safeHeaders, (200...599).contains(status) else {
            let reason = safeHeaders ? "invalid_response_status" : "invalid_response_header"
            let error = HTTPResponse.error(status: 500, reason: reason, message: "the gateway produced an invalid response")
            keepAlive = false
            begin(status: 500, headers: error.headers, contentLength: error.bodyBytes.count)
            error.bodyBytes.withUnsafeBytes { _ = writeBody($0) }
            endResponse()
            return false
        }
        begin(status: status, headers: headers, contentLength: contentLength)
        return true
    }

    private func begin(status: Int, headers: [HTTPField], contentLength: Int?) {
        guard case .handling(let exchange) = phase else { return }
        responseStarted = true
        exchange.status = status
        // A body the handler left unread cannot be skipped safely: the connection ends with this response.
        if !messageComplete { keepAlive = false }
        if shared.isDraining { keepAlive = false }
        let noBody = status == 204 || status == 304 || (100..<200).contains(status)
        if contentLength == nil && !noBody && !headOnly {
            if exchange.head.httpVersion == "HTTP/1.1" { chunked = true } else { keepAlive = false }
        }
        if noBody { headOnly = true }
        writeHead(status: status, headers: headers, contentLength: noBody ? nil : contentLength)
    }

    /// Built as bytes (string concatenation was the biggest single cost of a relayed response's head), straight
    /// into the outgoing buffer: taken out meanwhile, so it stays uniquely referenced and is not copied. Room
    /// for the longest form is made once, then one pass of copies into it (an `Array.append` per piece was
    /// most of what the head cost).
    private func writeHead(status: Int, headers: [HTTPField], contentLength: Int?) {
        let reason = Self.reasonPhrase(status)
        let (chunked, keepAlive, http10) = (chunked, keepAlive, http10)
        // The status line, Content-Length, Transfer-Encoding, Connection and the blank line at their longest.
        var room = 112 + reason.utf8.count
        for index in headers.indices { room += headers[index].name.utf8.count + headers[index].value.utf8.count + 4 }
        var head = outgoing
        outgoing = []
        head.append(addingCapacity: room) { head in
            head.append(ascii: "HTTP/1.1 ")
            head.append(decimal: status)
            head.append(UInt8(ascii: " "))
            head.append(utf8: reason)
            head.appendLineEnd()
            for index in headers.indices where !Self.isFraming(headers[index].known) {
                head.append(utf8: headers[index].name)
                head.append(UInt8(ascii: ":"))
                head.append(UInt8(ascii: " "))
                head.append(utf8: headers[index].value)
                head.appendLineEnd()
            }
            if let contentLength {
                head.append(ascii: "Content-Length: ")
                head.append(decimal: contentLength)
                head.append(ascii: "\r\n")
            }
            if chunked { head.append(ascii: "Transfer-Encoding: chunked\r\n") }
            // HTTP/1.0 closes unless told otherwise.
            if !keepAlive { head.append(ascii: "Connection: close\r\n") } else if http10 { head.append(ascii: "Connection: keep-alive\r\n") }
            head.appendLineEnd()
        }
        outgoing = head
        outgoingGrew()
    }

    private func emit(_ bytes: UnsafeRawBufferPointer) {
        var pending = outgoing  // taken out and put back, as `inbound`
        outgoing = []
        pending.append(contentsOf: bytes)
        outgoing = pending
        outgoingGrew()
    }

    /// Flushes past 16 KiB, else at the end of the loop iteration.
    private func outgoingGrew() {
        if outgoing.count >= 16 * 1024 {
            flushOutgoing()
        } else if !flushScheduled {
            flushScheduled = true
            loop.executeOnLoop { [self] in flushOutgoing() }
        }
    }

    private func emit(_ bytes: [UInt8]) { bytes.withUnsafeBytes { emit($0) } }

    private func flushOutgoing() {
        flushScheduled = false
        guard !outgoing.isEmpty, !socket.isClosed else { return }
        var written = outgoing  // taken out and put back, as `inbound`
        outgoing = []
        socket.write(written)
        // What the socket could not take is copied into its queue: a big buffer kept here as well would
        // double what a stalled stream holds (200 clients not reading 10 MB each: 10 MiB more RSS).
        guard written.capacity <= 16 * 1024 else { return }
        written.removeAll(keepingCapacity: true)
        outgoing = written
    }

    /// Bytes handed to the connection and not yet taken by the kernel.
    private var unsentBytes: Int { socket.queuedBytes + outgoing.count }

    func writeBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard case .handling(let exchange) = phase, responseStarted, !responseEnded, !clientGone, !headOnly else { return canWrite }
        guard bytes.count > 0 else { return canWrite }
        if chunked {
            emit(Array((String(bytes.count, radix: 16) + "\r\n").utf8))
            emit(bytes)
            emit(Self.crlf)
        } else {
            emit(bytes)
        }
        exchange.bytesSent += bytes.count
        timer.start(milliseconds: shared.limits.sendTimeoutMs)
        return canWrite
    }

    func endResponse() {
        guard case .handling(let exchange) = phase, responseStarted, !responseEnded else { return }
        responseEnded = true
        if clientGone { return }
        if chunked && !headOnly { emit(Self.lastChunk) }
        if unsentBytes > 0 {
            timer.start(milliseconds: shared.limits.sendTimeoutMs)
        } else {
            // Everything was written already (no last chunk to send): no write callback will come to say so.
            loop.executeOnLoop { [self] in
                if case .handling(let current) = phase, current === exchange, unsentBytes == 0 { responseFlushed() }
            }
        }
    }

    func abort(_ outcome: ExchangeOutcome) {
        guard case .handling(let exchange) = phase else { return }
        if !responseStarted {
            // Nothing sent yet: a clean error is still possible.
            outcomeOverride = outcome
            let response = HTTPResponse.error(status: 502, reason: "upstream_aborted", message: "the upstream response failed")
            begin(status: response.status, headers: response.headers, contentLength: response.bodyBytes.count)
            response.bodyBytes.withUnsafeBytes { _ = writeBody($0) }
            endResponse()
            return
        }
        finish(exchange, outcome)
        close()
    }

    private func responseFlushed() {
        guard case .handling(let exchange) = phase else {
            if case .closed = phase { close() }  // a refusal was sent
            return
        }
        finish(exchange, outcomeOverride ?? .completed)
        if keepAlive && handlerDone { nextRequest() } else if !keepAlive { close() }
    }

    private var handlerDone = false
    private func handlerReturned() {
        guard !handlerDone else { return }  // once per exchange
        handlerDone = true
        guard case .handling = phase else { return }
        if clientGone {
            close()
        } else if !responseStarted {
            let response = HTTPResponse.error(status: 500, reason: "no_response", message: "the gateway produced no response")
            begin(status: 500, headers: response.headers, contentLength: response.bodyBytes.count)
            response.bodyBytes.withUnsafeBytes { _ = writeBody($0) }
            endResponse()
        } else if !responseEnded {
            abort(.upstreamAborted)
        } else if finishedOutcome != nil {
            if clientGone || !keepAlive { close() } else { nextRequest() }
        }
    }

    /// Logs the exchange once (through its owner's callback) and gives back what it held.
    private func finish(_ exchange: HTTPExchange, _ outcome: ExchangeOutcome) {
        guard finishedOutcome == nil else { return }
        finishedOutcome = outcome
        shared.requestFinished(releasing: reserved)
        reserved = 0
        exchange.finished(outcome)
    }

    private func clientLeft(_ exchange: HTTPExchange) {
        guard !clientGone else { return }
        clientGone = true
        keepAlive = false
        socket.stopReading()
        finishBody(.clientGone)
        let gone = exchange.onClientGone
        exchange.onClientGone = nil
        gone?()
        wakeWriters()
        finish(exchange, .clientAborted)
        if handlerDone { close() }
    }

    private func nextRequest() {
        handlerDone = false
        waitForRequest()
        socket.startReading()
        if !inbound.isEmpty {
            phase = .head
            timer.start(milliseconds: shared.limits.headerTimeoutMs)
            parseHead()
        }
    }

    private func waitForRequest() {
        phase = .idle
        // An idle connection keeps no buffer a large head or response left behind: 10,000 of them must stay small.
        if inbound.isEmpty && inbound.capacity > 4096 { inbound = [] }
        if outgoing.isEmpty && outgoing.capacity > 4096 { outgoing = [] }
        if headParts.fields.capacity > 64 { headParts = HeadScan.Parts() }
        shared.isDraining ? close() : timer.start(milliseconds: shared.limits.keepaliveTimeoutMs)
    }

    /// Closes the connection if it waits for a request; the drain leaves busy ones to finish.
    func closeIfIdle() {
        if case .idle = phase { close() }
    }

    // MARK: - Timeouts and errors

    private func timedOut() {
        switch phase {
        case .idle:
            close()
        case .head:
            reject(RequestFraming.Violation(status: 408, reason: "header_timeout",
                                            message: "the request head did not arrive within \(shared.limits.headerTimeoutMs) ms"))
        case .handling(let exchange):
            if bodyEnd != nil {
                finishBody(.timeout)
                keepAlive = false
            } else if unsentBytes > 0 {
                // The client stopped reading: the producer is told to stop, the connection goes.
                let gone = exchange.onClientGone
                exchange.onClientGone = nil
                clientGone = true
                gone?()
                wakeWriters()
                finish(exchange, .timeout)
                close()
            }
        case .closed:
            close()
        }
    }

    /// A refusal by the server itself: answered, reported to the handler for logs and metrics, closed.
    private func reject(_ violation: RequestFraming.Violation, method: String = "-", target: String = "-") {
        shared.handler.rejected(method: method, target: target, clientAddress: clientAddress,
                                status: violation.status, reason: violation.reason)
        socket.stopReading()
        refuse(HTTPResponse.error(status: violation.status, reason: violation.reason, message: violation.message))
    }

    func close() {
        guard !socket.isClosed else { return }
        if case .handling(let exchange) = phase, finishedOutcome == nil {
            clientGone = true
            let gone = exchange.onClientGone
            exchange.onClientGone = nil
            gone?()
            finish(exchange, .clientAborted)
        }
        phase = .closed
        releaseInbound()
        timer.close()
        if !clientGone { flushOutgoing() }  // what was said before an abort still goes out, then the close
        socket.close()
        finishBody(.clientGone)
        wakeWriters()
        shared.connectionClosed(self)
    }

    private static let crlf: [UInt8] = [0x0D, 0x0A]
    private static let lastChunk = Array("0\r\n\r\n".utf8)

    private static func isFraming(_ name: KnownHeader) -> Bool {
        switch name {
        case .connection, .keepAlive, .contentLength, .transferEncoding: true
        default: false
        }
    }

    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 206: "Partial Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 303: "See Other"
        case 304: "Not Modified"
        case 307: "Temporary Redirect"
        case 308: "Permanent Redirect"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        default: "Status"
        }
    }
}

extension HTTPResponse {
    /// The body of a whole response (empty for a stream).
    var bodyBytes: [UInt8] {
        if case .bytes(let bytes) = body { return bytes }
        return []
    }
}
