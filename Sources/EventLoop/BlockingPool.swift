import Foundation

/// A fixed set of threads for work that still blocks (Redis commands, Apple's APIs, file reads), so an
/// event loop never does. Bounded: when every thread is busy, work waits in a queue instead of spawning.
public final class BlockingPool: @unchecked Sendable {
    private let condition = NSCondition()
    private var queue: [() -> Void] = []
    private var head = 0
    private var closed = false
    public let size: Int

    public init(threads: Int, name: String) {
        size = max(1, threads)
        for index in 0..<size {
            let thread = Thread { [self] in work() }
            thread.name = "\(name)-\(index)"
            thread.stackSize = 512 * 1024
            thread.start()
        }
    }

    /// Runs `body` on a pool thread and resumes the caller (on its own executor) with the result. The
    /// caller is suspended meanwhile, so the state `body` captures is touched by one thread at a time —
    /// that hand-over is what makes passing non-Sendable values here sound.
    public func run<T>(_ body: @escaping () -> T) async -> T {
        let job = Unchecked(body)
        return await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<T>, Never>) in
            submit { continuation.resume(returning: Unchecked(job.value())) }
        }.value
    }

    private func submit(_ work: @escaping () -> Void) {
        condition.lock()
        queue.append(work)
        condition.signal()
        condition.unlock()
    }

    private func work() {
        while true {
            condition.lock()
            while head == queue.count && !closed { condition.wait() }
            if head == queue.count {
                condition.unlock()
                return
            }
            let next = queue[head]
            head += 1
            if head > 1024 && head * 2 > queue.count {
                queue.removeFirst(head)
                head = 0
            }
            condition.unlock()
            next()
        }
    }

    /// Lets the threads end once the queue is empty.
    public func shutdown() {
        condition.withLock {
            closed = true
            condition.broadcast()
        }
    }
}

/// Carries a value across a thread hop whose discipline (one owner at a time) the compiler cannot see.
public struct Unchecked<Value>: @unchecked Sendable {
    public let value: Value
    public init(_ value: Value) { self.value = value }
}
