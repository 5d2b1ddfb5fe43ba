import EventLoop

/// How one event loop reaches the deployment: which server gets a command. Loop thread only.
protocol RedisRouting: AnyObject {
    /// `key`: a key the command touches (all its keys share one slot); nil for keyless commands.
    func command(_ arguments: [[UInt8]], key: [UInt8]?) async throws(RedisClientError) -> RedisReply
    /// A server to subscribe on (pub/sub messages reach every node of a Cluster).
    func subscriptionAddress() async throws(RedisClientError) -> RedisAddress
    func close()
}

/// One server.
final class SingleRouter: RedisRouting {
    private let node: LoopRedisNode

    init(loop: EventLoop, address: RedisAddress, options: RedisOptions) {
        node = LoopRedisNode(loop: loop, address: address, options: options)
    }

    func command(_ arguments: [[UInt8]], key: [UInt8]?) async throws(RedisClientError) -> RedisReply {
        try await node.command(arguments)
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
