/// A value guarded by a pthread mutex. On Linux, Synchronization.Mutex spins before it sleeps; with
/// hundreds of connection threads on two cores, waiters spinning on a lock whose holder was preempted cost
/// more CPU than the requests themselves (profiled). glibc's mutex sleeps at once.
public final class Locked<Value>: @unchecked Sendable {
    private let lock = PthreadLock()
    /// The value in memory of its own, handed to `body` in place: the lock already makes each access
    /// exclusive, and a stored property passed `inout` to a closure paid a dynamic exclusivity check per call
    /// (the metrics shards, the log's buffer and the runtime read take this lock several times a request).
    private let storage: UnsafeMutablePointer<Value>

    public init(_ value: Value) {
        storage = .allocate(capacity: 1)
        storage.initialize(to: value)
    }

    deinit {
        storage.deinitialize(count: 1)
        storage.deallocate()
    }

    public func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&storage.pointee)
    }
}
