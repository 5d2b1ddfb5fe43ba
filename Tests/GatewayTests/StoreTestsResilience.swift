import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Dispatch
import Foundation
import Gateway
import TestSupport
import XCTest

/// What happens when Redis misbehaves: forgotten scripts, no server, a frozen server, a restart, and a
/// pool with no free connection. Every failure must be `store_unavailable`, bounded in time.
final class StoreTestsResilience: XCTestCase {
    func assertUnavailable<T>(within seconds: TimeInterval, _ body: () throws -> T,
                              file: StaticString = #filePath, line: UInt = #line) {
        let started = Date()
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_unavailable", "\(error)", file: file, line: line)
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), seconds, "took too long", file: file, line: line)
    }

    func testForgottenScriptsAreReloaded() throws {
        let fixture = try StoreFixture()
        let record = StoreFixture.record()
        XCTAssertEqual(try fixture.store.register(record), .created)
        XCTAssertEqual(try fixture.store.commitAssertion(keyId: record.keyId, environment: .production, challenge: nil,
                                                         counter: 1, window: 0), .accepted(previousCounter: 0))
        XCTAssertEqual(try fixture.connection().command("SCRIPT", "FLUSH"), .status("OK"))
        XCTAssertEqual(try fixture.store.commitAssertion(keyId: record.keyId, environment: .production, challenge: nil,
                                                         counter: 2, window: 0), .accepted(previousCounter: 1))
        XCTAssertEqual(try fixture.store.loadKey(keyId: record.keyId)?.counter, 2)
    }

    func testNoServerIsUnavailableQuickly() throws {
        let server = try RedisTestServer()
        server.stop()
        let pool = try RedisPool(endpoint: server.endpoint, size: 2, timeoutMs: 300)
        let store = try AttestStore(pool: pool)
        XCTAssertFalse(store.ping())
        assertUnavailable(within: 2) { try store.spendChallenge(ChallengeUse(id: "x", boundToKey: false, ttlMs: 60_000)) }
        assertUnavailable(within: 2) { try store.loadKey(keyId: [1, 2, 3]) }
    }

    func testFrozenServerTimesOutAndTheBrokenConnectionIsDropped() throws {
        let server = try RedisTestServer()
        let pool = try RedisPool(endpoint: server.endpoint, size: 2, timeoutMs: 300)
        let store = try AttestStore(pool: pool)
        XCTAssertTrue(store.ping())
        XCTAssertEqual(pool.idleCount, 1)

        server.pause()
        assertUnavailable(within: 2) { try store.spendChallenge(ChallengeUse(id: "x", boundToKey: false, ttlMs: 60_000)) }
        XCTAssertEqual(pool.idleCount, 0, "a timed-out connection is never lent again")
        assertUnavailable(within: 2) { try store.spendChallenge(ChallengeUse(id: "x", boundToKey: false, ttlMs: 60_000)) }

        server.resume()
        XCTAssertTrue(store.ping())
    }

    func testRestartedServerIsReconnected() throws {
        let server = try RedisTestServer()
        let pool = try RedisPool(endpoint: server.endpoint, size: 4, timeoutMs: 500)
        let store = try AttestStore(pool: pool)
        let record = StoreFixture.record()
        XCTAssertEqual(try store.register(record), .created)

        // The first call after a restart already works: idle connections the old server closed are
        // noticed before reuse, and the scripts are loaded again into the new, empty server.
        try server.restart()
        XCTAssertNil(try store.loadKey(keyId: record.keyId))
        XCTAssertEqual(try store.register(record), .created)

        server.stop()
        assertUnavailable(within: 2) { try store.loadKey(keyId: record.keyId) }
        try server.restart()
        XCTAssertEqual(try store.register(record), .created)
        XCTAssertEqual(try store.commitAssertion(keyId: record.keyId, environment: .production, challenge: nil,
                                                 counter: 1, window: 0), .accepted(previousCounter: 0))
    }

    func testIdleConnectionsClosedByTheServerAreReplaced() throws {
        let fixture = try StoreFixture()
        XCTAssertTrue(fixture.store.ping())
        XCTAssertEqual(fixture.pool.idleCount, 1)
        let killed = try fixture.connection().command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        guard case .integer(let count) = killed, count >= 1 else { return XCTFail("CLIENT KILL answered \(killed)") }
        XCTAssertTrue(fixture.store.ping())
    }

    func testExhaustedPoolWaitsThenGivesUp() throws {
        let fixture = try StoreFixture(poolSize: 1, timeoutMs: 300)
        let pool = fixture.pool
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        Thread {
            _ = try? pool.with { _ throws(StoreError) in
                holding.signal()
                _ = release.wait(timeout: .now() + 10)
            }
            finished.signal()
        }.start()
        XCTAssertEqual(holding.wait(timeout: .now() + 5), .success)

        let started = Date()
        assertUnavailable(within: 2) { try pool.with { connection throws(StoreError) in try connection.command("PING") } }
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.25, "it waited for the timeout")

        DispatchQueue.global().asyncAfter(deadline: .now() + 0.1) { release.signal() }
        XCTAssertEqual(try pool.with { connection throws(StoreError) in try connection.command("PING") }, .status("PONG"),
                       "a connection returned while waiting is taken")
        XCTAssertEqual(finished.wait(timeout: .now() + 5), .success)
    }

    func testSixteenThreadsShareAPoolOfFour() throws {
        let fixture = try StoreFixture(poolSize: 4, timeoutMs: 2000)
        let store = fixture.store
        let spent = onThreads(16) { _ in
            (0..<20).map { _ in (try? store.spendChallenge(ChallengeUse(id: UUID().uuidString, boundToKey: false, ttlMs: 60_000))) == true }
        }.flatMap { $0 }.filter { $0 }
        XCTAssertEqual(spent.count, 16 * 20)
        XCTAssertLessThanOrEqual(fixture.pool.idleCount, 4)
    }
}
