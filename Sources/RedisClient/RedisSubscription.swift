import Dispatch
import EventLoop

/// A pub/sub subscription on a connection of its own, read by one thread that may block: messages and
/// PING answers queue here until `next` takes them. Once the connection is lost, `next` and `ping` throw;
/// the reader subscribes again (after a failover that is how it finds the new primary).
public final class RedisSubscription: @unchecked Sendable {
    public enum Push: Equatable, Sendable {
        case message([UInt8])
        case pong
        case other
    }

    /// The server subscribed to.
    public let address: RedisAddress
    private let loop: EventLoop
    private let state = Locked<(pushes: [Push], failure: RedisClientError?)>(([], nil))
    private let arrived = DispatchSemaphore(value: 0)
    private var connection: LoopRedisConnection?

    private init(loop: EventLoop, address: RedisAddress) {
        self.loop = loop
        self.address = address
    }

    /// Connects and subscribes; on `loop`, whose thread it runs on.
    static func open(loop: EventLoop, address: RedisAddress, options: RedisOptions,
                     channel: [UInt8]) async throws(RedisClientError) -> RedisSubscription {
        let subscription = RedisSubscription(loop: loop, address: address)
        let state = subscription.state
        let arrived = subscription.arrived
        let connection = LoopRedisConnection(loop: loop, address: address, options: options) { reply in
            state.withLock { $0.pushes.append(Self.push(reply)) }
            arrived.signal()
        }
        connection.onClose = { reason in
            state.withLock { $0.failure = reason }
            arrived.signal()
        }
        subscription.connection = connection
        // The confirmation is an ordinary reply (bounded by timeoutMs); everything after it is a push.
        let confirmed = await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<Result<RedisReply, RedisClientError>>, Never>) in
            connection.send([Array("SUBSCRIBE".utf8), channel]) { continuation.resume(returning: Unchecked($0)) }
        }
        let reply = try confirmed.value.get()
        guard case .array(let items) = reply, case .string(let kind)? = items.first, kind == Array("subscribe".utf8) else {
            throw .unavailable("SUBSCRIBE on \(address) answered \(reply.kind)")
        }
        return subscription
    }

    deinit { close(.unavailable("subscription closed")) }

    private static func push(_ reply: RedisReply) -> Push {
        guard case .array(let items) = reply, case .string(let kind)? = items.first else { return .other }
        switch String(decoding: kind, as: UTF8.self) {
        case "message" where items.count == 3:
            guard case .string(let payload) = items[2] else { return .other }
            return .message(payload)
        case "pong": return .pong
        default: return .other
        }
    }

    /// Sends PING; its `.pong` comes back in order with the messages.
    public func ping() throws(RedisClientError) {
        if let failure = state.withLock({ $0.failure }) { throw failure }
        let carried = Unchecked(connection)
        loop.executeOnLoop { carried.value?.sendUnmatched([Array("PING".utf8)]) }
    }

    /// The next push, waiting at most `waitingMs`; nil when nothing came. Throws once the connection is gone.
    public func next(waitingMs: Int) throws(RedisClientError) -> Push? {
        if let push = try take() { return push }
        _ = arrived.wait(timeout: .now() + .milliseconds(waitingMs))
        return try take()
    }

    private func take() throws(RedisClientError) -> Push? {
        try state.withLock { (state) throws(RedisClientError) -> Push? in
            if !state.pushes.isEmpty { return state.pushes.removeFirst() }
            if let failure = state.failure { throw failure }
            return nil
        }
    }

    /// Ends it: `next` and `ping` throw `reason` from then on (the reader subscribes again).
    func close(_ reason: RedisClientError) {
        let carried = Unchecked(connection)
        loop.executeOnLoop { carried.value?.close(reason) }
    }
}
