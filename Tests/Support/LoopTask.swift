import Dispatch
import EventLoop

extension EventLoop {
    /// Runs `body` as a task on this loop and waits for it: a test's way onto the loop. A task that does not
    /// finish within `timeout` seconds is a hang of the code under test, so it throws (the test fails), never skips.
    public func waitForTask<T>(timeout: Double = 20, _ body: @escaping () async -> T) throws -> T {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: T?
        nonisolated(unsafe) let body = body
        Task(executorPreference: self) {
            result = await body()
            done.signal()
        }
        guard done.wait(timeout: .now() + timeout) == .success, let result else {
            throw TestSupportError("the loop task did not finish within \(Int(timeout)) s")
        }
        return result
    }
}
