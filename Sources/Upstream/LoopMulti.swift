import CCurl
import EventLoop
import Glibc

/// One curl multi handle per event loop, driven by the loop: curl's sockets are watched with the loop's
/// readiness events and its timeouts with a loop timer (`curl_multi_socket_action`), so a thousand
/// streaming upstream exchanges cost no thread. Holds the loop's upstream connection cache (keep-alive).
/// Created and used on its loop's thread only.
public final class LoopMulti: @unchecked Sendable {
    public let loop: EventLoop
    private let multi: UnsafeMutableRawPointer
    private var timer: LoopTimer!
    private var watches: [Int32: SocketWatch] = [:]
    /// Sockets curl stopped watching between exchanges (kept-alive connections): their watch stays, reading,
    /// so the connection's next exchange starts without an epoll_ctl (closing and re-creating it cost three
    /// system calls per request under load). Closed when curl closes the socket (`closeSocket`), or when
    /// the idle connection stirs (the upstream closed it; curl finds that out itself on reuse).
    private var parked = Set<Int32>()
    /// The loop's own HTTP/1.1 client's kept-alive connections (`http://` targets).
    let plainHTTP: PlainHTTPPool
    /// Easy handles between exchanges (their options are reset for each one).
    private var spare: [CurlTransfer] = []

    public init(loop: EventLoop, maxConnections: Int = 256) throws(UpstreamError) {
        guard curlGlobalInit == CURLE_OK, let multi = curl_multi_init() else {
            throw .unavailable("curl_multi_init failed")
        }
        self.loop = loop
        self.multi = multi
        plainHTTP = PlainHTTPPool(loop: loop, capacity: maxConnections)
        timer = LoopTimer(loop) { [unowned self] in act(on: ccurl_socket_timeout(), flags: 0) }
        let context = Unmanaged.passUnretained(self).toOpaque()
        _ = ccurl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, maxConnections)
        _ = ccurl_multi_setopt_pointer(multi, CURLMOPT_SOCKETDATA, context)
        _ = ccurl_multi_setopt_pointer(multi, CURLMOPT_TIMERDATA, context)
        _ = ccurl_multi_setopt_socket_callback(multi) { _, socket, what, context, _ in
            guard let context else { return 0 }
            Unmanaged<LoopMulti>.fromOpaque(context).takeUnretainedValue().watch(socket, what)
            return 0
        }
        _ = ccurl_multi_setopt_timer_callback(multi) { _, milliseconds, context in
            guard let context else { return 0 }
            let owner = Unmanaged<LoopMulti>.fromOpaque(context).takeUnretainedValue()
            // -1 removes the timer; 0 asks for an action at once (never from inside this callback).
            if milliseconds < 0 { owner.timer.stop() } else { owner.timer.start(milliseconds: milliseconds) }
            return 0
        }
    }

    private static let perLoop = Locked<[ObjectIdentifier: LoopMulti]>([:])
    /// Kept-alive upstream connections each loop's handle holds for reuse (all upstreams together); set
    /// before the loops' first exchange.
    public static let idleConnectionsPerLoop = Locked(256)

    /// The multi handle of the loop running this code, made on first use; nil off the loops.
    public static func current() throws(UpstreamError) -> LoopMulti? {
        guard let loop = EventLoop.current else { return nil }
        // The thread's last answer, without the table's lock (taken once a request otherwise). Handles are
        // never removed from the table, so the unretained reference stays valid.
        if let cached = pthread_getspecific(threadCache) {
            let multi = Unmanaged<LoopMulti>.fromOpaque(cached).takeUnretainedValue()
            if multi.loop === loop { return multi }
        }
        let multi = try perLoop.withLock { (table) throws(UpstreamError) -> LoopMulti in
            if let existing = table[ObjectIdentifier(loop)] { return existing }
            let made = try LoopMulti(loop: loop, maxConnections: max(1, idleConnectionsPerLoop.withLock { $0 }))
            table[ObjectIdentifier(loop)] = made
            return made
        }
        pthread_setspecific(threadCache, Unmanaged.passUnretained(multi).toOpaque())
        return multi
    }

    private static let threadCache: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// Runs `transfer` (prepared) on this loop; its callbacks report progress.
    func add(_ transfer: CurlTransfer) throws(UpstreamError) {
        let added = curl_multi_add_handle(multi, transfer.easy)
        guard added == CURLM_OK else { throw .unavailable("curl multi: \(String(cString: curl_multi_strerror(added)))") }
    }

    /// Ends an unfinished exchange: curl closes its connection.
    func cancel(_ transfer: CurlTransfer) {
        _ = curl_multi_remove_handle(multi, transfer.easy)
        transfer.detach()
    }

    func checkOut() throws(UpstreamError) -> CurlTransfer {
        if let transfer = spare.popLast() { return transfer }
        return try CurlTransfer(ownMulti: false, socketCloser: Unmanaged.passUnretained(self).toOpaque())
    }

    /// curl's close of one of its sockets (CURLOPT_CLOSESOCKETFUNCTION): the watch goes first, so the
    /// descriptor's number is free of it before the system can hand it out again.
    fileprivate func closeSocket(_ socket: Int32) -> Int32 {
        parked.remove(socket)
        watches.removeValue(forKey: socket)?.close()
        return Glibc.close(socket)
    }

    func checkIn(_ transfer: CurlTransfer) {
        transfer.detach()
        if spare.count < 256 { spare.append(transfer) }
    }

    private func watch(_ socket: Int32, _ what: Int32) {
        if what == CURL_POLL_REMOVE {
            if watches[socket]?.events == .readable {
                parked.insert(socket)
            } else {
                watches.removeValue(forKey: socket)?.close()
            }
            return
        }
        parked.remove(socket)
        let watch: SocketWatch
        if let existing = watches[socket] {
            watch = existing
        } else {
            do throws(LoopError) {
                watch = try SocketWatch(loop, socket: socket) { [unowned self] events, failed in
                    if parked.contains(socket) {
                        // Nothing curl waits for: the kept-alive connection closed or spoke out of turn.
                        parked.remove(socket)
                        watches.removeValue(forKey: socket)?.close()
                        return
                    }
                    var flags: Int32 = failed ? CURL_CSELECT_ERR : 0
                    if events.contains(.readable) { flags |= CURL_CSELECT_IN }
                    if events.contains(.writable) { flags |= CURL_CSELECT_OUT }
                    act(on: socket, flags: flags)
                }
            } catch {
                return
            }
            watches[socket] = watch
        }
        var events: SocketWatch.Events = []
        if what == CURL_POLL_IN || what == CURL_POLL_INOUT { events.insert(.readable) }
        if what == CURL_POLL_OUT || what == CURL_POLL_INOUT { events.insert(.writable) }
        watch.watch(events)
    }

    private func act(on socket: Int32, flags: Int32) {
        var running: Int32 = 0
        _ = curl_multi_socket_action(multi, socket, flags, &running)
        var queued: Int32 = 0
        while let message = curl_multi_info_read(multi, &queued) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let result = ccurl_msg_result(message)
            var raw: UnsafeMutablePointer<CChar>?
            _ = ccurl_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &raw)
            _ = curl_multi_remove_handle(multi, easy)
            guard let raw else { continue }
            Unmanaged<CurlTransfer>.fromOpaque(UnsafeMutableRawPointer(raw)).takeUnretainedValue().finished(result)
        }
    }
}

/// CURLOPT_CLOSESOCKETFUNCTION of loop-mode transfers (`CurlTransfer`); `owner` is their `LoopMulti`. A
/// connection keeps the function of the handle that made it, for every later close.
let loopMultiCloseSocket: curl_closesocket_callback = { owner, socket in
    guard let owner else { return Glibc.close(socket) }
    return Unmanaged<LoopMulti>.fromOpaque(owner).takeUnretainedValue().closeSocket(socket)
}

/// curl's side of an `UpstreamStream` (`https://` targets): the body follows through `relay`, paced by
/// whoever receives it.
final class CurlStream: UpstreamStreamBackend {
    private let transfer: CurlTransfer
    private let multi: LoopMulti
    private let watchdog: Watchdog
    private var ended = false
    private var endCallback: ((UpstreamError?) -> Void)?
    private var result: Result<Void, UpstreamError>?

    fileprivate init(transfer: CurlTransfer, multi: LoopMulti, watchdog: Watchdog) {
        self.transfer = transfer
        self.multi = multi
        self.watchdog = watchdog
        // Until `relay`, body bytes wait in the transfer (it pauses once 64 KiB do).
        transfer.onDone = { [unowned self] result in finish(result) }
        watchdog.expired = { [unowned self] in
            multi.cancel(transfer)
            finish(.failure(.timeout("no response body byte for \(watchdog.idleMs) ms")))
        }
        watchdog.arm(watchdog.idleMs)
    }

    func relay(body: @escaping (UnsafeRawBufferPointer) -> Bool, end: @escaping (UpstreamError?) -> Void) {
        endCallback = end
        let early = transfer.takePendingBody()
        var full = false
        if !early.isEmpty { full = !early.withUnsafeBytes { body($0) } }
        // Every piece restarts the idle clock; while the receiver is full, silence is not the upstream's.
        transfer.onBody = { [unowned self] bytes in
            let more = body(bytes)
            more ? watchdog.arm(watchdog.idleMs) : watchdog.stop()
            return more
        }
        if full { watchdog.stop() }
        if let result {
            finish(result)
        } else if !full {
            transfer.resume()
        } else {
            pausedByReceiver = true
        }
    }

    private var pausedByReceiver = false

    func resume() {
        pausedByReceiver = false
        if !ended { watchdog.arm(watchdog.idleMs) }
        transfer.resume()
    }

    func cancel() {
        guard !ended else { return }
        ended = true
        endCallback = nil
        watchdog.disarm()
        multi.cancel(transfer)
    }

    private func finish(_ outcome: Result<Void, UpstreamError>) {
        guard !ended else { return }  // the transfer (and its watchdog) may be serving another exchange by now
        result = outcome
        watchdog.stop()
        guard let end = endCallback else { return }
        ended = true
        watchdog.disarm()
        endCallback = nil
        if case .success = outcome { multi.checkIn(transfer) }
        switch outcome {
        case .success: end(nil)
        case .failure(let error): end(error)
        }
    }
}

extension UpstreamClient {
    /// Sends `request` on `multi`'s loop (call it there); `opened` is told once the response head arrived
    /// (possibly before this returns), or why it will not: `http://` targets with the loop's own HTTP/1.1
    /// client (`PlainHTTPExchange`), `https://` with curl.
    /// `timeouts` replaces the target's for this exchange (a route's own).
    /// `upload` streams the request body as the client sends it (then `request.body` is not used).
    public func open(_ request: UpstreamRequest, on multi: LoopMulti, timeouts: UpstreamTimeouts? = nil,
                     upload: UpstreamUpload? = nil, _ opened: @escaping (Result<UpstreamStream, UpstreamError>) -> Void) {
        exchange(request, on: multi, timeouts: timeouts, upload: upload) { result in
            opened(result.flatMap(Self.acceptable))
        }
    }

    /// `open` for async callers: one continuation around it.
    public func open(_ request: UpstreamRequest, on multi: LoopMulti, timeouts: UpstreamTimeouts? = nil,
                     upload: UpstreamUpload? = nil) async throws(UpstreamError) -> UpstreamStream {
        let opened = await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<Result<UpstreamStream, UpstreamError>>, Never>) in
            open(request, on: multi, timeouts: timeouts, upload: upload) { continuation.resume(returning: Unchecked($0)) }
        }
        return try opened.value.get()
    }

    /// A response head the gateway can relay, or the upstream's protocol error (its exchange cancelled).
    private static func acceptable(_ stream: UpstreamStream) -> Result<UpstreamStream, UpstreamError> {
        // RFC 9110 §15: a final status is 200–599 (interim ones never reach here); another is the upstream's error.
        guard (200...599).contains(stream.status) else {
            stream.cancel()
            return .failure(.protocolError("the upstream answered with status \(stream.status), outside 200–599"))
        }
        // Only chunked is decoded, and Transfer-Encoding is hop-by-hop: relayed re-framed, a body under another
        // coding (gzip) would reach the client as if it were the content. Refused, as nginx does.
        let codings = stream.headers.values(named: .transferEncoding).flatMap { $0.split(separator: ",") }
            .map(\.trimmingBlanks).filter { !$0.isEmpty }
        if let coding = codings.first(where: { $0.lowercased() != "chunked" }) {
            stream.cancel()
            return .failure(.protocolError("the upstream sent Transfer-Encoding: \(coding), which the gateway does not decode"))
        }
        return .success(stream)
    }

    private func exchange(_ request: UpstreamRequest, on multi: LoopMulti, timeouts: UpstreamTimeouts?, upload: UpstreamUpload?,
                          _ opened: @escaping (Result<UpstreamStream, UpstreamError>) -> Void) {
        let transfer: CurlTransfer
        let timeouts = timeouts ?? target.timeouts
        do throws(UpstreamError) {
            try request.validate(upload: upload)
            if let endpoint = target.plainHTTP {
                return PlainHTTPExchange.open(request, endpoint: endpoint, pool: multi.plainHTTP, timeouts: timeouts, upload: upload,
                                              maxIdle: target.maxIdleConnections, keepAliveMs: target.keepAliveMs, opened)
            }
            transfer = try multi.checkOut()
            try transfer.prepare(url: target.curlBaseURL + request.pathAndQuery, request: request, target: target, timeouts: timeouts,
                                 upload: upload)
        } catch {
            return opened(.failure(error))
        }
        upload?.consumer = transfer
        let watchdog = transfer.watchdog ?? Watchdog(multi.loop)
        transfer.watchdog = watchdog
        watchdog.idleMs = timeouts.idleMs
        var waiting = true
        watchdog.expired = {
            guard waiting else { return }
            waiting = false
            multi.cancel(transfer)
            watchdog.disarm()
            opened(.failure(.timeout("no response within \(timeouts.firstByteMs) ms")))
        }
        // The connect timeout is curl's; the first byte is awaited from the moment the request is handed over.
        watchdog.arm(timeouts.connectMs + timeouts.firstByteMs)
        transfer.onHeaders = { [unowned transfer] in
            guard waiting else { return }
            waiting = false
            let stream = UpstreamStream(status: transfer.status, headers: transfer.responseHeaders, timing: transfer.timing,
                                        remoteAddress: transfer.remoteAddress,
                                        backend: CurlStream(transfer: transfer, multi: multi, watchdog: watchdog))
            // Inside curl's header callback, where the receiver's pause, resume or cancel are not allowed.
            multi.loop.executeOnLoop { opened(.success(stream)) }
        }
        transfer.onDone = { result in
            guard waiting else { return }
            waiting = false
            watchdog.disarm()
            let error: UpstreamError
            if case .failure(let failure) = result { error = failure } else { error = .protocolError("the upstream sent no response headers") }
            opened(.failure(error))
        }
        do throws(UpstreamError) {
            try multi.add(transfer)
        } catch {
            waiting = false
            watchdog.disarm()
            opened(.failure(error))
        }
    }
}

/// The first-byte and idle clock of one exchange (curl has neither: only connect and total). A loop-mode
/// transfer keeps its watchdog from one exchange to the next (a timer made and closed per request was a few
/// allocations and a close callback each time); the transfer closes it when it goes.
/// Arming is a store of the deadline: the loop timer is started only when it is not already due by then,
/// and when it fires before the deadline (re-armed later meanwhile, or stopped) it starts again for what is
/// left, or not at all — a timer started and stopped twice per request cost more than the exchange's parse.
final class Watchdog {
    private let timer: LoopTimer
    private let loop: EventLoop
    var idleMs = 0
    var expired: (() -> Void)?
    /// When it fires (the loop's clock, ms); nil: stopped.
    private var deadlineMs: UInt64?
    /// When the loop timer is due; nil: not running.
    private var timerDueMs: UInt64?

    init(_ loop: EventLoop) {
        self.loop = loop
        var fire: (() -> Void)?
        timer = LoopTimer(loop) { fire?() }
        fire = { [unowned self] in timerFired() }
    }

    func arm(_ milliseconds: Int) {
        let deadline = loop.nowMs + UInt64(max(0, milliseconds))
        deadlineMs = deadline
        if let due = timerDueMs, due <= deadline { return }
        timerDueMs = deadline
        timer.start(milliseconds: milliseconds)
    }

    func stop() { deadlineMs = nil }

    /// The exchange is over: nothing fires until the next one arms it.
    func disarm() {
        expired = nil
        deadlineMs = nil
    }

    func close() {
        expired = nil
        deadlineMs = nil
        timer.close()
    }

    private func timerFired() {
        timerDueMs = nil
        guard let deadline = deadlineMs else { return }
        let now = loop.nowMs
        guard now >= deadline else {
            timerDueMs = deadline
            return timer.start(milliseconds: Int(deadline - now))
        }
        deadlineMs = nil
        expired?()
    }
}

/// A request body handed to curl as the client sends it. Bounded: past 64 KiB waiting, `write` answers
/// false and the producer waits for `onDrained` (the client's socket is not read meanwhile).
public final class UpstreamUpload: @unchecked Sendable {
    /// The client's Content-Length, or nil: chunked to the upstream.
    public let length: Int?
    /// Called when what waits falls below 16 KiB after `write` answered false.
    public var onDrained: (() -> Void)?
    /// Who sends the bytes on: told when there are more, the end, or an abort.
    weak var consumer: (any UploadConsumer)?
    private var pending: [UInt8] = []
    private var offset = 0
    private var finished = false
    private var aborted = false
    private var full = false

    public init(length: Int?) { self.length = length }

    public func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        pending.append(contentsOf: bytes)
        consumer?.uploadReady()
        full = pending.count - offset > 64 * 1024
        return !full
    }

    /// The last byte was written.
    public func finish() {
        finished = true
        consumer?.uploadReady()
    }

    /// The client's body failed: the upstream exchange fails too rather than take a truncated body for whole.
    public func abort() {
        aborted = true
        consumer?.uploadReady()
    }

    var isAborted: Bool { aborted }

    /// Everything written so far, in one piece handed to `send`; true once the last byte went.
    func takeAll(_ send: (UnsafeRawBufferPointer) -> Void) -> Bool {
        if pending.count > offset {
            pending.withUnsafeBytes { send(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
            pending.removeAll(keepingCapacity: pending.capacity <= 256 * 1024)
            offset = 0
            if full {
                full = false
                onDrained?()
            }
        }
        return finished
    }

    /// curl's read: bytes copied, 0 at the end, nil when it must wait (or `abortCode` after `abort`).
    func take(into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        if aborted { return ccurlAbortCode }
        let available = pending.count - offset
        guard available > 0 else { return finished ? 0 : nil }
        let count = min(available, buffer.count)
        pending.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + count)])) }
        offset += count
        if offset == pending.count {
            pending.removeAll(keepingCapacity: true)
            offset = 0
        }
        if full, pending.count - offset < 16 * 1024 {
            full = false
            onDrained?()
        }
        return count
    }
}

extension UpstreamClient {
    /// A whole exchange without a thread: on the current event loop's multi handle when there is one,
    /// else the blocking transfer (off the loops: the CLI, the receipt refresher).
    public func fetch(_ request: UpstreamRequest, limit: Int) async throws(UpstreamError) -> (status: Int, body: [UInt8]) {
        guard let multi = try LoopMulti.current() else {
            let response = try send(request)
            return (response.status, try response.readAll(limit: limit))
        }
        let stream = try await open(request, on: multi)
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<Result<[UInt8], UpstreamError>>, Never>) in
            var body: [UInt8] = []
            var failure: UpstreamError?
            stream.relay(body: { bytes in
                if body.count + bytes.count > limit { failure = .responseTooLarge(limit: limit) } else { body.append(contentsOf: bytes) }
                return true
            }, end: { error in
                if let error = failure ?? error { continuation.resume(returning: Unchecked(.failure(error))) } else {
                    continuation.resume(returning: Unchecked(.success(body)))
                }
            })
        }
        return (stream.status, try outcome.value.get())
    }
}
