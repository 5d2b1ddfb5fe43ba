import Foundation
import Synchronization

/// The gateway's connection to one protected API. Safe to share between threads: each `send` checks
/// out a transfer (with its kept-alive connection) from a pool and the response returns it.
public final class UpstreamClient: Sendable {
    public let target: UpstreamTarget
    private let pool: TransferPool

    public init(target: UpstreamTarget) {
        self.target = target
        pool = TransferPool(capacity: target.maxIdleConnections)
    }

    /// Sends the request and returns once the final status line and headers arrived; the body is then
    /// pulled with `UpstreamResponse.readBody()`, so streams reach the caller as they are produced.
    public func send(_ request: UpstreamRequest) throws(UpstreamError) -> UpstreamResponse {
        try request.validate()
        let transfer = try pool.checkOut()
        // A failed transfer is not returned: it goes away with its connection.
        try transfer.start(url: target.curlBaseURL + request.pathAndQuery, request: request, target: target)
        try transfer.waitForHeaders()
        return UpstreamResponse(transfer: transfer, pool: pool)
    }

    /// Kept-alive connections waiting for the next request.
    public var idleConnectionCount: Int { pool.idleCount }
}

/// Idle transfers of one upstream, most recently used last (its connection is the likeliest to be
/// alive). Bounded: a transfer returned while `capacity` are idle is dropped, closing its connection.
/// Guarded by a pthread mutex (NSLock), not Synchronization.Mutex: on Linux the latter spins before it
/// sleeps, and with hundreds of connection threads on two cores the spinning holder-less waiters cost more
/// CPU than the requests (a sixth of the gateway's time in profiles).
final class TransferPool: @unchecked Sendable {
    private let lock = NSLock()
    private var idle: [CurlTransfer] = []
    private let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
    }

    var idleCount: Int { lock.withLock { idle.count } }

    func checkOut() throws(UpstreamError) -> CurlTransfer {
        if let transfer = lock.withLock({ idle.popLast() }) { return transfer }
        return try CurlTransfer()
    }

    /// Only for transfers that finished cleanly; their connection is reusable.
    func checkIn(_ transfer: CurlTransfer) {
        transfer.detach()
        lock.withLock {
            if idle.count < capacity { idle.append(transfer) }
        }
    }
}
