import EventLoop

/// One server from one event loop: a few pipelined connections used in turn. A broken connection is
/// replaced on the next command, but not within `options.reconnectPauseMs` of a failed attempt, so an outage
/// does not turn every request into a connect attempt. Loop thread only.
final class LoopRedisNode {
    private var reconnectPauseMs: UInt64 { UInt64(max(0, options.reconnectPauseMs)) }

    let address: RedisAddress
    private let loop: EventLoop
    private let options: RedisOptions
    private let expect: LoopRedisConnection.Expectation
    private var connections: [LoopRedisConnection?]
    private var next = 0
    /// Closed by its owner: a command that picked this node before (a failover followed meanwhile) is not
    /// sent, so the owner can send it where it now belongs.
    private var released: RedisClientError?

    init(loop: EventLoop, address: RedisAddress, options: RedisOptions, expect: LoopRedisConnection.Expectation = .any) {
        self.loop = loop
        self.address = address
        self.options = options
        self.expect = expect
        connections = Array(repeating: nil, count: options.connectionsPerNode)
    }

    /// Sends one command (`asking`: preceded by ASKING on the same connection); `reply` is called once, on
    /// the loop.
    func send(_ command: RedisCommand, asking: Bool = false, reply: @escaping LoopRedisConnection.Reply) {
        let connection: LoopRedisConnection
        do throws(RedisClientError) {
            connection = try pick()
        } catch {
            return reply(.failure(error))
        }
        connection.send(command, asking: asking, reply: reply)
    }

    /// One command's reply, for the routers' own async steps.
    func command(_ command: RedisCommand, asking: Bool = false) async throws(RedisClientError) -> RedisReply {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<Result<RedisReply, RedisClientError>>, Never>) in
            send(command, asking: asking) { continuation.resume(returning: Unchecked($0)) }
        }
        return try result.value.get()
    }

    func command(_ arguments: [[UInt8]]) async throws(RedisClientError) -> RedisReply {
        try await command(RedisCommand(arguments))
    }

    /// A connection is up (or being opened): commands need no new one.
    var isConnected: Bool { connections.contains { $0.map { !$0.isClosed } ?? false } }

    /// Whether the last attempt to reach the server failed a moment ago (callers may look elsewhere).
    var recentlyFailed: Bool {
        connections.contains { connection in
            guard let connection, connection.isClosed, let failed = connection.failedAtMs else { return false }
            return loop.nowMs < failed + reconnectPauseMs
        }
    }

    private func pick() throws(RedisClientError) -> LoopRedisConnection {
        if let released { throw .unreachable(released.message) }
        // The connection holding this iteration's commands takes this one too: they leave in one write.
        for case let connection? in connections where connection.hasOutgoing && !connection.isClosed { return connection }
        next = (next + 1) % connections.count
        if let connection = connections[next] {
            if !connection.isClosed { return connection }
            if let failed = connection.failedAtMs, loop.nowMs < failed + reconnectPauseMs {
                throw .unreachable("Redis at \(address) failed a moment ago (\(connection.failure ?? "closed")); not retried yet")
            }
        }
        let created = LoopRedisConnection(loop: loop, address: address, options: options, expect: expect)
        connections[next] = created
        return created
    }

    /// Fails the commands waiting on its connections with `reason`; none is sent through it afterwards.
    func close(_ reason: RedisClientError = .unavailable("client released")) {
        released = reason
        for connection in connections { connection?.close(reason) }
        connections = connections.map { _ in nil }
    }
}
