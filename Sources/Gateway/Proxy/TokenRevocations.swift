import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Dispatch
import Foundation
import Synchronization

/// The key ids whose tokens this process refuses, kept current without a Redis round trip per request.
/// A thread of its own subscribes to the revocation channel (`gateway keys revoke` publishes there), then
/// loads the revocation set; it reloads after every reconnect, since pub/sub forgets what was published
/// while nobody listened. Every ping answered proves that all revocations published before the ping have
/// arrived, so the set counts as current until `maxLagSeconds` after the last answered ping: past that
/// (Redis unreachable, subscription stuck) token requests fail closed with `store_unavailable`.
final class TokenRevocations: Sendable {
    let store: AttestStore
    let maxLagSeconds: Int
    private let state: State

    /// What the subscriber thread shares with request threads; the thread holds only this, so the owner's
    /// deinit can stop it.
    private final class State: Sendable {
        let revoked = Locked<Set<[UInt8]>>([])
        /// Monotonic nanoseconds until which the set is current (0: never synced).
        let currentUntil = Atomic<UInt64>(0)
        let stopped = Atomic<Bool>(false)
    }

    init(store: AttestStore, maxLagSeconds: Int, log: EventLog) {
        self.store = store
        self.maxLagSeconds = maxLagSeconds
        let state = State()
        self.state = state
        let subscriber = Subscriber(state: state, store: store, maxLagNanoseconds: UInt64(maxLagSeconds) * 1_000_000_000, log: log)
        let thread = Thread { subscriber.run() }
        thread.name = "token-revocations"
        thread.start()
    }

    deinit { state.stopped.store(true, ordering: .relaxed) }

    /// Throws `store_unavailable` when the set may be missing revocations older than the allowed lag.
    func isRevoked(_ keyId: [UInt8]) throws(GatewayError) -> Bool {
        guard DispatchTime.now().uptimeNanoseconds < state.currentUntil.load(ordering: .acquiring) else {
            throw .storeUnavailable("the token revocation list is not current (no answer from Redis for \(maxLagSeconds) s)")
        }
        return state.revoked.withLock { $0.contains(keyId) }
    }

    var isCurrent: Bool { DispatchTime.now().uptimeNanoseconds < state.currentUntil.load(ordering: .acquiring) }

    func waitUntilCurrent(timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !isCurrent, Date() < deadline { usleep(10_000) }
        return isCurrent
    }

    /// The subscriber thread's loop: (re)subscribe, load the set, then apply messages and ping.
    private struct Subscriber: Sendable {
        let state: State
        let store: AttestStore
        let maxLagNanoseconds: UInt64
        let log: EventLog

        /// Pings often enough that several fit in the allowed lag.
        private var pingInterval: UInt64 { min(1_000_000_000, maxLagNanoseconds / 3) }

        func run() {
            var lost = false
            var backoffMs = 100
            while !state.stopped.load(ordering: .relaxed) {
                do {
                    try follow(onSynced: { count in
                        log.event(.info, "token_revocations_current", ["revoked_keys": count, "resubscribed": lost])
                        lost = false
                        backoffMs = 100
                    })
                } catch {
                    if !lost {
                        log.event(.warn, "token_revocations_lost", [
                            "reason": error.reasonCode, "message": error.message,
                            "max_lag_seconds": maxLagNanoseconds / 1_000_000_000,
                        ])
                        lost = true
                    }
                }
                usleep(UInt32(backoffMs * 1000))
                backoffMs = min(backoffMs * 2, 2000)
            }
        }

        private func follow(onSynced: (Int) -> Void) throws(StoreError) {
            // Subscribed first, loaded second: a revocation published in between is in one or the other.
            let subscription = try store.subscribeToRevocations()
            let syncStart = DispatchTime.now().uptimeNanoseconds
            let loaded = try store.loadRevokedKeys(since: Date().addingTimeInterval(-Double(AttestStore.revocationHistorySeconds)))
            state.revoked.withLock { $0 = Set(loaded) }
            state.currentUntil.store(syncStart + maxLagNanoseconds, ordering: .releasing)
            onSynced(loaded.count)
            var pingSentAt: UInt64?
            var lastPing = syncStart
            while !state.stopped.load(ordering: .relaxed) {
                let now = DispatchTime.now().uptimeNanoseconds
                if let sent = pingSentAt, now - sent > maxLagNanoseconds {
                    throw .unavailable("Redis did not answer the subscription's PING within the revocation lag")
                }
                if pingSentAt == nil, now - lastPing >= pingInterval {
                    do throws(RedisClientError) { try subscription.ping() } catch { throw .unavailable(error.message) }
                    pingSentAt = now
                    lastPing = now
                }
                let push: RedisSubscription.Push?
                do throws(RedisClientError) { push = try subscription.next(waitingMs: 100) } catch { throw .unavailable(error.message) }
                switch push {
                case .message(let member):
                    if let keyId = Base64.decode(utf8: member) { state.revoked.withLock { _ = $0.insert(keyId) } }
                case .pong:
                    if let sent = pingSentAt { state.currentUntil.store(sent + maxLagNanoseconds, ordering: .releasing) }
                    pingSentAt = nil
                case .other, nil:
                    break
                }
            }
        }
    }
}
