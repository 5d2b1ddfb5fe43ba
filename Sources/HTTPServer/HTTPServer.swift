import Dispatch
import EventLoop
import Synchronization
import TLS
import Upstream

/// The inbound HTTP/1.1 server: one SO_REUSEPORT listener per event loop, each loop owning the connections
/// it accepted. An idle connection costs a few KiB and a timer, never a thread.
public final class HTTPServer: @unchecked Sendable {
    private let shared: ServerShared
    private let loops: [EventLoop]
    private var listeners: [TCPListener] = []
    /// The bound port (the one the system chose when the address asked for port 0).
    public let port: Int

    /// `tls`: every connection starts with a TLS handshake (nil: plain HTTP).
    public init(address: String, limits: ServerLimits, handler: any HTTPHandler, loops: [EventLoop],
                tls: ListenerTLS? = nil) throws(HTTPServerError) {
        let listen = try ListenAddress(address)
        precondition(!loops.isEmpty, "a server needs at least one event loop")
        shared = ServerShared(limits: limits, handler: handler, tls: tls)
        self.loops = loops
        var port = listen.port
        var listeners: [TCPListener] = []
        for (index, loop) in loops.enumerated() {
            let exclusive = index == 0
            let bound = Unchecked<Result<TCPListener, LoopError>>(loop.sync { [shared] () -> Result<TCPListener, LoopError> in
                do throws(LoopError) {
                    return .success(try TCPListener(loop, host: listen.host, port: port, ipv6: listen.family == .ipv6, exclusive: exclusive) { socket in
                        shared.accept(socket, on: loop)
                    })
                } catch {
                    return .failure(error)
                }
            })
            switch bound.value {
            case .success(let listener):
                listeners.append(listener)
                port = listener.port  // the others join the port the first one was given
            case .failure(let error):
                for (index, listener) in listeners.enumerated() { loops[index].sync { listener.close() } }
                throw .startFailed(listen.description, error.description)
            }
        }
        self.listeners = listeners
        self.port = port
    }

    /// Open client connections, idle keep-alive ones included.
    public var activeConnections: Int { shared.connections.load(ordering: .relaxed) }

    /// Requests whose head arrived and whose response is not yet fully sent.
    public var inFlightRequests: Int { shared.inFlight.load(ordering: .relaxed) }

    /// Bytes held against `maxBufferedBodyBytes` now: bodies, heads, unread pipelined bytes.
    public var bufferedBytes: Int { shared.bodyBudget.used }

    /// SIGTERM: stop accepting (new connections are refused by the kernel), close idle keep-alive
    /// connections now, and let every response from here on carry `Connection: close`.
    public func drain() {
        shared.startDraining()
        for (index, loop) in loops.enumerated() {
            let listener = listeners[index]
            loop.sync {
                listener.close()
                self.shared.closeIdle(on: loop)
            }
        }
    }

    /// New handshakes use `tls` from now on; open connections keep the certificates they were made with.
    public func replaceTLS(_ tls: ListenerTLS) { shared.replaceTLS(tls) }

    /// Closes every connection the server still has (after the drain's deadline).
    public func closeAll() {
        for loop in loops {
            loop.sync { self.shared.closeAll(on: loop) }
        }
    }

}

/// What every connection of one server shares: limits, the handler, counters and the body budget.
final class ServerShared: @unchecked Sendable {
    let limits: ServerLimits
    let handler: any HTTPHandler
    let connections = Atomic<Int>(0)
    let inFlight = Atomic<Int>(0)
    let bodyBudget: BodyBudget
    private let draining = Atomic<Bool>(false)
    /// Connections closed since a trim was last scheduled.
    private let closedSinceTrim = Atomic<Int>(0)
    private let perIP = PthreadLock()
    private var perIPCounts: [String: Int] = [:]
    /// Each loop's open connections, touched only on that loop (keyed by loop, so no lock on the hot path).
    private var byLoop: [ObjectIdentifier: LoopConnections] = [:]
    private let registry = PthreadLock()
    /// The certificates new connections get; swapped by a reload.
    private var tls: ListenerTLS?
    private let tlsLock = PthreadLock()

    init(limits: ServerLimits, handler: any HTTPHandler, tls: ListenerTLS?) {
        self.limits = limits
        self.handler = handler
        self.tls = tls
        bodyBudget = BodyBudget(limit: limits.maxBufferedBodyBytes)
    }

    func replaceTLS(_ tls: ListenerTLS) { tlsLock.withLock { self.tls = tls } }

    var isDraining: Bool { draining.load(ordering: .relaxed) }

    func startDraining() { draining.store(true, ordering: .relaxed) }

    private func connections(of loop: EventLoop) -> LoopConnections {
        registry.withLock {
            if let existing = byLoop[ObjectIdentifier(loop)] { return existing }
            let created = LoopConnections()
            byLoop[ObjectIdentifier(loop)] = created
            return created
        }
    }

    func accept(_ socket: TCPConnection, on loop: EventLoop) {
        var handshake: (stream: TLSStream, timeoutMs: Int)?
        if let tls = tlsLock.withLock({ self.tls }) {
            guard let session = try? TLSSession(tls.context) else {
                handler.tlsHandshakeFailed(reason: TLSFailure.otherReason)  // out of memory: nothing else makes SSL_new fail
                return socket.close()
            }
            handshake = (TLSStream(over: socket, session: session, loop: loop, peer: socket.peerAddress), tls.handshakeTimeoutMs)
        }
        let connection = HTTPConnection(socket: handshake?.stream ?? socket, shared: self, loop: loop)
        let open = connections.add(1, ordering: .relaxed).newValue
        connections(of: loop).set[ObjectIdentifier(connection)] = connection
        if open > limits.connectionLimit {
            return refuse(connection, reason: "connection_limit", "the gateway has \(limits.connectionLimit) connections open; retry shortly")
        }
        if limits.perIPConnectionLimit > 0, !handler.exemptFromPerIPLimit(connection.clientAddress) {
            let admitted = perIP.withLock { () -> Bool in
                let count = perIPCounts[connection.clientAddress, default: 0]
                guard count < limits.perIPConnectionLimit else { return false }
                perIPCounts[connection.clientAddress] = count + 1
                return true
            }
            guard admitted else {
                connection.countedPerIP = false
                return refuse(connection, reason: "per_ip_connection_limit",
                              "this address has \(limits.perIPConnectionLimit) connections open; retry shortly")
            }
            connection.countedPerIP = true
        }
        guard let (stream, timeoutMs) = handshake else { return connection.start() }
        // The handshake counts against the limits above (the connection is registered); HTTP starts once it is done.
        stream.handshake(timeoutMs: timeoutMs) { [self, unowned connection, unowned stream] failure in
            if let failure {
                handler.tlsHandshakeFailed(reason: failure.reasonCode)
                return connection.close()
            }
            let tls = TLSInfo(version: stream.session.protocolVersion, alpn: stream.session.applicationProtocol)
            guard tls.alpn == "h2" else {
                connection.tls = tls
                return connection.start()
            }
            upgrade(connection, to: stream, tls: tls, initial: [])
        }
    }

    /// The connection speaks HTTP/2 (ALPN h2, or an h2c preface): an `HTTP2Connection` takes the transport and the
    /// connection's place in the limits; the HTTP/1.1 side gives up without closing anything.
    func upgrade(_ connection: HTTPConnection, to socket: any ByteStream, tls: TLSInfo?, initial: [UInt8]) {
        let upgraded: HTTP2Connection
        do {
            upgraded = try HTTP2Connection(socket: socket, shared: self, loop: connection.loop, tls: tls)
        } catch {
            handler.http2Protection(reason: HTTP2Protections.internalError)
            return connection.close()
        }
        connection.handOver()
        upgraded.countedPerIP = connection.countedPerIP
        let set = connections(of: connection.loop)
        set.set.removeValue(forKey: ObjectIdentifier(connection))
        set.set[ObjectIdentifier(upgraded)] = upgraded
        upgraded.start(initial: initial)
    }

    /// Over a limit: a 503 written and the connection closed, logged and counted — not a silent reset. Over TLS the
    /// connection is closed at once: a handshake only to say "busy" would spend what the limit protects.
    private func refuse(_ connection: HTTPConnection, reason: String, _ message: String) {
        handler.rejected(method: "-", target: "-", clientAddress: connection.clientAddress, status: 503, reason: reason)
        if connection.isTLS { return connection.close() }
        var response = HTTPResponse.error(status: 503, reason: reason, message: message)
        response.headers.append(HTTPField("Retry-After", "1"))
        connection.refuse(response)
    }

    func connectionClosed(_ connection: any ServerConnection) {
        connections.subtract(1, ordering: .relaxed)
        releaseMemoryAfterManyCloses(on: connection.loop)
        connections(of: connection.loop).set.removeValue(forKey: ObjectIdentifier(connection))
        if connection.countedPerIP {
            perIP.withLock {
                let left = perIPCounts[connection.clientAddress, default: 1] - 1
                perIPCounts[connection.clientAddress] = left > 0 ? left : nil
            }
        }
    }

    /// After a burst of closes (a flood of connections holding big unfinished heads, say) the freed buffers go
    /// back to the system a second after the burst, not at the next periodic trim: every 1,024 closes push
    /// the trim of the closing loop a second further (a loop thread only ever touches its own timer).
    private func releaseMemoryAfterManyCloses(on loop: EventLoop) {
        guard closedSinceTrim.add(1, ordering: .relaxed).newValue >= 1024 else { return }
        closedSinceTrim.store(0, ordering: .relaxed)
        let local = connections(of: loop)
        if local.trimTimer == nil { local.trimTimer = LoopTimer(loop) { releaseFreedMemory() } }
        local.trimTimer?.start(milliseconds: 1000)
    }

    func requestStarted() { inFlight.add(1, ordering: .relaxed) }
    /// A request is over: it leaves the in-flight count and gives back the body bytes it still held.
    func requestFinished(releasing reserved: Int) {
        bodyBudget.release(reserved)
        inFlight.subtract(1, ordering: .relaxed)
    }

    func closeIdle(on loop: EventLoop) {
        for connection in Array(connections(of: loop).set.values) { connection.closeIfIdle() }
    }

    func closeAll(on loop: EventLoop) {
        for connection in Array(connections(of: loop).set.values) { connection.close() }
    }
}

/// A listener's TLS: the certificates (`TLSServerContext`) and how long a handshake may take.
public struct ListenerTLS: Sendable {
    public let context: TLSServerContext
    public let handshakeTimeoutMs: Int

    public init(context: TLSServerContext, handshakeTimeoutMs: Int) { (self.context, self.handshakeTimeoutMs) = (context, handshakeTimeoutMs) }
}

/// One loop's connections (its own thread only).
final class LoopConnections {
    var set: [ObjectIdentifier: any ServerConnection] = [:]
    /// Gives freed memory back after a burst of closes.
    var trimTimer: LoopTimer?
}

/// The process-wide bound on request-body bytes held in memory.
final class BodyBudget: Sendable {
    private let reserved = Atomic<Int>(0)
    let limit: Int

    var used: Int { reserved.load(ordering: .relaxed) }

    init(limit: Int) { self.limit = limit }

    func reserve(_ bytes: Int) -> Bool {
        let now = reserved.add(bytes, ordering: .relaxed).newValue
        if now <= limit { return true }
        reserved.subtract(bytes, ordering: .relaxed)
        return false
    }

    func release(_ bytes: Int) {
        if bytes > 0 { reserved.subtract(bytes, ordering: .relaxed) }
    }
}
