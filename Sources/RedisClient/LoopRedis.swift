import EventLoop

/// Where a Redis listens and how to log in.
public struct RedisLogin: Sendable, Equatable {
    public let host: String
    public let port: Int
    public let username: String?
    public let password: String?
    public let database: Int

    public init(host: String, port: Int, username: String?, password: String?, database: Int) {
        (self.host, self.port, self.username, self.password, self.database) = (host, port, username, password, database)
    }
}

/// Why a command got no reply. An error *reply* from Redis is a `RedisReply.error`, not this.
public enum RedisClientError: Error, Equatable, Sendable {
    case unavailable(String)
    case timeout(String)
}

/// Redis commands from an event loop, without a thread: a few pipelined connections per loop, each
/// command a write and a reply matched in order. Every command is bounded by `timeoutMs`; a connection
/// that errs or times out is dropped (its pending commands fail) and the next command opens a new one.
/// Use on its loop's thread only.
public final class LoopRedisClient: @unchecked Sendable {
    public let loop: EventLoop
    private let login: RedisLogin
    private let timeoutMs: Int
    private var connections: [LoopRedisConnection?]
    private var next = 0

    public init(loop: EventLoop, login: RedisLogin, connections: Int, timeoutMs: Int) {
        self.loop = loop
        self.login = login
        self.timeoutMs = timeoutMs
        self.connections = Array(repeating: nil, count: max(1, connections))
    }

    deinit {
        let open = connections.compactMap { $0 }
        guard !open.isEmpty else { return }
        let carried = Unchecked(open)
        loop.executeOnLoop { carried.value.forEach { $0.close(.unavailable("client released")) } }
    }

    /// One command's reply.
    public func command(_ arguments: [[UInt8]]) async throws(RedisClientError) -> RedisReply {
        guard let connection = pick() else {
            throw .unavailable("Redis at \(login.host):\(login.port) failed a moment ago (\(lastFailure)); not retried yet")
        }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<Result<RedisReply, RedisClientError>>, Never>) in
            connection.send(arguments) { continuation.resume(returning: Unchecked($0)) }
        }
        return try result.value.get()
    }

    /// Round robin over live connections; a missing or broken slot gets a new connection — but not within
    /// `reconnectPauseMs` of a failed one, so an outage does not turn every request into a connect attempt.
    private func pick() -> LoopRedisConnection? {
        next = (next + 1) % connections.count
        if let connection = connections[next] {
            if !connection.isClosed { return connection }
            if let failed = connection.failedAtMs, loop.nowMs < failed + Self.reconnectPauseMs {
                lastFailure = connection.failure ?? "closed"
                return nil
            }
        }
        let created = LoopRedisConnection(loop: loop, login: login, timeoutMs: timeoutMs)
        connections[next] = created
        return created
    }

    public static let reconnectPauseMs: UInt64 = 200
    private var lastFailure = ""
}

/// One pipelined connection: commands queue while it connects and logs in, then go out at once; replies
/// come back in order.
final class LoopRedisConnection: TCPConnectionDelegate {
    private let loop: EventLoop
    private let login: RedisLogin
    private let timeoutMs: Int
    private var socket: (any RedisStream)?
    private var ready = false
    /// Redis answered at least once on this connection (it was reachable and the login went through).
    private var answered = false
    private(set) var isClosed = false
    /// When and why the connection failed (nil: still open, or closed on purpose).
    private(set) var failedAtMs: UInt64?
    private(set) var failure: String?
    /// Written before the login completes.
    private var queued: [UInt8] = []
    private var waiting: [(deadline: UInt64, reply: (Result<RedisReply, RedisClientError>) -> Void)] = []
    private var head = 0
    private var inbound: [UInt8] = []
    private var parsed = 0
    private var timer: LoopTimer?

    init(loop: EventLoop, login: RedisLogin, timeoutMs: Int) {
        self.loop = loop
        self.login = login
        self.timeoutMs = timeoutMs
        timer = LoopTimer(loop) { [weak self] in self?.checkDeadlines() }
        timer?.start(milliseconds: timeoutMs)
        var handshake: [[String]] = []
        if let password = login.password { handshake.append(["AUTH"] + (login.username.map { [$0] } ?? []) + [password]) }
        if login.database != 0 { handshake.append(["SELECT", String(login.database)]) }
        for command in handshake {
            enqueue(command.map { Array($0.utf8) }) { [weak self] result in
                if case .success(.status("OK")) = result { return }
                let answer = (try? result.get()).map(\.kind) ?? "no answer"
                self?.close(.unavailable("\(command[0]) on Redis at \(login.host):\(login.port) failed: \(answer)"))
            }
        }
        TCPConnection.connect(loop, host: login.host, port: login.port) { [weak self] result in
            guard let self else {
                if case .success(let socket) = result { socket.close() }
                return
            }
            switch result {
            case .failure(let error):
                close(.unavailable("cannot connect to Redis at \(login.host):\(login.port): \(error)"))
            case .success(let socket):
                guard !isClosed else { return socket.close() }
                self.socket = socket
                socket.delegate = self
                socket.startReading()
                ready = true
                if !queued.isEmpty { socket.write(queued) }
                queued = []
            }
        }
    }

    func send(_ arguments: [[UInt8]], reply: @escaping (Result<RedisReply, RedisClientError>) -> Void) {
        guard !isClosed else { return reply(.failure(.unavailable("connection closed"))) }
        enqueue(arguments, reply)
    }

    private func enqueue(_ arguments: [[UInt8]], _ reply: @escaping (Result<RedisReply, RedisClientError>) -> Void) {
        waiting.append((loop.nowMs + UInt64(timeoutMs), reply))
        var buffer: [UInt8] = []
        RESP.encode(arguments, into: &buffer)
        if ready, let socket { socket.write(buffer) } else { queued += buffer }
    }

    func received(_ bytes: UnsafeRawBufferPointer) {
        inbound.append(contentsOf: bytes)
        do throws(RESP.ProtocolError) {
            while head < waiting.count, let (reply, end) = try RESP.parse(inbound, from: parsed) {
                parsed = end
                answered = true
                let callback = waiting[head].reply
                head += 1
                callback(.success(reply))
            }
        } catch {
            return close(.unavailable("Redis sent a malformed reply: \(error.message)"))
        }
        if parsed == inbound.count {
            inbound.removeAll(keepingCapacity: true)
            parsed = 0
        } else if parsed > 64 * 1024 {
            inbound.removeFirst(parsed)
            parsed = 0
        }
        if head == waiting.count {
            waiting.removeAll(keepingCapacity: true)
            head = 0
        }
    }

    func readEnded(error: LoopError?) {
        close(.unavailable("Redis closed the connection" + (error.map { ": \($0)" } ?? "")))
    }

    func drained() {
        if socket?.writeFailed == true { close(.unavailable("writing to Redis failed")) }
    }

    /// A reply overdue: the pipeline cannot skip it, so the connection goes and every command waiting fails.
    private func checkDeadlines() {
        if head < waiting.count, waiting[head].deadline <= loop.nowMs {
            return close(.timeout("Redis did not answer within \(timeoutMs) ms"))
        }
        timer?.start(milliseconds: max(10, timeoutMs / 4))
    }

    func close(_ reason: RedisClientError) {
        guard !isClosed else { return }
        isClosed = true
        // A server that could not be reached (or logged into) or that stopped answering is given a pause;
        // an established connection the server closed (restart, idle timeout) is simply replaced.
        switch reason {
        case .timeout(let detail): (failedAtMs, failure) = (loop.nowMs, detail)
        case .unavailable(let detail) where !answered: (failedAtMs, failure) = (loop.nowMs, detail)
        case .unavailable: break
        }
        socket?.close()
        socket = nil
        timer?.close()
        timer = nil
        let pending = waiting[head...]
        waiting = []
        head = 0
        for entry in pending { entry.reply(.failure(reason)) }
    }
}
