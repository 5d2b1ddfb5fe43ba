import EventLoop
import Foundation
import Gateway
import HTTPServer
import Synchronization
import TestSupport
import XCTest

/// A handler recording every request that reaches it and answering with `respond` (on the loop: it must
/// not block — tests wait with `Gate.wait()`, which suspends).
final class TestHandler: WholeRequestHandler {
    private let received = Mutex<[HTTPRequest]>([])
    private let rejections = Mutex<[String]>([])
    private let respond: @Sendable (HTTPRequest) async -> HTTPResponse
    private let bodyLimits: [String: Int]
    private let defaultLimit: Int

    init(bodyLimits: [String: Int] = [:], defaultLimit: Int = 1_048_576,
         respond: @escaping @Sendable (HTTPRequest) async -> HTTPResponse = { _ in HTTPResponse(status: 200, body: .bytes(Array("ok".utf8))) }) {
        self.respond = respond
        self.bodyLimits = bodyLimits
        self.defaultLimit = defaultLimit
    }

    func maxBodyBytes(for head: RequestHead) -> Int { min(bodyLimits[head.path] ?? defaultLimit, defaultLimit) }

    func respond(to request: HTTPRequest) async -> HTTPResponse {
        received.withLock { $0.append(request) }
        return await respond(request)
    }

    func rejected(method: String, target: String, clientAddress: String, status: Int, reason: String) {
        rejections.withLock { $0.append(reason) }
    }

    /// Peers `exemptFromPerIPLimit` names (a server's trusted proxies).
    private let exempt = Mutex<Set<String>>([])
    var exemptPeers: Set<String> {
        get { exempt.withLock { $0 } }
        set { exempt.withLock { $0 = newValue } }
    }

    func exemptFromPerIPLimit(_ peerAddress: String) -> Bool { exemptPeers.contains(peerAddress) }

    var requests: [HTTPRequest] { received.withLock { $0 } }
    var rejected: [String] { rejections.withLock { $0 } }
}

/// A body stream built from an async closure, counting `close()` calls.
final class ClosureStream: HTTPBodyStream, Sendable {
    private let next: @Sendable () async throws -> [UInt8]?
    private let closes = Mutex(0)
    let closed = DispatchSemaphore(value: 0)

    init(_ next: @escaping @Sendable () async throws -> [UInt8]?) { self.next = next }

    func nextChunk() async throws -> [UInt8]? { try await next() }

    func close() {
        closes.withLock { $0 += 1 }
        closed.signal()
    }

    var closeCount: Int { closes.withLock { $0 } }
}

/// A flag a test opens; handlers wait for it without blocking their loop.
final class Gate: Sendable {
    private let open = Atomic<Bool>(false)

    func release() { open.store(true, ordering: .relaxed) }

    /// True once released, false after `seconds`.
    func wait(seconds: Double = 5) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !open.load(ordering: .relaxed) {
            if Date() > deadline { return false }
            try? await Task.sleep(nanoseconds: 2_000_000)
        }
        return true
    }
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

extension XCTestCase {
    /// A server on loopback with `limits.workers` loops of its own, all stopped when the test ends.
    func startServer(_ handler: TestHandler, limits: ServerLimits) throws -> HTTPServer {
        let loops = try (0..<limits.workers).map { try EventLoop(name: "test-\($0)") }
        loops.forEach { $0.start() }
        let server = try HTTPServer(address: "127.0.0.1:0", limits: limits, handler: handler, loops: loops)
        addTeardownBlock {
            server.closeAll()
            loops.forEach { $0.stop() }
        }
        return server
    }

    /// The `error` member of the gateway's JSON error body.
    func errorReason(_ response: RawHTTPClient.Response) -> String? {
        let json = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: String]
        return json?["error"]
    }
}
