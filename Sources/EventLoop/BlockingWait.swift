import Dispatch

/// Runs `body` as a task and blocks the calling thread until it finishes, at most `timeoutMs`: how code
/// that may block (operator commands, the receipt refresher) uses the async clients. Nil after the timeout
/// (the task still finishes on its own). Never from an event loop's thread: its tasks could not run.
public func waitFor<T>(timeoutMs: Int, _ body: @escaping @Sendable () async -> T) -> T? {
    let done = DispatchSemaphore(value: 0)
    let result = Locked<Unchecked<T>?>(nil)
    Task {
        let value = await body()
        result.withLock { $0 = Unchecked(value) }
        done.signal()
    }
    guard done.wait(timeout: .now() + .milliseconds(timeoutMs)) == .success else { return nil }
    return result.withLock { $0 }?.value
}
