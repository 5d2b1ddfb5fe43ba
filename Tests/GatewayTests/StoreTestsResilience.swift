import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Dispatch
import Foundation
import Gateway
import TestSupport
import XCTest

/// What happens when Redis misbehaves: forgotten scripts, no server, a frozen server, a restart, and
/// connections the server closed. Every failure must be `store_unavailable`, bounded in time.
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
        let store = try AttestStore(redis: Redis(options: server.options(timeoutMs: 300)))
        XCTAssertFalse(store.ping())
        assertUnavailable(within: 2) { try store.spendChallenge(ChallengeUse(id: "x", ttlMs: 60_000)) }
        assertUnavailable(within: 2) { try store.loadKey(keyId: [1, 2, 3]) }
    }

    func testFrozenServerTimesOutAndTheBrokenConnectionIsDropped() throws {
        let server = try RedisTestServer()
        let store = try AttestStore(redis: Redis(options: server.options(timeoutMs: 300)))
        XCTAssertTrue(store.ping())

        server.pause()
        assertUnavailable(within: 2) { try store.spendChallenge(ChallengeUse(id: "x", ttlMs: 60_000)) }
        assertUnavailable(within: 2) { try store.spendChallenge(ChallengeUse(id: "x", ttlMs: 60_000)) }

        server.resume()
        usleep(250_000)  // the reconnect pause after a timeout
        XCTAssertTrue(store.ping())
    }

    func testRestartedServerIsReconnected() throws {
        let server = try RedisTestServer()
        let store = try AttestStore(redis: Redis(options: server.options(timeoutMs: 500)))
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
        usleep(250_000)  // the client's reconnect pause after a refused connection
        XCTAssertEqual(try store.register(record), .created)
        XCTAssertEqual(try store.commitAssertion(keyId: record.keyId, environment: .production, challenge: nil,
                                                 counter: 1, window: 0), .accepted(previousCounter: 0))
    }

    func testIdleConnectionsClosedByTheServerAreReplaced() throws {
        let fixture = try StoreFixture()
        XCTAssertTrue(fixture.store.ping())
        let killed = try fixture.connection().command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        guard case .integer(let count) = killed, count >= 1 else { return XCTFail("CLIENT KILL answered \(killed)") }
        XCTAssertTrue(fixture.store.ping())
    }

    func testSixteenThreadsShareTheClient() throws {
        let fixture = try StoreFixture(timeoutMs: 2000)
        let store = fixture.store
        let spent = onThreads(16) { _ in
            (0..<20).map { _ in (try? store.spendChallenge(ChallengeUse(id: UUID().uuidString, ttlMs: 60_000))) == true }
        }.flatMap { $0 }.filter { $0 }
        XCTAssertEqual(spent.count, 16 * 20)
    }
}
