import EventLoop

/// One kept-alive connection to an `http://` upstream, owned by its loop: the socket, the response parser
/// it reuses for every exchange (with the buffer a head's fields are read into), and the peer as logged. It
/// stays the socket's and the parser's delegate for its whole life and hands their events to the exchange it
/// serves (a weak reference set per exchange would cost an allocation per request). While idle in the pool
/// it keeps reading (no epoll_ctl between exchanges): anything it hears then (the upstream closing it, or
/// bytes out of turn) closes it.
final class PlainHTTPConnection: TCPConnectionDelegate {
    let tcp: TCPConnection
    let parser = ResponseParser()
    /// Times the exchange it serves, from the request to the end of the response (one timer for the
    /// connection's life: cheaper than one handed to each exchange, and nothing to set per exchange).
    let watchdog: Watchdog
    /// "ip:port", "[ip]:port" for IPv6.
    let remoteAddress: String
    /// The exchange this connection serves, nil while idle. The exchange holds the connection and clears this
    /// before it lets go (at the latest in its deinit); `unowned` traps rather than dangles if that ever breaks.
    unowned var exchange: PlainHTTPExchange?
    fileprivate let key: String
    fileprivate weak var pool: PlainHTTPPool?
    /// While idle: when it stops being reused (the loop's clock, ms).
    fileprivate var reusableUntilMs: UInt64 = 0
    fileprivate func isExpired(at nowMs: UInt64) -> Bool { reusableUntilMs <= nowMs }

    init(_ tcp: TCPConnection, key: String, port: Int, loop: EventLoop) {
        self.tcp = tcp
        self.key = key
        watchdog = Watchdog(loop)
        let ip = tcp.peerAddress
        remoteAddress = ip.utf8.contains(UInt8(ascii: ":")) ? "[" + ip + "]:" + String(port) : ip + ":" + String(port)
        tcp.delegate = self
        parser.serve(self)
        watchdog.expired = { [unowned self] in exchange?.timedOut() }
    }

    func close() {
        exchange = nil
        pool = nil
        watchdog.close()
        tcp.close()
    }

    func received(_ bytes: UnsafeRawBufferPointer) {
        if let exchange { exchange.received(bytes) } else { pool?.drop(self) }
    }

    func readEnded(error: LoopError?) {
        if let exchange { exchange.readEnded(error: error) } else { pool?.drop(self) }
    }

    func drained() { exchange?.drained() }

    // What the parser reports.
    /// A head is complete (an interim 1xx one too; its fields are dropped unless taken now). True: no body
    /// follows whatever the head says (HEAD).
    func parsedHeadersComplete(status: Int) -> Bool { exchange?.parsedHeadersComplete(status: status) ?? true }
    func parsedBody(_ bytes: UnsafeRawBufferPointer) { exchange?.parsedBody(bytes) }
    /// A message ended. True: stop here (the final response), false: read on (after an interim 1xx).
    func parsedMessageComplete(status: Int) -> Bool { exchange?.parsedMessageComplete(status: status) ?? true }
}

/// The idle connections of one loop, per upstream host and port, most recently used last (likeliest alive);
/// bounded per upstream (`maxIdleConnections`) and for the loop (`LoopMulti.idleConnectionsPerLoop`). Also
/// what exchanges reuse instead of allocating per request: the connect timers and the buffer a request
/// head is assembled in. Loop thread only.
final class PlainHTTPPool {
    let loop: EventLoop
    private let capacity: Int
    /// Per upstream host and port: a short list searched in order (small-string compares cost less than
    /// hashing the key twice a request). Arrays held here are changed on a local copy taken out and put back
    /// (`var list = x; x = []; …; x = list`): changed in place, the access would span the array's own code
    /// (which may free a buffer) and every access to them would be an exclusivity-checked one.
    private var idle: [IdleList] = []
    private(set) var idleCount = 0
    private var spareWatchdogs: [Watchdog] = []
    /// The request head (and a small in-memory body, or a chunk's framing) is assembled here, then written
    /// with one call; TCPConnection copies what it cannot write at once. Lent out and given back: held by
    /// the pool across the write, every access to it would be an exclusivity-checked one.
    private var scratch: [UInt8] = []
    /// Closes connections idle past their time every second while any are idle (an upstream that never
    /// closes idle connections would otherwise hold them until the next request to it).
    private lazy var sweeper = LoopTimer(loop) { [weak self] in self?.sweep() }
    private var sweeping = false

    init(loop: EventLoop, capacity: Int) {
        self.loop = loop
        self.capacity = capacity
    }

    /// The most recently used idle connection still within its keep-alive time; older ones met on the way
    /// are closed (the upstream may be closing them right now), and so is one with bytes waiting or closed by
    /// the upstream: an unsolicited response would otherwise be read as the next request's.
    func take(_ key: String) -> PlainHTTPConnection? {
        guard let list = idle.first(where: { $0.key == key }) else { return nil }
        var connections = list.connections
        list.connections = []
        defer { list.connections = connections }
        while let connection = connections.popLast() {
            idleCount -= 1
            connection.pool = nil  // closing it then cannot call back into the pool
            if !connection.isExpired(at: loop.nowMs) && !connection.tcp.hasUnreadInput { return connection }
            connection.close()
        }
        return nil
    }

    /// After a clean exchange with keep-alive semantics: kept for `keepForMs` if there is room, else closed.
    func put(_ connection: PlainHTTPConnection, limit: Int, keepForMs: Int) {
        let list = idle.first { $0.key == connection.key } ?? {
            let added = IdleList(key: connection.key)
            var lists = idle
            idle = []
            lists.append(added)
            idle = lists
            return added
        }()
        guard idleCount < capacity, list.connections.count < limit, !connection.tcp.isClosed else {
            return connection.close()
        }
        connection.reusableUntilMs = loop.nowMs + UInt64(keepForMs)
        var connections = list.connections
        list.connections = []
        connections.append(connection)
        list.connections = connections
        idleCount += 1
        connection.pool = self
        connection.tcp.startReading()
        if !sweeping {
            sweeping = true
            sweeper.start(milliseconds: 1000, repeatMs: 1000)
        }
    }

    private func sweep() {
        let now = loop.nowMs
        var expired: [PlainHTTPConnection] = []
        for list in idle {
            var connections = list.connections
            list.connections = []
            connections.removeAll { connection in
                guard connection.isExpired(at: now) else { return false }
                expired.append(connection)
                return true
            }
            list.connections = connections
        }
        // Closed once out of `idle`: closing can call back into the pool.
        idleCount -= expired.count
        expired.forEach { $0.close() }
        if idleCount == 0 {
            sweeper.stop()
            sweeping = false
        }
    }

    /// An idle connection stirred: the upstream closed it or spoke out of turn.
    fileprivate func drop(_ connection: PlainHTTPConnection) {
        if let list = idle.first(where: { $0.key == connection.key }), let index = list.connections.firstIndex(where: { $0 === connection }) {
            var connections = list.connections
            list.connections = []
            connections.remove(at: index)
            list.connections = connections
            idleCount -= 1
        }
        connection.close()
    }

    func takeWatchdog() -> Watchdog { spareWatchdogs.popLast() ?? Watchdog(loop) }

    func giveBack(_ watchdog: Watchdog) {
        watchdog.disarm()
        if spareWatchdogs.count < 1024 { spareWatchdogs.append(watchdog) } else { watchdog.close() }
    }

    /// The assembly buffer, empty (`giveBack(scratch:)` once written).
    func borrowScratch() -> [UInt8] {
        var lent = scratch
        scratch = []
        // Not a large body's worth of memory held for the next request.
        if lent.capacity > 256 * 1024 { lent = [] }
        lent.removeAll(keepingCapacity: true)
        return lent
    }

    func giveBack(scratch lent: [UInt8]) { scratch = lent }
}

/// One upstream's idle connections in a pool, most recently used last.
private final class IdleList {
    let key: String
    var connections: [PlainHTTPConnection] = []

    init(key: String) { self.key = key }
}
