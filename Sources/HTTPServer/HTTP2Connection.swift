import EventLoop
import Upstream

/// One HTTP/2 client connection on its loop (ALPN `h2`, or prior-knowledge h2c): nghttp2 frames it, and each stream
/// is an exchange through the same handler as an HTTP/1.1 request (`HTTP2Stream`). Frames are written only while
/// the socket keeps up; request bodies are paced by flow-control windows opened as their consumer drains them.
/// Floods of frames that make no progress (resets, SETTINGS, PING, PRIORITY, WINDOW_UPDATE, empty DATA) end the
/// connection with GOAWAY ENHANCE_YOUR_CALM, counted by reason. Confined to its loop's thread.
final class HTTP2Connection: TCPConnectionDelegate, HTTP2SessionDelegate, ServerConnection, @unchecked Sendable {
    /// The client's preface (RFC 9113 §3.4): what prior-knowledge h2c starts with.
    static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    private let socket: any ByteStream
    let shared: ServerShared
    let loop: EventLoop
    let clientAddress: String
    var countedPerIP = false
    let tls: TLSInfo?
    let session: HTTP2Session
    /// What the handler works out once for all the connection's streams.
    let memo = ConnectionMemo()
    /// Read through a copy and changed through a local (`openStreams`, `stream(_:)`, `track`): an access to the
    /// property that spans the dictionary's own calls made the compiler check every access to it at run time.
    private var streams: [Int32: HTTP2Stream] = [:]
    /// The stream whose header block is being read: its fields arrive one callback each, with no other stream's
    /// frame between them (RFC 9113 §6.10), and skip the dictionary.
    private var opening: HTTP2Stream?
    private var idleTimer: LoopTimer!
    /// While streams are open: checks their deadlines (header, body and send timeouts) every `sweepMs`.
    private var sweepTimer: LoopTimer!
    private var sweeping = false
    static let sweepMs = 100
    private var flushScheduled = false
    /// Inside `session.receive`: nghttp2 must not be asked to send (nor the socket closed) from its own callbacks.
    private var receiving = false
    private var closed = false
    /// GOAWAY was sent for a misbehaving client: close once it is out.
    private var closing = false
    private var meters = FloodMeters()

    init(socket: any ByteStream, shared: ServerShared, loop: EventLoop, tls: TLSInfo?) throws(HTTPServerError) {
        self.socket = socket
        self.shared = shared
        self.loop = loop
        self.tls = tls
        clientAddress = socket.peerAddress
        session = try HTTP2Session(settings: HTTP2Session.Settings(maxConcurrentStreams: shared.limits.maxConcurrentStreams,
                                                                  maxHeaderListBytes: shared.limits.maxHeaderBytes))
        session.delegate = self
        idleTimer = LoopTimer(loop) { [unowned self] in idleTimedOut() }
        sweepTimer = LoopTimer(loop) { [unowned self] in sweep() }
        socket.delegate = self
    }

    /// Starts reading; `initial`: bytes already read from the socket (an h2c preface seen by the HTTP/1.1 side).
    func start(initial: [UInt8] = []) {
        idleTimer.start(milliseconds: shared.limits.keepaliveTimeoutMs)
        if !initial.isEmpty { initial.withUnsafeBytes { received($0) } }
        socket.startReading()
        scheduleFlush()
    }

    var socketFull: Bool { socket.queuedBytes >= HTTPConnection.highWatermark }

    // MARK: - The socket

    func received(_ bytes: UnsafeRawBufferPointer) {
        guard !closed, !closing else { return }
        receiving = true
        let failure = session.receive(bytes)
        receiving = false
        if let reason = failure {
            return cut(reason, code: reason == "compression_error" ? .compressionError : reason == "protocol_error" ? .protocolError : .enhanceYourCalm)
        }
        scheduleFlush()
    }

    func readEnded(error: LoopError?) { close() }

    func drained() {
        if socket.writeFailed { return close() }
        flush()
        if socket.queuedBytes <= HTTPConnection.lowWatermark {
            for stream in openStreams { stream.connectionWritable() }
        }
    }

    // MARK: - Writing

    /// Frames go out at the end of this loop iteration: a response's HEADERS and DATA leave in one write.
    func scheduleFlush() {
        guard !flushScheduled, !closed else { return }
        flushScheduled = true
        loop.executeOnLoop { [weak self] in self?.flush() }
    }

    /// A stream's response has more for nghttp2 to frame (or its end).
    func resumeData(_ id: Int32) {
        session.resumeData(id)
        scheduleFlush()
    }

    private func flush() {
        flushScheduled = false
        guard !closed else { return }
        guard !receiving else { return scheduleFlush() }
        // What the socket has not taken yet bounds what is serialised: a client that does not read holds no more.
        // nghttp2 hands out one frame at a time: they are gathered and written together (one TLS record and one
        // system call for a response's HEADERS and DATA, not one per frame).
        let queued = socket.queuedBytes
        if queued < HTTPConnection.highWatermark {
            let room = HTTPConnection.highWatermark - queued
            session.send { bytes in
                outgoing.append(contentsOf: bytes)
                return outgoing.count < room
            }
            if !outgoing.isEmpty {
                socket.write(outgoing)
                if outgoing.capacity > 64 * 1024 { outgoing = [] } else { outgoing.removeAll(keepingCapacity: true) }
            }
        }
        if session.isFinished && !closing { close() }
    }

    /// Frames gathered by `flush` for one write.
    private var outgoing: [UInt8] = []

    // MARK: - Session events

    func streamOpened(_ id: Int32) -> Bool {
        guard !closing else { return true }
        if streams.count >= shared.limits.maxConcurrentStreams {
            // Past the announced limit: refused, the admitted streams go on. Refusing costs a header block's decoding
            // and a frame back, as a reset does: a client that keeps at it is a rapid-reset flood.
            if !meters.resets.take(now: loop.nowMs) { cut("rapid_reset", code: .enhanceYourCalm) }
            return false
        }
        idleTimer.stop()
        let stream = HTTP2Stream(id: id, connection: self)
        track(id, stream)
        opening = stream
        if !sweeping {
            sweeping = true
            sweepTimer.start(milliseconds: Self.sweepMs, repeatMs: Self.sweepMs)
        }
        return true
    }

    private func sweep() {
        let now = loop.nowMs
        for stream in openStreams where stream.deadline <= now { stream.timedOut() }
    }

    func header(_ id: Int32, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Bool {
        guard let stream = opening?.id == id ? opening : stream(id) else { return true }
        if stream.addHeader(name: name, value: value) { return true }
        // One list over the limit is answered 431 (the rest of it is decoded and dropped); a client that keeps
        // sending them is flooding.
        if !meters.oversizedHeaders.take(now: loop.nowMs) { cut("header_list_too_large", code: .enhanceYourCalm) }
        return true
    }

    func headersDone(_ id: Int32, endStream: Bool) {
        let stream = opening?.id == id ? opening : stream(id)
        opening = nil
        stream?.headersDone(endStream: endStream)
    }

    func data(_ id: Int32, _ bytes: UnsafeRawBufferPointer) {
        if let stream = stream(id) { stream.received(bytes) } else { session.consumedOnConnection(bytes.count) }
    }

    func bodyDone(_ id: Int32) { stream(id)?.bodyDone() }

    func streamClosed(_ id: Int32, errorCode: UInt32) {
        if opening?.id == id { opening = nil }
        track(id, nil)?.closed(errorCode: errorCode)
        if streams.isEmpty, !closed {
            sweepTimer.stop()
            sweeping = false
            idleTimer.start(milliseconds: shared.limits.keepaliveTimeoutMs)
        }
    }

    private func stream(_ id: Int32) -> HTTP2Stream? {
        let streams = streams
        return streams[id]
    }

    /// The open streams, listed apart from the dictionary (what is done with them may open or close streams).
    private var openStreams: [HTTP2Stream] {
        let streams = streams
        return Array(streams.values)
    }

    /// Enters `stream` as `id` (nil: forgets it), returning what was there.
    @discardableResult
    private func track(_ id: Int32, _ stream: HTTP2Stream?) -> HTTP2Stream? {
        var open = streams
        streams = [:]  // `open` is then the dictionary's only holder: changed in place
        let previous = if let stream { open.updateValue(stream, forKey: id) } else { open.removeValue(forKey: id) }
        streams = open
        return previous
    }

    func controlFrame(_ kind: HTTP2Session.ControlFrame) {
        let now = loop.nowMs
        switch kind {
        case .reset: if !meters.resets.take(now: now) { cut("rapid_reset", code: .enhanceYourCalm) }
        case .settings, .ping: if !meters.control.take(now: now) { cut("control_flood", code: .enhanceYourCalm) }
        case .other: if !meters.other.take(now: now) { cut("frame_flood", code: .enhanceYourCalm) }
        }
    }

    func responseData(_ id: Int32, into buffer: UnsafeMutableRawBufferPointer) -> HTTP2Session.DataChunk {
        stream(id)?.fill(buffer) ?? .bytes(0, last: true)
    }

    /// A stream that stopped taking its response within `send_timeout_ms` (a zero window held shut).
    func streamStalled(_ id: Int32) {
        shared.handler.http2Protection(reason: HTTP2Protections.stalledStream)
        session.reset(id, .cancel)
        scheduleFlush()
    }

    // MARK: - Ending

    /// A misbehaving client: counted, told why (GOAWAY), closed once that is out. Its open streams end as aborted.
    private func cut(_ reason: String, code: HTTP2Session.ErrorCode) {
        guard !closing, !closed else { return }
        closing = true
        shared.handler.http2Protection(reason: reason)
        session.goAway(code)
        for stream in openStreams { stream.connectionClosed() }
        (streams, opening) = ([:], nil)
        flush()
        // What the client still sends is read and dropped for a moment: closing with unread input would reset the
        // connection, and the client could lose the GOAWAY that says why.
        idleTimer.start(milliseconds: min(shared.limits.sendTimeoutMs, Self.lingerMs))
    }

    static let lingerMs = 1000

    private func idleTimedOut() {
        guard !closing, streams.isEmpty else { return close() }
        session.shutdownGracefully()
        closing = true
        flush()
        idleTimer.start(milliseconds: min(shared.limits.sendTimeoutMs, Self.lingerMs))
    }

    func closeIfIdle() {
        if streams.isEmpty { return close() }
        // Drain: GOAWAY lets the open streams finish; new ones are refused.
        session.shutdownGracefully()
        scheduleFlush()
    }

    func close() {
        guard !closed else { return }
        guard !receiving else {
            loop.executeOnLoop { [weak self] in self?.close() }
            return
        }
        closed = true
        idleTimer.close()
        sweepTimer.close()
        for stream in openStreams { stream.connectionClosed() }
        (streams, opening) = ([:], nil)
        socket.close()
        shared.connectionClosed(self)
    }
}

/// Why an HTTP/2 connection (or stream) was cut: the `reason` label of `HTTPHandler.http2Protection`.
public enum HTTP2Protections {
    public static let reasons = ["rapid_reset", "control_flood", "frame_flood", "continuation_flood", "compression_error",
                                 "protocol_error", "header_list_too_large", stalledStream, internalError]
    /// A stream reset for holding a zero window past `send_timeout_ms` (the connection goes on).
    static let stalledStream = "stalled_stream"
    /// The gateway could not set up HTTP/2 for the connection (out of memory).
    static let internalError = "internal_error"
}

/// Token buckets per kind of frame that makes no progress: `burst` at once, `perSecond` refilled.
private struct FloodMeters {
    var resets = TokenBucket(burst: 200, perSecond: 50)
    var control = TokenBucket(burst: 50, perSecond: 10)
    var other = TokenBucket(burst: 1000, perSecond: 200)
    var oversizedHeaders = TokenBucket(burst: 10, perSecond: 1)
}

struct TokenBucket {
    let burst: Double
    let perSecond: Double
    private var tokens: Double
    private var lastMs: UInt64 = 0

    init(burst: Double, perSecond: Double) { (self.burst, self.perSecond, tokens) = (burst, perSecond, burst) }

    /// False when the bucket is empty.
    mutating func take(now: UInt64) -> Bool {
        if lastMs != 0 { tokens = min(burst, tokens + Double(now &- lastMs) / 1000 * perSecond) }
        lastMs = now
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
