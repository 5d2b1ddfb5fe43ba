import EventLoop
import Dispatch

/// A bounded pool of Redis connections shared by the HTTP server's threads (one per client connection).
/// A caller waits at most `timeoutMs` for a free slot; connections are opened lazily, each within
/// `timeoutMs`, and every command is bounded by `timeoutMs` too. A broken connection is dropped and its
/// slot reopens on demand, so a restarted Redis is picked up without restarting the gateway.
public final class RedisPool: Sendable {
    public let endpoint: RedisEndpoint
    public let size: Int
    public let timeoutMs: Int
    /// One permit per connection the pool may hold; a permit is held while a connection is lent out.
    private let permits: DispatchSemaphore
    private let idle = Locked<[Parked]>([])

    /// A connection nobody borrows. It crosses threads only through the pool, which lends it to one
    /// borrower at a time; that hand-over discipline is what the unchecked conformance stands for.
    private struct Parked: @unchecked Sendable {
        let connection: RedisConnection
    }

    public init(endpoint: RedisEndpoint, size: Int = 16, timeoutMs: Int = 500) throws(StoreError) {
        guard size > 0 else { throw .invalidArgument("Redis pool size must be at least 1, got \(size)") }
        guard timeoutMs > 0 else { throw .invalidArgument("Redis timeout must be positive, got \(timeoutMs) ms") }
        self.endpoint = endpoint
        self.size = size
        self.timeoutMs = timeoutMs
        permits = DispatchSemaphore(value: size)
    }

    /// Lends one connection to `body` for its whole duration, then takes it back unless it broke.
    public func with<T>(_ body: (RedisConnection) throws(StoreError) -> T) throws(StoreError) -> T {
        guard permits.wait(timeout: .now() + .milliseconds(timeoutMs)) == .success else {
            throw .unavailable("no Redis connection free within \(timeoutMs) ms (pool of \(size))")
        }
        defer { permits.signal() }
        let connection: RedisConnection
        if let reused = takeIdle() {
            connection = reused
        } else {
            connection = try RedisConnection(endpoint: endpoint, timeoutMs: timeoutMs)
        }
        // Runs before the permit is released, so the next waiter finds this connection idle.
        defer { giveBack(connection) }
        return try body(connection)
    }

    /// Connections currently open and not lent out.
    public var idleCount: Int { idle.withLock { $0.count } }

    private func takeIdle() -> RedisConnection? {
        while let parked = idle.withLock({ $0.popLast() }) {
            if !parked.connection.closedWhileIdle { return parked.connection }
        }
        return nil
    }

    private func giveBack(_ connection: RedisConnection) {
        guard !connection.isBroken else { return }
        idle.withLock { $0.append(Parked(connection: connection)) }
    }
}
