import Dispatch
import EventLoop
@testable import RedisClient
import TestSupport
import XCTest

/// The reply queue of one pipelined connection under a load that never lets it empty.
final class RedisConnectionQueueTests: XCTestCase {
    /// Each command is sent from the previous one's reply, so the queue always holds one more than was
    /// answered when a read ends: answered entries must still be dropped (they were kept until the queue
    /// emptied, which under steady load is never).
    func testAConnectionAlwaysBusyKeepsItsReplyQueueBounded() throws {
        let server = try RedisTestServer()
        defer { server.stop() }
        let loop = try EventLoop(name: "redis-queue-test")
        loop.start()
        defer { loop.stop() }
        let total = 5 * LoopRedisConnection.answeredKept
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var answered = 0
        nonisolated(unsafe) var longest = 0
        loop.executeOnLoop {
            let opened = LoopRedisConnection(loop: loop, address: RedisAddress(host: "127.0.0.1", port: server.port),
                                             options: RedisOptions(topology: .single(RedisAddress(host: "127.0.0.1", port: server.port)),
                                                                   timeoutMs: 2000))
            func next() {
                opened.send([Array("INCR".utf8), Array("queue-test".utf8)]) { result in
                    guard case .success(.integer) = result else {
                        done.signal()
                        return
                    }
                    answered += 1
                    if answered == total {
                        done.signal()
                        return
                    }
                    next()
                    longest = max(longest, opened.queueLength)
                }
            }
            next()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success, "the chained commands finished")
        XCTAssertEqual(answered, total, "every command got an integer reply")
        XCTAssertLessThanOrEqual(longest, LoopRedisConnection.answeredKept + 1, "answered entries are dropped though the queue never empties")
    }
}
