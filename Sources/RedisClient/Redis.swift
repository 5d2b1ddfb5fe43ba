import Dispatch
import EventLoop

/// A Redis deployment (one server, a Cluster, or a Sentinel-managed primary) used from any thread.
///
/// On an event loop a command runs on that loop's own pipelined connections (each loop routes for itself,
/// so a request never waits on a lock or a thread). Callers off the loops — operator commands, the receipt
/// refresher, start-up — go through one loop this object starts for them (`command` hops there; such callers
/// wait with `waitFor`).
public final class Redis: @unchecked Sendable {
    public let options: RedisOptions
    private let lock = PthreadLock()
    private var routers: [ObjectIdentifier: (loop: EventLoop, router: any RedisRouting)] = [:]
    private var ownLoop: EventLoop?
    private let reporter: TopologyReporter
    /// With sentinels: the subscriptions opened, closed when another primary is named, so their readers
    /// subscribe again there (and reload what they missed) instead of listening where nobody publishes.
    private var subscriptions: [() -> RedisSubscription?] = []

    /// `onTopologyChange`: told once per change of primary (Sentinel) or of the Cluster's primaries.
    public init(options: RedisOptions, onTopologyChange: (@Sendable (RedisTopologyEvent) -> Void)? = nil) {
        self.options = options
        reporter = TopologyReporter(sink: onTopologyChange)
    }

    deinit {
        for (loop, router) in routers.values {
            let carried = Unchecked(router)
            loop.executeOnLoop { carried.value.close() }
        }
        ownLoop?.stop()
    }

    /// One command's reply. `key`: a key it touches (every key of one command shares a Cluster slot), nil
    /// for keyless commands. Error replies are returned, not thrown; thrown is only "no reply".
    public func command(_ arguments: [[UInt8]], key: [UInt8]? = nil) async throws(RedisClientError) -> RedisReply {
        try await command(RedisCommand(arguments), key: key)
    }

    /// The same for a command already in RESP. Runs on the caller's executor (no hop in, one continuation
    /// for the reply) and is inlined there: a request's command costs no task switch or frame of its own.
    @inlinable nonisolated(nonsending)
    public func command(_ command: RedisCommand, key: [UInt8]? = nil) async throws(RedisClientError) -> RedisReply {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<Result<RedisReply, RedisClientError>>, Never>) in
            send(command, key: key) { continuation.resume(returning: Unchecked($0)) }
        }
        return try result.value.get()
    }

    /// Sends one command; `reply` is called once, on the caller's loop (a request's command goes straight
    /// to that loop's router) or, off the loops, on the loop this object starts for such callers.
    public func send(_ command: RedisCommand, key: [UInt8]? = nil, reply: @escaping (Result<RedisReply, RedisClientError>) -> Void) {
        if let loop = EventLoop.current { return router(on: loop).send(command, key: key, reply: reply) }
        let loop: EventLoop
        do throws(RedisClientError) {
            loop = try helperLoop()
        } catch {
            return reply(.failure(error))
        }
        loop.executeOnLoop { [self] in router(on: loop).send(command, key: key, reply: reply) }
    }

    /// The longest one command may take: discovery, redirects and a login can each take `timeoutMs`.
    public var longestCommandMs: Int { max(2000, options.timeoutMs * (ClusterRouter.maxRedirects + 4)) }

    /// A subscription to `channel` on a connection of its own (on the helper loop), confirmed within `timeoutMs`.
    public func subscribe(_ channel: [UInt8]) async throws(RedisClientError) -> RedisSubscription {
        let loop = try helperLoop()
        let options = self.options
        let subscription = try await onLoop(loop) { (router) async throws(RedisClientError) in
            try await RedisSubscription.open(loop: loop, address: router.subscriptionAddress(), options: options, channel: channel)
        }
        if case .sentinel = options.topology {
            lock.withLock { subscriptions = subscriptions.filter { $0() != nil } + [{ [weak subscription] in subscription }] }
        }
        return subscription
    }

    /// Runs `body` on `loop` (hopping there) with its router.
    private func onLoop<T>(_ loop: EventLoop,
                           _ body: @escaping (any RedisRouting) async throws(RedisClientError) -> T) async throws(RedisClientError) -> T {
        let body = Unchecked(body)
        let result = await withTaskExecutorPreference(loop) { () async -> Unchecked<Result<T, RedisClientError>> in
            do throws(RedisClientError) {
                return Unchecked(.success(try await body.value(self.router(on: loop))))
            } catch {
                return Unchecked(.failure(error))
            }
        }
        return try result.value.get()
    }

    /// This loop's router, made on first use (on the loop's thread, as its handles require).
    private func router(on loop: EventLoop) -> any RedisRouting {
        lock.withLock {
            if let existing = routers[ObjectIdentifier(loop)] { return existing.router }
            let made: any RedisRouting
            switch options.topology {
            case .single(let address): made = SingleRouter(loop: loop, address: address, options: options)
            case .cluster(let seeds): made = ClusterRouter(loop: loop, seeds: seeds, options: options, reporter: reporter)
            case .sentinel(let sentinels, let name):
                made = SentinelRouter(loop: loop, sentinels: sentinels, masterName: name, options: options, reporter: reporter) {
                    [weak self] primary in self?.primaryReplaced(by: primary, noticedOn: loop)
                }
            }
            routers[ObjectIdentifier(loop)] = (loop, made)
            return made
        }
    }

    /// One loop's router saw a new primary: every other loop's asks the sentinels now (on its own thread),
    /// and subscriptions elsewhere are closed.
    private func primaryReplaced(by primary: RedisAddress, noticedOn noticing: EventLoop) {
        let (others, subscribed) = lock.withLock { (routers.values.filter { $0.loop !== noticing }, subscriptions.compactMap { $0() }) }
        for (loop, router) in others {
            guard let router = router as? SentinelRouter else { continue }
            let carried = Unchecked(router)
            loop.executeOnLoop { carried.value.check() }
        }
        for subscription in subscribed where subscription.address != primary {
            subscription.close(.unavailable("Redis at \(subscription.address) is no longer the primary: the sentinels name \(primary)"))
        }
    }

    private func helperLoop() throws(RedisClientError) -> EventLoop {
        lock.lock()
        defer { lock.unlock() }
        if let ownLoop { return ownLoop }
        do throws(LoopError) {
            let loop = try EventLoop(name: "redis")
            loop.start()
            ownLoop = loop
            return loop
        } catch {
            throw .unavailable("cannot start the Redis client's loop: \(error)")
        }
    }
}
