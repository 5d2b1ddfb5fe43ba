import Foundation

/// Values gathered from concurrent work (threads, `concurrentPerform`), in arrival order. A pthread mutex
/// (NSLock): `Synchronization.Mutex` spins before it sleeps on Linux.
public final class Gathered<Element>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [Element] = []

    public init() {}

    public func append(_ value: Element) { lock.withLock { stored.append(value) } }

    public func append(contentsOf values: [Element]) { lock.withLock { stored += values } }

    public var values: [Element] { lock.withLock { stored } }
}
