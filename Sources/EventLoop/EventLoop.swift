import Foundation

/// One event-loop thread: it owns its sockets, timers and curl/Redis work, and it is a Swift
/// `TaskExecutor`, so a request's task started with this loop as its preference runs every step on this
/// thread — no locks on connection state, no thread hop between an `await` and the callback behind it.
public final class EventLoop: TaskExecutor, @unchecked Sendable {
    let core: LoopCore
    public let name: String
    private let lock = PthreadLock()
    /// Work handed in from any thread (guarded by `lock`), run on the loop's next wake-up.
    private var pending: [Work] = []
    /// The batch being run (loop thread only): swapped with `pending`, so neither array is reallocated per
    /// batch (a copy of `pending` emptied in place allocated a new buffer every time a job was resumed).
    private var running: [Work] = []
    private var thread: Thread?
    private let started = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private var stopping = false
    /// The thread has ended: work handed in now is dropped (guarded by `lock`).
    private var ended = false

    private enum Work {
        case job(UnownedJob)
        case closure(() -> Void)
    }

    public init(name: String) throws(LoopError) {
        self.name = name
        var wake: (() -> Void)?
        core = try LoopCore(onWake: { wake?() })
        wake = { [unowned self] in runPending() }
    }

    /// Starts the loop's thread; returns once it runs.
    public func start() {
        let thread = Thread { [self] in
            pthread_setspecific(EventLoop.currentKey, Unmanaged.passUnretained(self).toOpaque())
            started.signal()
            core.run()
            lock.withLock { ended = true }
            core.free()
            finished.signal()
        }
        thread.name = name
        thread.stackSize = 1 << 20
        self.thread = thread
        thread.start()
        started.wait()
    }

    /// The thread's loop is its key's value (set when it starts): no thread id stored by the loop's thread and
    /// read, with a dynamic exclusivity check, by every submit (measured: ~110 instructions a request less).
    public var inLoop: Bool { pthread_getspecific(EventLoop.currentKey) == Unmanaged.passUnretained(self).toOpaque() }

    /// The loop whose thread is running this code, if any.
    public static var current: EventLoop? {
        pthread_getspecific(currentKey).map { Unmanaged<EventLoop>.fromOpaque($0).takeUnretainedValue() }
    }

    private static let currentKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// Runs `work` on the loop's thread (later, even when called from it); `work` may hold state that is only
    /// ever touched on this loop. After the loop has ended, `work` is dropped (its handles are closed already).
    public func executeOnLoop(_ work: @escaping () -> Void) {
        nonisolated(unsafe) let work = work
        submit(.closure(work))
    }

    /// Runs `body` on the loop and waits for its result: set-up and shutdown only (a handle must be created
    /// on its loop's thread), never from another loop's work.
    public func sync<T>(_ body: @escaping () -> T) -> T {
        if inLoop { return body() }
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: T?
        executeOnLoop {
            result = body()
            done.signal()
        }
        done.wait()
        return result!
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        submit(.job(UnownedJob(job)))
    }

    private func submit(_ work: Work) {
        lock.lock()
        if ended { return lock.unlock() }
        // Appended on a copy taken out and put back: an access held across the array's own code would make
        // every access to `pending` an exclusivity-checked one.
        var queue = pending
        pending = []
        queue.append(work)
        let first = queue.count == 1
        pending = queue
        lock.unlock()
        guard first else { return }
        // A job resumed by the loop's own callbacks (a Redis reply, curl's headers) needs no eventfd write.
        if inLoop { core.wakeFromLoop() } else { core.wake() }
    }

    private func runPending() {
        while true {
            // The batch is a local taken out of `running` and put back: held in the property while the jobs run,
            // every access to it would be an exclusivity-checked one.
            var batch = running
            running = []
            lock.lock()
            swap(&pending, &batch)
            lock.unlock()
            if batch.isEmpty {
                running = batch
                break
            }
            for work in batch {
                switch work {
                case .job(let job): job.runSynchronously(on: asUnownedTaskExecutor())
                case .closure(let closure): closure()
                }
            }
            batch.removeAll(keepingCapacity: true)
            running = batch
        }
        if stopping { core.stop() }
    }

    /// From the loop's thread only: runs `action` at the end of this iteration, before the loop next polls
    /// for I/O, so what an iteration's requests queue (Redis commands) can leave in one write.
    public func beforePoll(_ action: @escaping () -> Void) {
        precondition(inLoop, "beforePoll is for the loop's own thread")
        core.beforePoll(action)
    }

    /// Names this loop has resolved and keeps (tests; from the loop's thread).
    var resolvedNameCount: Int { core.resolvedNameCount }

    /// Now, in the loop's clock (milliseconds, updated once per loop iteration).
    public var nowMs: UInt64 { core.nowMs }

    /// Closes every handle of the loop (connections included) and waits for its thread to end; from the loop's
    /// own thread (a last reference dropped there), it ends after the current work instead.
    public func stop() {
        if inLoop { return stopping = true }
        executeOnLoop { [self] in stopping = true }
        finished.wait()
    }
}

/// A pthread mutex: `Synchronization.Mutex` spins before sleeping on Linux, which costs more than the work
/// under contention between loop threads.
public final class PthreadLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t> = .allocate(capacity: 1)

    public init() { pthread_mutex_init(mutex, nil) }
    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }

    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}
