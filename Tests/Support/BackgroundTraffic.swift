import Foundation
import Synchronization

/// A test's steady traffic on a thread of its own: `round` again and again, `pause` apart, until stopped
/// (a failover test keeps writing through the switch). `stop` waits, bounded, for the round under way.
public final class BackgroundTraffic: Sendable {
    private let stopped = Atomic(false)
    private let done = DispatchSemaphore(value: 0)
    private let ended = Atomic(false)

    public init(pause: TimeInterval, _ round: @escaping @Sendable (Int) -> Void) {
        Thread { [self] in
            defer { done.signal() }
            var index = 0
            while !stopped.load(ordering: .relaxed) {
                round(index)
                index += 1
                Thread.sleep(forTimeInterval: pause)
            }
        }.start()
    }

    /// True when the thread has ended (waiting up to `within` seconds for it). Later calls answer at once
    /// once it has, so a `defer` may call it again.
    @discardableResult
    public func stop(within: TimeInterval = 15) -> Bool {
        stopped.store(true, ordering: .relaxed)
        if ended.load(ordering: .acquiring) { return true }
        guard done.wait(timeout: .now() + within) == .success else { return false }
        ended.store(true, ordering: .releasing)
        return true
    }
}
