import EventLoop

/// How one event loop reaches the deployment: which server gets a command. Loop thread only.
protocol RedisRouting: AnyObject {
    /// Sends one command; `reply` is called once, on the loop. `key`: a key the command touches (all its
    /// keys share one slot); nil for keyless commands.
    func send(_ command: RedisCommand, key: [UInt8]?, reply: @escaping LoopRedisConnection.Reply)
    /// A server to subscribe on (pub/sub messages reach every node of a Cluster).
    func subscriptionAddress() async throws(RedisClientError) -> RedisAddress
    func close()
}

/// For routers whose routing takes async steps (discovery, redirects, asking the sentinels): `route` runs
/// in a task of its own on `loop`, and its outcome goes to `reply`.
func routeInTask(on loop: EventLoop, reply: @escaping LoopRedisConnection.Reply,
                 _ route: @escaping () async throws(RedisClientError) -> RedisReply) {
    let carried = Unchecked((route, reply))
    Task(executorPreference: loop) {
        let (route, reply) = carried.value
        do throws(RedisClientError) {
            reply(.success(try await route()))
        } catch {
            reply(.failure(error))
        }
    }
}

/// One server: a command goes straight to its connection, without a task or an async step.
final class SingleRouter: RedisRouting {
    private let node: LoopRedisNode

    init(loop: EventLoop, address: RedisAddress, options: RedisOptions) {
        node = LoopRedisNode(loop: loop, address: address, options: options)
    }

    func send(_ command: RedisCommand, key: [UInt8]?, reply: @escaping LoopRedisConnection.Reply) {
        node.send(command, reply: reply)
    }

    func subscriptionAddress() async throws(RedisClientError) -> RedisAddress { node.address }

    func close() { node.close() }
}

/// One refresh at a time: callers arriving while it runs wait for that one instead of starting another.
final class SingleFlight {
    private var waiters: [CheckedContinuation<Void, Never>]?

    var isRunning: Bool { waiters != nil }

    func run(_ body: () async -> Void) async {
        if waiters != nil {
            await withCheckedContinuation { waiters?.append($0) }
            return
        }
        waiters = []
        await body()
        let done = waiters ?? []
        waiters = nil
        for waiter in done { waiter.resume() }
    }
}
