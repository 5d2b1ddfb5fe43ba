import EventLoop

/// Why a command got no reply. An error *reply* from Redis is a `RedisReply.error`, not this.
public enum RedisClientError: Error, Equatable, Sendable {
    /// The command was not sent: the server could not be reached, or refused the login or role check. Safe
    /// to send elsewhere (another primary after a failover).
    case unreachable(String)
    /// The connection failed after the command may have been sent.
    case unavailable(String)
    case timeout(String)

    public var message: String {
        switch self {
        case .unreachable(let text), .unavailable(let text), .timeout(let text): return text
        }
    }
}

/// One pipelined connection to one server: commands queue while it connects and logs in, then go out at
/// once; replies come back in order. Every reply is awaited at most `timeoutMs`; an overdue one closes the
/// connection (a pipeline cannot skip a reply) and fails every command still waiting. Loop thread only.
final class LoopRedisConnection: TCPConnectionDelegate {
    /// What the connection checks once logged in.
    enum Expectation {
        case any
        /// Sentinel mode: a server that is no longer the primary (demoted after a failover) is refused.
        case primary
    }

    typealias Reply = (Result<RedisReply, RedisClientError>) -> Void

    let address: RedisAddress
    private let loop: EventLoop
    private let timeoutMs: Int
    /// Replies nobody waits for (pub/sub messages) go here; without it they are a protocol error.
    private let push: ((RedisReply) -> Void)?
    private var socket: (any RedisStream)?
    private var ready = false
    /// Redis answered at least once on this connection (it was reachable and the login went through).
    private var answered = false
    private(set) var isClosed = false
    /// When and why the connection failed (nil: still open, or closed on purpose).
    private(set) var failedAtMs: UInt64?
    private(set) var failure: String?
    /// Written before the connection is up.
    private var queued: [UInt8] = []
    /// This loop iteration's commands, written together before the loop polls: one system call here and one
    /// read on Redis' side for all of them, rather than one each.
    private var outgoing: [UInt8] = []
    /// Commands wait in `outgoing` for the end of the iteration.
    private(set) var hasOutgoing = false
    private var waiting: [(deadline: UInt64, reply: Reply)] = []
    private var head = 0
    private var inbound: [UInt8] = []
    private var parsed = 0
    private var timer: LoopTimer?
    /// Called once when the connection closes (its owner forgets it).
    var onClose: ((RedisClientError) -> Void)?

    init(loop: EventLoop, address: RedisAddress, options: RedisOptions, expect: Expectation = .any,
         push: ((RedisReply) -> Void)? = nil) {
        self.loop = loop
        self.address = address
        self.timeoutMs = options.timeoutMs
        self.push = push
        timer = LoopTimer(loop) { [weak self] in self?.checkDeadlines() }
        timer?.start(milliseconds: timeoutMs)
        handshake(options, expect: expect)
        connectRedisStream(loop, host: address.host, port: address.port, tls: options.tls, handshakeTimeoutMs: timeoutMs) { [weak self] result in
            guard let self else {
                if case .success(let socket) = result { socket.close() }
                return
            }
            switch result {
            case .failure(let error):
                close(error)
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

    /// AUTH, SELECT and the role check go first in the pipeline; a refusal closes the connection, failing
    /// whatever was queued behind them.
    private func handshake(_ options: RedisOptions, expect: Expectation) {
        let address = self.address
        if let password = options.password {
            send(["AUTH"] + (options.username.map { [$0] } ?? []) + [password]) { [weak self] result in
                self?.require(result, "AUTH") { $0 == .status("OK") }
            }
        }
        if options.database != 0 {
            send(["SELECT", String(options.database)]) { [weak self] result in self?.require(result, "SELECT") { $0 == .status("OK") } }
        }
        if expect == .primary {
            send(["ROLE"]) { [weak self] result in
                self?.require(result, "ROLE", refusal: "\(address) is not the primary (a replica after a failover?)") { reply in
                    guard case .array(let items) = reply, case .string(let role)? = items.first else { return false }
                    return role == Array("master".utf8)
                }
            }
        }
    }

    private func send(_ words: [String], _ reply: @escaping Reply) {
        send(words.map { Array($0.utf8) }, reply: reply)
    }

    private func require(_ result: Result<RedisReply, RedisClientError>, _ command: String, refusal: String? = nil,
                        _ accepted: (RedisReply) -> Bool) {
        guard case .success(let reply) = result, !accepted(reply) else { return }
        close(.unavailable(refusal ?? "\(command) on Redis at \(address) failed: \(reply.kind)"), refused: true)
    }

    /// Queues one command; with `asking`, an ASKING right before it (a Cluster slot being migrated).
    func send(_ command: RedisCommand, asking: Bool = false, reply: @escaping Reply) {
        guard !isClosed else { return reply(.failure(.unreachable(failure ?? "connection to \(address) closed"))) }
        let deadline = loop.nowMs + UInt64(timeoutMs)
        if asking {
            waiting.append((deadline, { _ in }))
            write(Self.asking)
        }
        waiting.append((deadline, reply))
        write(command)
    }

    func send(_ arguments: [[UInt8]], asking: Bool = false, reply: @escaping Reply) {
        send(RedisCommand(arguments), asking: asking, reply: reply)
    }

    private static let asking = RedisCommand([Array("ASKING".utf8)])

    /// Writes a command whose answer comes as a push (SUBSCRIBE, and PING once subscribed).
    func sendUnmatched(_ arguments: [[UInt8]]) {
        guard !isClosed else { return }
        write(RedisCommand(arguments))
    }

    private func write(_ command: RedisCommand) {
        guard ready, socket != nil else { return command.write(to: &queued) }
        command.write(to: &outgoing)
        guard !hasOutgoing else { return }
        hasOutgoing = true
        loop.beforePoll { [weak self] in self?.flush() }
    }

    private func flush() {
        hasOutgoing = false
        guard let socket, !outgoing.isEmpty else { return }
        socket.write(outgoing)
        outgoing.removeAll(keepingCapacity: true)
    }

    func received(_ bytes: UnsafeRawBufferPointer) {
        inbound.append(contentsOf: bytes)
        do throws(RESP.ProtocolError) {
            while !isClosed, let (reply, end) = try RESP.parse(inbound, from: parsed) {
                parsed = end
                answered = true
                if head < waiting.count {
                    let callback = waiting[head].reply
                    head += 1
                    callback(.success(reply))
                } else if let push {
                    push(reply)
                } else {
                    throw RESP.ProtocolError(message: "a reply nobody asked for")
                }
            }
        } catch {
            return close(.unavailable("Redis at \(address) sent a malformed reply: \(error.message)"))
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
        } else if head >= Self.answeredKept {
            // A connection that always has a command in flight (one sent from another's reply) never empties
            // the queue: without this the answered entries, and what their callbacks hold, would pile up.
            waiting.removeFirst(head)
            head = 0
        }
    }

    /// Answered entries left at the front of `waiting` before they are dropped.
    static let answeredKept = 1024

    /// Entries in the reply queue, answered ones included (tests: it stays bounded).
    var queueLength: Int { waiting.count }

    func readEnded(error: LoopError?) {
        close(.unavailable("Redis at \(address) closed the connection" + (error.map { ": \($0)" } ?? "")))
    }

    func drained() {
        if socket?.writeFailed == true { close(.unavailable("writing to Redis at \(address) failed")) }
    }

    private func checkDeadlines() {
        if head < waiting.count, waiting[head].deadline <= loop.nowMs {
            return close(.timeout("Redis at \(address) did not answer within \(timeoutMs) ms"))
        }
        timer?.start(milliseconds: max(10, timeoutMs / 4))
    }

    /// `refused`: the server answered but would not serve (login, role).
    func close(_ reason: RedisClientError, refused: Bool = false) {
        guard !isClosed else { return }
        isClosed = true
        // A server that could not be reached, refused the login or stopped answering is given a pause;
        // an established connection the server closed (restart, idle timeout) is simply replaced.
        switch reason {
        case .timeout(let detail): (failedAtMs, failure) = (loop.nowMs, detail)
        case .unavailable(let detail) where !answered || refused, .unreachable(let detail): (failedAtMs, failure) = (loop.nowMs, detail)
        case .unavailable(let detail): failure = detail
        }
        socket?.close()
        socket = nil
        outgoing = []
        timer?.close()
        timer = nil
        // Commands that never reached a server that would run them can go elsewhere.
        var outcome = reason
        if case .unavailable(let detail) = reason, !ready || refused { outcome = .unreachable(detail) }
        let pending = waiting[head...]
        waiting = []
        head = 0
        for entry in pending { entry.reply(.failure(outcome)) }
        onClose?(reason)
        onClose = nil
    }
}
