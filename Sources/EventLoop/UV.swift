import CLibUV
import Glibc

// The only file that touches libuv. Every uv_*_t is allocated here, owned by one Swift object that keeps
// itself alive (a retained `data` pointer) from init until libuv's close callback, and freed there.
// Everything in this file runs on its loop's thread except `LoopCore.wake()`.

/// One uv_loop_t and the async handle that wakes it from other threads.
final class LoopCore {
    let loop: UnsafeMutablePointer<uv_loop_t>
    private let wakeup: UnsafeMutablePointer<uv_async_t>
    /// Keeps the loop from sleeping in poll while work queued from its own thread waits.
    private let idle: UnsafeMutablePointer<uv_idle_t>
    private var idling = false
    /// Runs `beforePoll` actions once the iteration's work is done, right before the loop polls.
    private let prepare: UnsafeMutablePointer<uv_prepare_t>
    private var beforePollActions: [() -> Void] = []
    /// Connections whose writes all went out at once: told `drained()` on the next iteration, as a
    /// completed write request would have been.
    fileprivate var drainedConnections: [TCPConnection] = []
    /// The other buffer `drainedConnections` swaps with as it is delivered (neither reallocated per wake-up).
    private var deliveredConnections: [TCPConnection] = []
    /// Shared by every read on this loop: libuv asks for a buffer, the read callback consumes it at once.
    fileprivate let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    fileprivate let onWake: () -> Void
    /// Names resolved for outbound connections ("host:port"), kept for `resolvedForMs` (curl's 60 s): a burst
    /// of new upstream or Redis connections to one name asks the resolver once, not once each.
    fileprivate var resolved: [String: (addresses: [sockaddr_storage], expiresMs: UInt64)] = [:]
    /// Connects waiting for a resolution already under way for their name.
    fileprivate var awaitingResolution: [String: [TCPConnection.Resolving]] = [:]
    static let resolvedForMs: UInt64 = 60_000
    var resolvedNameCount: Int { resolved.count }
    static let maxResolvedNames = 256

    init(onWake: @escaping () -> Void) throws(LoopError) {
        loop = .allocate(capacity: 1)
        wakeup = .allocate(capacity: 1)
        idle = .allocate(capacity: 1)
        prepare = .allocate(capacity: 1)
        self.onWake = onWake
        try check(uv_loop_init(loop), "uv_loop_init")
        uv_idle_init(loop, idle)
        idle.pointee.data = nil
        uv_prepare_init(loop, prepare)
        prepare.pointee.data = nil
        try check(uv_async_init(loop, wakeup) { async in
            guard let async, let data = async.pointee.data else { return }
            Unmanaged<LoopCore>.fromOpaque(data).takeUnretainedValue().onWake()
        }, "uv_async_init")
        wakeup.pointee.data = Unmanaged.passUnretained(self).toOpaque()
    }

    /// Thread-safe; several calls before the loop wakes run `onWake` once.
    func wake() { uv_async_send(wakeup) }

    /// From the loop's own thread: run `onWake` on the next iteration without a system call.
    func wakeFromLoop() {
        guard !idling else { return }
        idling = true
        idle.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        uv_idle_start(idle) { idle in
            guard let idle, let data = idle.pointee.data else { return }
            let core = Unmanaged<LoopCore>.fromOpaque(data).takeUnretainedValue()
            uv_idle_stop(idle)
            core.idling = false
            var drained = core.drainedConnections
            core.drainedConnections = core.deliveredConnections
            core.deliveredConnections = []
            for connection in drained { connection.deliverDrained() }
            drained.removeAll(keepingCapacity: true)
            core.deliveredConnections = drained
            core.onWake()
        }
    }

    /// From the loop's own thread: run `action` once this iteration's callbacks and jobs are done, before the
    /// loop polls again (writes issued during one iteration leave in one system call).
    func beforePoll(_ action: @escaping () -> Void) {
        beforePollActions.append(action)
        guard beforePollActions.count == 1 else { return }
        prepare.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        uv_prepare_start(prepare) { prepare in
            guard let prepare, let data = prepare.pointee.data else { return }
            let core = Unmanaged<LoopCore>.fromOpaque(data).takeUnretainedValue()
            uv_prepare_stop(prepare)
            let actions = core.beforePollActions
            core.beforePollActions.removeAll(keepingCapacity: true)
            for action in actions { action() }
        }
    }

    /// Runs until `stop()` and every handle is closed.
    func run() { uv_run(loop, UV_RUN_DEFAULT) }

    var nowMs: UInt64 { uv_now(loop) }

    /// Closes the wake-up handle and every handle still open, then lets `run()` return once they are gone.
    func stop() {
        uv_walk(loop, { handle, _ in
            guard let handle, uv_is_closing(handle) == 0 else { return }
            if handle.pointee.type != UV_ASYNC, handle.pointee.type != UV_IDLE, handle.pointee.type != UV_PREPARE, let data = handle.pointee.data,
               let owner = Unmanaged<AnyObject>.fromOpaque(data).takeUnretainedValue() as? LoopHandle {
                owner.close()
            } else {
                uv_close(handle, nil)
            }
        }, nil)
    }

    /// After `run()` returned.
    func free() {
        uv_loop_close(loop)
        loop.deallocate()
        wakeup.deallocate()
        idle.deallocate()
        prepare.deallocate()
        readBuffer.deallocate()
    }
}

/// A handle that can be closed by the loop when it stops.
protocol LoopHandle: AnyObject {
    func close()
}

/// Gives memory glibc keeps after frees back to the system (a burst of large requests would otherwise hold
/// the process at its peak RSS).
public func releaseFreedMemory() { _ = malloc_trim(0) }

public struct LoopError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let code: Int32
    /// `code` is a negative errno (libuv's convention on Unix), e.g. `-EPROTO` for a TLS layer that failed.
    public init(operation: String, code: Int32) { (self.operation, self.code) = (operation, code) }
    public var description: String { "\(operation): \(String(cString: uv_strerror(code)))" }
}

/// Closes a handle whose `data` holds its retained owner: libuv frees it only after the close callback,
/// which then lets the owner go.
private func closeOwned<Handle>(_ handle: UnsafeMutablePointer<Handle>) {
    uv_close(cuv_handle(handle)) { closing in
        guard let closing else { return }
        Unmanaged<AnyObject>.fromOpaque(closing.pointee.data).release()
        closing.deallocate()
    }
}

private func check(_ code: Int32, _ operation: String) throws(LoopError) {
    guard code >= 0 else { throw LoopError(operation: operation, code: code) }
}

// MARK: - Timer

/// A one-shot or repeating timer; `close()` when done with it.
/// A one-shot timer keeps its deadline here and arms libuv only when it must fire earlier than the uv timer
/// already armed: a connection restarts its timeout several times a request, and each uv_timer_start/stop is
/// a heap update. An early uv expiry re-arms for the rest; a stopped timer's expiry does nothing. The timer
/// still fires at the deadline in loop time, as uv_timer_start(milliseconds) would.
public final class LoopTimer: LoopHandle {
    private let handle: UnsafeMutablePointer<uv_timer_t>
    private let loop: UnsafeMutablePointer<uv_loop_t>
    private let fire: () -> Void
    private var closed = false
    /// When the timer fires (loop time, ms), nil when stopped; one-shot starts only.
    private var deadline: UInt64?
    /// When the armed uv timer expires, nil when it is not armed.
    private var armedUntil: UInt64?
    /// Started with a repeat: armed as asked, stopped at once.
    private var repeating = false

    public init(_ loop: EventLoop, fire: @escaping () -> Void) {
        handle = .allocate(capacity: 1)
        self.loop = loop.core.loop
        self.fire = fire
        uv_timer_init(loop.core.loop, handle)
        handle.pointee.data = Unmanaged.passRetained(self as AnyObject).toOpaque()
    }

    /// (Re)starts the timer: it fires once after `milliseconds`, then every `repeatMs` if not 0.
    public func start(milliseconds: Int, repeatMs: Int = 0) {
        guard !closed else { return }
        let delay = UInt64(max(0, milliseconds))
        guard repeatMs == 0 else {
            (deadline, armedUntil, repeating) = (nil, nil, true)
            return arm(delay, repeatMs: UInt64(repeatMs))
        }
        if repeating { (armedUntil, repeating) = (nil, false) }
        let due = uv_now(loop) &+ delay
        deadline = due
        if let armedUntil, armedUntil <= due { return }
        arm(delay, repeatMs: 0)
        armedUntil = due
    }

    public func stop() {
        guard !closed else { return }
        if repeating {
            repeating = false
            uv_timer_stop(handle)
            return
        }
        // Left armed: its expiry finds no deadline and does nothing.
        deadline = nil
    }

    public func close() {
        guard !closed else { return }
        closed = true
        closeOwned(handle)
    }

    private func arm(_ delay: UInt64, repeatMs: UInt64) {
        uv_timer_start(handle, { timer in
            guard let timer, let data = timer.pointee.data else { return }
            (Unmanaged<AnyObject>.fromOpaque(data).takeUnretainedValue() as! LoopTimer).expired()
        }, delay, repeatMs)
    }

    private func expired() {
        if repeating { return fire() }
        armedUntil = nil
        guard let deadline else { return }
        let now = uv_now(loop)
        if deadline > now {
            arm(deadline - now, repeatMs: 0)
            armedUntil = deadline
            return
        }
        self.deadline = nil
        fire()
    }
}

// MARK: - Socket watch (for libcurl's sockets)

/// Readiness of a socket someone else owns (curl's): a uv_poll_t on its descriptor.
public final class SocketWatch: LoopHandle {
    public struct Events: OptionSet, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        public static let readable = Events(rawValue: Int32(UV_READABLE.rawValue))
        public static let writable = Events(rawValue: Int32(UV_WRITABLE.rawValue))
    }

    private let handle: UnsafeMutablePointer<uv_poll_t>
    private let ready: (_ events: Events, _ failed: Bool) -> Void
    private var closed = false
    /// What is watched now: asking for the same again changes nothing (uv_poll_start would stop and
    /// re-add the descriptor: two epoll_ctl calls).
    public private(set) var events: Events = []

    public init(_ loop: EventLoop, socket: Int32, ready: @escaping (Events, Bool) -> Void) throws(LoopError) {
        handle = .allocate(capacity: 1)
        self.ready = ready
        let initialised = uv_poll_init_socket(loop.core.loop, handle, socket)
        guard initialised == 0 else {
            handle.deallocate()
            throw LoopError(operation: "uv_poll_init_socket", code: initialised)
        }
        handle.pointee.data = Unmanaged.passRetained(self as AnyObject).toOpaque()
    }

    public func watch(_ events: Events) {
        guard !closed, events != self.events else { return }
        self.events = events
        if events.isEmpty {
            uv_poll_stop(handle)
            return
        }
        uv_poll_start(handle, events.rawValue) { poll, status, events in
            guard let poll, let data = poll.pointee.data else { return }
            (Unmanaged<AnyObject>.fromOpaque(data).takeUnretainedValue() as! SocketWatch)
                .ready(Events(rawValue: events), status < 0)
        }
    }

    public func close() {
        guard !closed else { return }
        closed = true
        uv_poll_stop(handle)
        closeOwned(handle)
    }
}

// MARK: - TCP

/// A listening socket of one loop. Bound with SO_REUSEPORT so every loop can listen on the same port and
/// the kernel spreads connections between them.
public final class TCPListener: LoopHandle {
    private let handle: UnsafeMutablePointer<uv_tcp_t>
    private let loop: EventLoop
    private let accepted: (TCPConnection) -> Void
    private var closed = false
    public let port: Int

    public init(_ loop: EventLoop, host: String, port: Int, ipv6: Bool, exclusive: Bool, backlog: Int32 = 4096,
                accepted: @escaping (TCPConnection) -> Void) throws(LoopError) {
        // SO_REUSEPORT would let a second gateway share a port it asked for explicitly; a plain socket
        // bound first tells whether anyone holds it.
        if port != 0 && exclusive { Glibc.close(try Self.bind(host: host, port: port, ipv6: ipv6, reusePort: false)) }
        let socket = try Self.bind(host: host, port: port, ipv6: ipv6, reusePort: true)
        var bound = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(socket, $0, &length) } }
        // sin_port and sin6_port sit at the same offset.
        self.port = Int(UInt16(bigEndian: withUnsafeBytes(of: &bound) { $0.load(fromByteOffset: 2, as: UInt16.self) }))
        handle = .allocate(capacity: 1)
        self.loop = loop
        self.accepted = accepted
        uv_tcp_init(loop.core.loop, handle)
        handle.pointee.data = Unmanaged.passRetained(self as AnyObject).toOpaque()
        do {
            try check(uv_tcp_open(handle, socket), "uv_tcp_open")
            try check(uv_listen(cuv_stream(handle), backlog) { server, status in
                guard let server, let data = server.pointee.data, status >= 0 else { return }
                (Unmanaged<AnyObject>.fromOpaque(data).takeUnretainedValue() as! TCPListener).acceptOne()
            }, "uv_listen")
        } catch {
            Glibc.close(socket)
            close()
            throw error
        }
    }

    private func acceptOne() {
        let connection = TCPConnection(loop)
        guard uv_accept(cuv_stream(handle), cuv_stream(connection.handle)) == 0 else {
            connection.close()
            return
        }
        uv_tcp_nodelay(connection.handle, 1)
        accepted(connection)
    }

    public func close() {
        guard !closed else { return }
        closed = true
        closeOwned(handle)
    }

    private static func bind(host: String, port: Int, ipv6: Bool, reusePort: Bool) throws(LoopError) -> Int32 {
        let family = ipv6 ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw LoopError(operation: "socket", code: -errno) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if reusePort { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size)) }
        var result: Int32
        if ipv6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET6, host, &address.sin6_addr) == 1 else {
                Glibc.close(fd)
                throw LoopError(operation: "inet_pton \(host)", code: -EINVAL)
            }
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
            result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
                Glibc.close(fd)
                throw LoopError(operation: "inet_pton \(host)", code: -EINVAL)
            }
            result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            throw LoopError(operation: "bind \(host):\(port)", code: -code)
        }
        return fd
    }
}

/// What a `TCPConnection` reports to its owner, on the loop's thread.
public protocol TCPConnectionDelegate: AnyObject {
    /// Bytes just read; valid only during the call.
    func received(_ bytes: UnsafeRawBufferPointer)
    /// The peer closed its side (`error` nil) or the connection failed.
    func readEnded(error: LoopError?)
    /// Every queued write has completed (or failed): the outbound queue is empty.
    func drained()
}

/// An accepted client connection. Writes copy their bytes and are queued by libuv; `queuedBytes` is the
/// back-pressure signal.
public final class TCPConnection: LoopHandle {
    fileprivate let handle: UnsafeMutablePointer<uv_tcp_t>
    private let core: LoopCore
    // The state is private behind public accessors: the optimizer then sees every access and drops the
    // dynamic exclusivity checks a public stored property keeps (several per request each).
    public var delegate: (any TCPConnectionDelegate)? {
        get { delegateReference }
        set { delegateReference = newValue }
    }
    public var queuedBytes: Int { queued }
    public var isClosed: Bool { closed }
    public var writeFailed: Bool { failed }
    private weak var delegateReference: (any TCPConnectionDelegate)?
    private var queued = 0
    private var closed = false
    private var failed = false
    private var reading = false

    fileprivate init(_ loop: EventLoop) {
        handle = .allocate(capacity: 1)
        core = loop.core
        uv_tcp_init(loop.core.loop, handle)
        handle.pointee.data = Unmanaged.passRetained(self as AnyObject).toOpaque()
    }

    /// An outbound connection: `host` (a name or an IP literal) is resolved without blocking the loop, then
    /// each address is tried in turn. `done` gets the connection, or the last error; it is called once, unless
    /// the returned attempt is cancelled first (a connect timeout): then never, and the socket is closed.
    @discardableResult
    public static func connect(_ loop: EventLoop, host: String, port: Int,
                               done: @escaping (Result<TCPConnection, LoopError>) -> Void) -> ConnectAttempt {
        let resolving = Resolving(loop: loop, done: done)
        let attempt = ConnectAttempt(resolving)
        // An IP literal needs no resolver (uv_getaddrinfo is a round trip through libuv's thread pool).
        if let literal = ipLiteral(host, port: port) {
            resolving.start([literal])
            return attempt
        }
        let core = loop.core
        let name = host + ":" + String(port)
        if let cached = core.resolved[name], cached.expiresMs > core.nowMs {
            // None of them answering: the name is asked again next time (the service may have moved).
            resolving.unreachable = { core.resolved[name] = nil }
            resolving.start(cached.addresses)
            return attempt
        }
        // One question per name at a time: later connects wait for its answer.
        if core.awaitingResolution[name] != nil {
            core.awaitingResolution[name]?.append(resolving)
            return attempt
        }
        core.awaitingResolution[name] = [resolving]
        let request = UnsafeMutablePointer<uv_getaddrinfo_t>.allocate(capacity: 1)
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        let context = Unmanaged.passRetained(Lookup(core: core, name: name) as AnyObject).toOpaque()
        request.pointee.data = context
        let started = uv_getaddrinfo(loop.core.loop, request, { request, status, addresses in
            guard let request else { return }
            let lookup = Unmanaged<AnyObject>.fromOpaque(request.pointee.data).takeRetainedValue() as! Lookup
            request.deallocate()
            let waiting = lookup.core.awaitingResolution.removeValue(forKey: lookup.name) ?? []
            guard status == 0, let addresses else {
                if let addresses { uv_freeaddrinfo(addresses) }
                for resolving in waiting where !resolving.cancelled {
                    resolving.done(.failure(LoopError(operation: "resolving", code: status)))
                }
                return
            }
            var candidates: [sockaddr_storage] = []
            var next: UnsafeMutablePointer<addrinfo>? = addresses
            while let current = next {
                var storage = sockaddr_storage()
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: current.pointee.ai_addr,
                                                                                                     count: Int(current.pointee.ai_addrlen))) }
                candidates.append(storage)
                next = current.pointee.ai_next
            }
            uv_freeaddrinfo(addresses)
            lookup.remember(candidates)
            for resolving in waiting {
                resolving.unreachable = { [core = lookup.core, name = lookup.name] in core.resolved[name] = nil }
                resolving.tryNext(candidates[...], lastError: LoopError(operation: "resolving", code: -EINVAL))
            }
        }, host, String(port), &hints)
        if started < 0 {
            Unmanaged<AnyObject>.fromOpaque(context).release()
            request.deallocate()
            core.awaitingResolution[name] = nil
            resolving.start([], lastError: LoopError(operation: "resolving \(host)", code: started))
        }
        return attempt
    }

    /// One uv_getaddrinfo under way, for every connect waiting on its name.
    private final class Lookup {
        let core: LoopCore
        let name: String
        init(core: LoopCore, name: String) { (self.core, self.name) = (core, name) }

        func remember(_ addresses: [sockaddr_storage]) {
            guard !addresses.isEmpty else { return }
            if core.resolved.count >= LoopCore.maxResolvedNames { core.resolved.removeAll() }
            core.resolved[name] = (addresses, core.nowMs + LoopCore.resolvedForMs)
        }
    }

    /// `host` as an IPv4 or IPv6 address with `port` (libuv's parsers), or nil when it is a name.
    private static func ipLiteral(_ host: String, port: Int) -> sockaddr_storage? {
        var storage = sockaddr_storage()
        let found = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { uv_ip4_addr(host, Int32(port), $0) == 0 }
                || pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { uv_ip6_addr(host, Int32(port), $0) == 0 }
        }
        return found ? storage : nil
    }

    /// A connect under way, which its caller may give up on.
    public final class ConnectAttempt {
        private let resolving: Resolving
        fileprivate init(_ resolving: Resolving) { self.resolving = resolving }

        /// `done` will not be called; a socket being connected is closed now (not when the kernel gives up).
        public func cancel() {
            resolving.cancelled = true
            resolving.connecting?.close()
            resolving.connecting = nil
        }
    }

    /// One connect attempt in flight (uv_connect_t), keeping the connection and the caller's callback.
    fileprivate final class Resolving {
        let loop: EventLoop
        let done: (Result<TCPConnection, LoopError>) -> Void
        var cancelled = false
        /// `connect` has not returned yet: a failure is reported on the loop's next turn.
        var reportLater = false
        /// The socket of the address being tried.
        var connecting: TCPConnection?
        /// Called when no address answered.
        var unreachable: (() -> Void)?

        init(loop: EventLoop, done: @escaping (Result<TCPConnection, LoopError>) -> Void) {
            self.loop = loop
            self.done = done
        }

        /// From inside `connect`: a failure at once is still reported later, as after a resolution, never
        /// inside the call.
        func start(_ candidates: [sockaddr_storage], lastError: LoopError = LoopError(operation: "connect", code: -EINVAL)) {
            reportLater = true
            tryNext(candidates[...], lastError: lastError)
            reportLater = false
        }

        func tryNext(_ candidates: ArraySlice<sockaddr_storage>, lastError: LoopError) {
            connecting = nil
            guard !cancelled else { return }
            guard var address = candidates.first else {
                unreachable?()
                guard reportLater else { return done(.failure(lastError)) }
                return loop.executeOnLoop { [self] in if !cancelled { done(.failure(lastError)) } }
            }
            let connection = TCPConnection(loop)
            connecting = connection
            let request = UnsafeMutablePointer<uv_connect_t>.allocate(capacity: 1)
            let attempt = Attempt(resolving: self, connection: connection, rest: candidates.dropFirst())
            request.pointee.data = Unmanaged.passRetained(attempt as AnyObject).toOpaque()
            let started = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddr in
                    uv_tcp_connect(request, connection.handle, sockaddr) { request, status in
                        guard let request else { return }
                        let attempt = Unmanaged<AnyObject>.fromOpaque(request.pointee.data).takeRetainedValue() as! Attempt
                        request.deallocate()
                        attempt.finished(status)
                    }
                }
            }
            if started < 0 {
                Unmanaged<AnyObject>.fromOpaque(request.pointee.data).release()
                request.deallocate()
                connection.close()
                tryNext(candidates.dropFirst(), lastError: LoopError(operation: "connect", code: started))
            }
        }
    }

    private final class Attempt {
        let resolving: Resolving
        let connection: TCPConnection
        let rest: ArraySlice<sockaddr_storage>

        init(resolving: Resolving, connection: TCPConnection, rest: ArraySlice<sockaddr_storage>) {
            (self.resolving, self.connection, self.rest) = (resolving, connection, rest)
        }

        func finished(_ status: Int32) {
            if resolving.cancelled { return connection.close() }
            resolving.connecting = nil
            if status == 0 {
                uv_tcp_nodelay(connection.handle, 1)
                return resolving.done(.success(connection))
            }
            connection.close()
            resolving.tryNext(rest, lastError: LoopError(operation: "connect", code: status))
        }
    }

    /// The peer's IP address as text ("127.0.0.1", "::1"), or "" when unknown.
    public var peerAddress: String {
        var storage = sockaddr_storage()
        var length = Int32(MemoryLayout<sockaddr_storage>.size)
        let got = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { uv_tcp_getpeername(handle, $0, &length) }
        }
        guard got == 0 else { return "" }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let named = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, socklen_t(length), &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
            }
        }
        guard named == 0 else { return "" }
        return String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether the peer sent anything not read yet, or closed its side: a non-blocking `MSG_PEEK` of one byte.
    /// An idle kept-alive connection must have neither before it carries a request (the loop may not have
    /// polled it since an upstream spoke out of turn).
    public var hasUnreadInput: Bool {
        guard !closed else { return true }
        var fd = uv_os_fd_t()
        guard uv_fileno(UnsafeRawPointer(handle).assumingMemoryBound(to: uv_handle_t.self), &fd) == 0 else { return true }
        var byte: UInt8 = 0
        let peeked = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return peeked >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)
    }

    public func startReading() {
        guard !reading, !closed else { return }
        reading = true
        uv_read_start(cuv_stream(handle), { handle, _, buffer in
            guard let handle, let buffer, let data = handle.pointee.data else { return }
            let connection = Unmanaged<AnyObject>.fromOpaque(data).takeUnretainedValue() as! TCPConnection
            buffer.pointee = uv_buf_init(connection.core.readBuffer.baseAddress?.assumingMemoryBound(to: CChar.self),
                                         UInt32(connection.core.readBuffer.count))
        }, { stream, count, _ in
            guard let stream, let data = stream.pointee.data else { return }
            let connection = Unmanaged<AnyObject>.fromOpaque(data).takeUnretainedValue() as! TCPConnection
            if count > 0 {
                connection.delegateReference?.received(UnsafeRawBufferPointer(rebasing: connection.core.readBuffer[..<count]))
            } else if count < 0 {
                connection.stopReading()
                connection.delegateReference?.readEnded(error: count == Int(UV_EOF.rawValue) ? nil
                    : LoopError(operation: "read", code: Int32(count)))
            }
        })
    }

    public func stopReading() {
        guard reading, !closed else { return }
        reading = false
        uv_read_stop(cuv_stream(handle))
    }

    /// Queues `bytes` (copied); `delegate.drained()` follows once everything queued so far is written.
    /// With nothing queued they are first written at once (uv_try_write): a response that fits the socket
    /// buffer then needs no write request, no completion callback and no epoll_ctl to stop watching for
    /// writability (libuv re-arms the watcher after every completed uv_write).
    public func write(_ bytes: UnsafeRawBufferPointer) {
        guard !closed, !failed, bytes.count > 0 else { return }
        var rest = bytes
        if queued == 0 {
            var buffer = uv_buf_init(UnsafeMutablePointer(mutating: bytes.baseAddress!.assumingMemoryBound(to: CChar.self)),
                                     UInt32(bytes.count))
            let written = uv_try_write(cuv_stream(handle), &buffer, 1)
            if written == bytes.count {
                // Appended on a copy taken out and put back: an access held across the array's own code would
                // make every access to the list an exclusivity-checked one.
                var drained = core.drainedConnections
                core.drainedConnections = []
                drained.append(self)
                core.drainedConnections = drained
                core.wakeFromLoop()
                return
            }
            // A part, or nothing (EAGAIN, or an error that uv_write then reports as before).
            if written > 0 { rest = UnsafeRawBufferPointer(rebasing: bytes[Int(written)...]) }
        }
        queue(rest)
    }

    /// After a write that went out whole: the delegate hears of it as of a completed request, unless more was
    /// queued since (its completion will tell).
    fileprivate func deliverDrained() {
        guard !closed, queued == 0 || failed else { return }
        delegateReference?.drained()
    }

    private func queue(_ bytes: UnsafeRawBufferPointer) {
        let request = UnsafeMutablePointer<uv_write_t>.allocate(capacity: 1)
        // The length rides in front of the bytes: libuv clears `bufs` before the completion callback.
        let copy = UnsafeMutableRawPointer.allocate(byteCount: bytes.count + 8, alignment: 8)
        copy.storeBytes(of: bytes.count, as: Int.self)
        (copy + 8).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        request.pointee.data = copy
        var buffer = uv_buf_init((copy + 8).assumingMemoryBound(to: CChar.self), UInt32(bytes.count))
        queued += bytes.count
        let started = uv_write(request, cuv_stream(handle), &buffer, 1) { request, status in
            guard let request else { return }
            let stream = request.pointee.handle!
            let bytes = request.pointee.data.load(as: Int.self)
            request.pointee.data.deallocate()
            request.deallocate()
            guard let data = stream.pointee.data else { return }
            let connection = Unmanaged<AnyObject>.fromOpaque(data).takeUnretainedValue() as! TCPConnection
            connection.written(status: status, bytes: bytes)
        }
        if started < 0 {
            queued -= bytes.count
            copy.deallocate()
            request.deallocate()
            failed = true
        }
    }

    public func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { write($0) }
    }

    private func written(status: Int32, bytes: Int) {
        queued = max(0, queued - bytes)
        if status < 0 { failed = true }
        if queued == 0 || failed { delegateReference?.drained() }
    }

    /// Closes the socket: queued writes are cancelled. Delivers nothing to the delegate afterwards.
    public func close() {
        guard !closed else { return }
        closed = true
        delegateReference = nil
        closeOwned(handle)
    }
}
