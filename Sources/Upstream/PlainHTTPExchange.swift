import Dispatch
import EventLoop

/// One request/response exchange with an `http://` upstream on the event loop, without curl: a kept-alive
/// connection from the loop's pool or a new one, the request head (and an in-memory body) in one write,
/// the response framed by ResponseParser, paced both ways (the receiver's `false` stops reading the upstream;
/// a streamed upload is taken no faster than the socket sends it). Loop thread only.
final class PlainHTTPExchange: UpstreamStreamBackend, UploadConsumer {
    private enum Phase { case connecting, awaitingHead, body, done }
    /// What the watchdog is timing now, for its message.
    private enum Clock { case connect, firstByte, idle, total }

    private let pool: PlainHTTPPool
    private let endpoint: PlainHTTPEndpoint
    private let request: UpstreamRequest
    private let timeouts: UpstreamTimeouts
    private let upload: UpstreamUpload?
    private let framing: BodyFraming
    /// HEAD: the response has no body whatever its head says.
    private let isHead: Bool
    private let maxIdle: Int
    private let keepAliveMs: Int
    /// The connect timeout's clock, from the pool; once connected, the connection's own times the exchange.
    private var connectWatchdog: Watchdog?
    private var phase = Phase.connecting
    private var clock = Clock.connect
    private var connection: PlainHTTPConnection?
    /// A new connection under way: given up (its socket closed) when the exchange times out or is cancelled.
    private var connecting: TCPConnection.ConnectAttempt?
    private let startNs = DispatchTime.now().uptimeNanoseconds
    private var totalDeadlineNs: UInt64?
    private var reused = false
    private var retried = false
    private var connectMs = 0.0
    private var firstByteMs = 0.0
    /// A response byte arrived on the current connection (a kept-alive one that failed before it is retried).
    private var receivedAny = false

    // The response head as the parser reports it.
    private(set) var status = 0
    private(set) var head = ResponseHead()
    private var headComplete = false
    private var messageComplete = false
    /// Bytes followed the final response: the connection is not reused.
    private var trailingBytes = false
    private(set) var remoteAddress: String?

    /// `open`'s caller, waiting for the final response head (told through `opened`, without a closure around it).
    private var opener: ((Result<UpstreamStream, UpstreamError>) -> Void)?
    /// The exchange itself until `opener` has the stream: the connection's reference to it is unowned.
    private var heldUntilOpened: PlainHTTPExchange?
    // While the body is relayed.
    private var onBody: ((UnsafeRawBufferPointer) -> Bool)?
    private var onEnd: ((UpstreamError?) -> Void)?
    /// Body bytes nobody takes yet (before `relay`, or while the receiver is full); bounded by stopping reads.
    /// Changed on a local copy taken out and put back: an access held across the array's own code or the
    /// receiver would make every access to it an exclusivity-checked one.
    private var pending: [UInt8] = []
    private var receiverFull = false
    private var readingStopped = false
    /// How the exchange ended (nil: still running); told to `onEnd` once the pending bytes went out.
    private var outcome: UpstreamError??
    private var ended = false
    private var uploadSent = false

    /// The response head (interim heads included) is bounded.
    static let headLimit = 64 * 1024
    /// Body bytes held for a receiver before the upstream socket stops being read.
    static let pendingLimit = 64 * 1024

    init(request: UpstreamRequest, endpoint: PlainHTTPEndpoint, pool: PlainHTTPPool, timeouts: UpstreamTimeouts,
         upload: UpstreamUpload?, maxIdle: Int, keepAliveMs: Int) {
        self.request = request
        self.endpoint = endpoint
        self.pool = pool
        self.timeouts = timeouts
        self.upload = upload
        self.maxIdle = maxIdle
        self.keepAliveMs = keepAliveMs
        framing = request.framing(upload: upload)
        isHead = request.method == "HEAD"
        if timeouts.totalMs > 0 { totalDeadlineNs = startNs + UInt64(timeouts.totalMs) * 1_000_000 }
    }

    deinit {
        // Dropped without `relay`'s end or `cancel` (a caller that gave up): the connection cannot be reused.
        if let connection = detach(), !ended { connection.close() }
        dropConnectWatchdog()
    }

    var timing: UpstreamTiming { UpstreamTiming(connectMs: connectMs, firstByteMs: firstByteMs, reusedConnection: reused) }

    /// Sends the request (call on the pool's loop); `opened` is told once the final response head arrived
    /// (or why none will).
    static func open(_ request: UpstreamRequest, endpoint: PlainHTTPEndpoint, pool: PlainHTTPPool, timeouts: UpstreamTimeouts,
                     upload: UpstreamUpload?, maxIdle: Int, keepAliveMs: Int,
                     _ opened: @escaping (Result<UpstreamStream, UpstreamError>) -> Void) {
        PlainHTTPExchange(request: request, endpoint: endpoint, pool: pool, timeouts: timeouts, upload: upload,
                          maxIdle: maxIdle, keepAliveMs: keepAliveMs).start(opened)
    }

    private func start(_ opener: @escaping (Result<UpstreamStream, UpstreamError>) -> Void) {
        self.opener = opener
        heldUntilOpened = self
        if let idle = pool.take(endpoint.poolKey) {
            reused = true
            attach(idle)
            send()
        } else {
            connect()
        }
    }

    private func connect() {
        phase = .connecting
        let watchdog = pool.takeWatchdog()
        watchdog.expired = { [unowned self] in timedOut() }  // disarmed before the exchange goes (`giveBack`)
        connectWatchdog = watchdog
        arm(timeouts.connectMs, .connect)
        connecting = TCPConnection.connect(pool.loop, host: endpoint.host, port: endpoint.port) { [self] result in
            connecting = nil
            dropConnectWatchdog()
            guard phase == .connecting, !ended, outcome == nil else {
                if case .success(let late) = result { late.close() }  // the exchange timed out or was cancelled meanwhile
                return
            }
            switch result {
            case .failure(let error):
                fail(.unavailable("could not connect to \(endpoint.poolKey): \(error)"))
            case .success(let tcp):
                connectMs = Self.milliseconds(since: startNs)
                attach(PlainHTTPConnection(tcp, key: endpoint.poolKey, port: endpoint.port, loop: pool.loop))
                tcp.startReading()
                send()
            }
        }
    }

    private func attach(_ connection: PlainHTTPConnection) {
        self.connection = connection
        remoteAddress = connection.remoteAddress
        connection.exchange = self
        connection.parser.reset()
        receivedAny = false
    }

    /// The head and an in-memory body in one write; a streamed body follows as the client sends it.
    private func send() {
        guard let tcp = connection?.tcp else { return }
        phase = .awaitingHead
        arm(timeouts.firstByteMs, .firstByte)
        var head = pool.borrowScratch()
        request.appendHead(to: &head, endpoint: endpoint, framing: framing)
        if upload == nil, framing != .none { head += request.body }
        head.withUnsafeBytes { tcp.write($0) }
        pool.giveBack(scratch: head)
        if let upload {
            upload.consumer = self
            pumpUpload()
        }
    }

    // MARK: - Upload

    func uploadReady() { pumpUpload() }

    /// Moves what the client sent so far to the socket while its queue is short (libuv's queue holds copies,
    /// so the client's side is paused by the upload's own watermarks meanwhile).
    private func pumpUpload() {
        guard let upload, !uploadSent, phase != .connecting, outcome == nil, let tcp = connection?.tcp else { return }
        if upload.isAborted { return fail(.protocolError("the request body broke off before it was sent whole")) }
        guard tcp.queuedBytes < Self.pendingLimit else { return }
        let finished = upload.takeAll { bytes in
            guard framing == .chunked else { return tcp.write(bytes) }
            var chunk = pool.borrowScratch()
            chunk += String(bytes.count, radix: 16).utf8
            chunk += "\r\n".utf8
            chunk.append(contentsOf: bytes.assumingMemoryBound(to: UInt8.self))
            chunk += "\r\n".utf8
            chunk.withUnsafeBytes { tcp.write($0) }
            pool.giveBack(scratch: chunk)
        }
        guard finished else { return }
        uploadSent = true
        upload.consumer = nil
        if framing == .chunked { tcp.write(Array("0\r\n\r\n".utf8)) }
    }

    // MARK: - Socket events

    func received(_ bytes: UnsafeRawBufferPointer) {
        guard let connection, outcome == nil else { return }
        if !receivedAny {
            receivedAny = true
            firstByteMs = Self.milliseconds(since: startNs)
        }
        // The parser is the connection's: it stays alive through the feed even if the exchange lets go of it.
        let fed = withExtendedLifetime(connection) { connection.parser.feed(bytes) }
        guard self.connection != nil else { return }  // the receiver cancelled while taking body bytes
        if connection.parser.headBytes > Self.headLimit { return fail(.protocolError("the upstream's response head exceeds \(Self.headLimit) bytes")) }
        switch fed {
        case .failed(let reason):
            return fail(.protocolError("the upstream's response is not valid HTTP/1.1: \(reason)"))
        case .messageComplete(let consumed):
            trailingBytes = consumed < bytes.count
        case .consumed:
            break
        }
        if headComplete && phase == .awaitingHead {
            phase = .body
            arm(timeouts.idleMs, .idle)
            opened(.success(()))
            guard !ended else { return }  // the receiver cancelled on seeing the head
        }
        if messageComplete { return complete() }
        if phase == .body {
            if receiverFull || pending.count >= Self.pendingLimit {
                // Not the upstream's silence: the receiver is the one not taking bytes.
                connection.watchdog.stop()
                stopReading()
            } else {
                arm(timeouts.idleMs, .idle)
            }
        }
    }

    func readEnded(error: LoopError?) {
        guard let connection, outcome == nil else { return }
        if !receivedAny {
            // A kept-alive connection the upstream closed just as it was reused: once more on a new one, for an
            // idempotent request only (RFC 9110 9.2.2; nginx's rule too): the upstream may have read and run a
            // POST before closing, and a purchase must not happen twice. Never a body streamed from the client.
            if reused, !retried, upload == nil, request.isIdempotent { return retry() }
            // Worded as curl's refusal (CurlResendGuard): what an operator searches the log for.
            guard reused else {
                return fail(.unavailable(error.map { "the upstream connection failed before a response: \($0)" }
                    ?? "the upstream closed the connection without a response"))
            }
            return fail(.unavailable("the reused upstream connection closed before a response" + (error.map { " (\($0))" } ?? "")
                + "; " + (upload == nil ? request.method : "a streamed body") + " is not sent again (the upstream may have run it)"))
        }
        if let error { return fail(.unavailable("the upstream connection failed: \(error)")) }
        switch withExtendedLifetime(connection, { connection.parser.feedEndOfStream() }) {
        case .messageComplete:
            complete()  // a body read until the connection closed
        case .failed, .consumed:
            fail(.protocolError(headComplete ? "the upstream closed the connection before the end of the body"
                : "the upstream closed the connection in the middle of the response head"))
        }
    }

    func drained() {
        guard let tcp = connection?.tcp, outcome == nil else { return }
        if tcp.writeFailed {
            // The write failed: the upstream had closed its side, so it read no whole request (any method).
            if !receivedAny, reused, !retried, upload == nil { return retry() }
            return fail(.unavailable("sending the request to the upstream failed"))
        }
        pumpUpload()
    }

    private func retry() {
        retried = true
        reused = false
        detach()?.close()
        connect()
    }

    // MARK: - Parser events

    func parsedHeadersComplete(status: Int) -> Bool {
        // An interim response (100, 103): the final one follows. It never has a body (RFC 9112 §6.3), whatever
        // its head says: bytes after it are the final response's, or the upstream's protocol error.
        guard status >= 200 else { return true }
        self.status = status
        if let connection { head = connection.parser.takeHead() }
        headComplete = true
        return isHead || status == 204 || status == 304
    }

    func parsedBody(_ bytes: UnsafeRawBufferPointer) {
        if let onBody, !receiverFull, pending.isEmpty {
            // Taken whole even when the receiver then reports full: only later bytes wait.
            receiverFull = !onBody(bytes)
        } else {
            var waiting = pending
            pending = []
            waiting.append(contentsOf: bytes.assumingMemoryBound(to: UInt8.self))
            pending = waiting
        }
    }

    func parsedMessageComplete(status: Int) -> Bool {
        guard status >= 200 else { return false }
        messageComplete = true
        return true
    }

    // MARK: - Ending

    /// The final response was read whole: its connection goes back to the pool if HTTP allows and nothing
    /// of this exchange is still under way on it.
    private func complete() {
        guard let connection = detach() else { return }
        connection.watchdog.stop()
        phase = .done
        upload?.consumer = nil
        let reusable = connection.parser.shouldKeepAlive && !trailingBytes && (upload == nil || uploadSent)
            && !connection.tcp.writeFailed && connection.tcp.queuedBytes == 0
            && ResponseFraming.isUnambiguous(head, bodyless: isHead || status == 204 || status == 304)
        let keepFor = reusable ? KeepAlive.idleLimitMs(configured: keepAliveMs, keepAlive: head.keepAlive) : 0
        if keepFor > 0 { pool.put(connection, limit: maxIdle, keepForMs: keepFor) } else { connection.close() }
        outcome = .some(nil)
        finishIfDone()
    }

    private func fail(_ error: UpstreamError) {
        guard outcome == nil, !ended else { return }
        connection?.watchdog.stop()
        dropConnectWatchdog()
        phase = .done
        connecting?.cancel()
        connecting = nil
        detach()?.close()
        upload?.consumer = nil
        outcome = .some(error)
        if opener != nil {
            ended = true
            return opened(.failure(error))
        }
        finishIfDone()
    }

    /// Tells `open`'s caller, once. It may relay or cancel from inside the call, before the read that brought
    /// the head is done with.
    private func opened(_ result: Result<Void, UpstreamError>) {
        guard let opener = opener.take() else { return }
        defer { heldUntilOpened = nil }
        opener(result.map {
            UpstreamStream(status: status, headers: head.fields, timing: timing, remoteAddress: remoteAddress, backend: self)
        })
    }

    /// Tells the receiver the end once it has every byte before it.
    private func finishIfDone() {
        guard let outcome, let end = onEnd, pending.isEmpty else { return }
        ended = true
        onEnd = nil
        onBody = nil
        end(outcome)
    }

    /// The watchdog fired (the connection's, or the connect one's).
    func timedOut() {
        switch clock {
        case .connect: fail(.timeout("could not connect to \(endpoint.poolKey) within \(timeouts.connectMs) ms"))
        case .firstByte: fail(.timeout("no response within \(timeouts.firstByteMs) ms"))
        case .idle: fail(.timeout("no response body byte for \(timeouts.idleMs) ms"))
        case .total: fail(.timeout("the exchange took longer than \(timeouts.totalMs) ms"))
        }
    }

    /// Starts the watchdog for `milliseconds`, or for what is left of the total when that is sooner.
    private func arm(_ milliseconds: Int, _ clock: Clock) {
        guard let watchdog = connection?.watchdog ?? connectWatchdog else { return }
        if let deadline = totalDeadlineNs {
            let now = DispatchTime.now().uptimeNanoseconds
            let left = deadline > now ? Int((deadline - now) / 1_000_000) : 0
            if left <= milliseconds {
                self.clock = .total
                return watchdog.arm(left)
            }
        }
        self.clock = clock
        watchdog.arm(milliseconds)
    }

    private func stopReading() {
        guard !readingStopped, let connection else { return }
        readingStopped = true
        connection.tcp.stopReading()
    }

    private static func milliseconds(since startNs: UInt64) -> Double {
        Double(DispatchTime.now().uptimeNanoseconds - startNs) / 1_000_000
    }

    // MARK: - UpstreamStreamBackend

    func relay(body: @escaping (UnsafeRawBufferPointer) -> Bool, end: @escaping (UpstreamError?) -> Void) {
        onBody = body
        onEnd = end
        deliverPending()
    }

    func resume() {
        receiverFull = false
        deliverPending()
    }

    /// Hands over what waits, then reads on (or ends) unless the receiver is full again.
    private func deliverPending() {
        guard !ended, let onBody else { return }
        if !pending.isEmpty, !receiverFull {
            var waiting = pending
            pending = []
            receiverFull = !waiting.withUnsafeBytes { onBody($0) }
            waiting.removeAll(keepingCapacity: waiting.capacity <= 2 * Self.pendingLimit)
            pending = waiting
        }
        if receiverFull { return connection?.watchdog.stop() ?? () }
        if outcome != nil { return finishIfDone() }
        if phase == .body {
            arm(timeouts.idleMs, .idle)
            if readingStopped, let connection {
                readingStopped = false
                connection.tcp.startReading()
            }
        }
    }

    func cancel() {
        guard !ended else { return }
        ended = true
        onEnd = nil
        onBody = nil
        opener = nil
        heldUntilOpened = nil
        connection?.watchdog.stop()
        dropConnectWatchdog()
        upload?.consumer = nil
        connecting?.cancel()
        connecting = nil
        detach()?.close()
    }

    private func dropConnectWatchdog() {
        guard let watchdog = connectWatchdog else { return }
        connectWatchdog = nil
        pool.giveBack(watchdog)
    }

    /// Lets go of the connection (and it of this exchange); the caller pools or closes what it gets.
    @discardableResult
    private func detach() -> PlainHTTPConnection? {
        guard let connection else { return nil }
        connection.exchange = nil
        self.connection = nil
        return connection
    }
}
