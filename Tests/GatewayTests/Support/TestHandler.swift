import Foundation
import Gateway
import Synchronization

/// A handler recording every request that reaches it and answering with `respond`.
final class TestHandler: HTTPHandler {
    private let received = Mutex<[HTTPRequest]>([])
    private let respond: @Sendable (HTTPRequest) -> HTTPResponse
    private let bodyLimits: [String: Int]

    init(bodyLimits: [String: Int] = [:],
         respond: @escaping @Sendable (HTTPRequest) -> HTTPResponse = { _ in HTTPResponse(status: 200, body: .bytes(Array("ok".utf8))) }) {
        self.respond = respond
        self.bodyLimits = bodyLimits
    }

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        received.withLock { $0.append(request) }
        return respond(request)
    }

    func maxBodyBytes(method: String, path: String) -> Int? { bodyLimits[path] }

    var requests: [HTTPRequest] { received.withLock { $0 } }
}

/// A body stream built from a closure, counting `close()` calls.
final class ClosureStream: HTTPBodyStream, Sendable {
    private let next: @Sendable () throws -> [UInt8]?
    private let closes = Mutex(0)
    let closed = DispatchSemaphore(value: 0)

    init(_ next: @escaping @Sendable () throws -> [UInt8]?) { self.next = next }

    func nextChunk() throws -> [UInt8]? { try next() }

    func close() {
        closes.withLock { $0 += 1 }
        closed.signal()
    }

    var closeCount: Int { closes.withLock { $0 } }
}

/// A thread-safe counter for test handlers and streams.
final class Counter: Sendable {
    private let count = Mutex(0)

    /// Increments and returns the new value.
    func next() -> Int { count.withLock { $0 += 1; return $0 } }

    var value: Int { count.withLock { $0 } }
}

/// Polls `condition` until it holds or `seconds` pass.
func waitUntil(seconds: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        if Date() > deadline { return false }
        usleep(2000)
    }
    return true
}
