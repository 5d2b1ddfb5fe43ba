import Foundation

/// A value guarded by a pthread mutex (NSLock). On Linux, Synchronization.Mutex spins before it sleeps;
/// with hundreds of connection threads on two cores, waiters spinning on a lock whose holder was
/// preempted cost more CPU than the requests themselves (profiled). glibc's mutex sleeps at once.
public final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) {
        self.value = value
    }

    public func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
