import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation
import Gateway
import XCTest

/// The assertion commit script: its checks, its counter rules, and its atomicity under concurrency.
final class StoreTestsCommit: RegisteredKeyTestCase {
    func commit(_ counter: UInt32, window: Int = 0, challenge: ChallengeUse? = nil, now: Date = Date()) throws -> CommitOutcome {
        try store.commitAssertion(keyId: record.keyId, environment: record.environment, challenge: challenge,
                                  counter: counter, window: window, now: now)
    }

    /// A challenge that passed its MAC check, as `ChallengeCodec` hands it to the store.
    func newChallenge() -> ChallengeUse {
        ChallengeUse(id: Base64.encodeURLSafe(StoreFixture.randomBytes(16)), ttlMs: 60_000)
    }

    func testUnknownKeyIsRejected() throws {
        let unknown = StoreFixture.randomBytes(32)
        XCTAssertEqual(try store.commitAssertion(keyId: unknown, environment: .production, challenge: newChallenge(),
                                                 counter: 1, window: 0), .rejected(.keyUnknown))
        XCTAssertEqual(try store.commitAssertion(keyId: record.keyId, environment: .development, challenge: nil,
                                                 counter: 1, window: 0), .rejected(.keyUnknown), "other environment")
        XCTAssertEqual(try store.commitAssertion(keyId: [], environment: .production, challenge: nil,
                                                 counter: 1, window: 0), .rejected(.keyUnknown))
    }

    func testRevokedKeyIsRejectedAndUnchanged() throws {
        XCTAssertTrue(try store.revoke(keyId: record.keyId, environment: .production, reason: "test"))
        XCTAssertEqual(try commit(1, challenge: newChallenge()), .rejected(.keyRevoked))
        XCTAssertEqual(try commit(2), .rejected(.keyRevoked))
        XCTAssertEqual(try store.loadKey(keyId: record.keyId)?.counter, 0)
    }

    func testChallengeIsSingleUse() throws {
        let challenge = newChallenge()
        XCTAssertEqual(try commit(1, challenge: challenge), .accepted(previousCounter: 0))
        XCTAssertEqual(try commit(2, challenge: challenge), .rejected(.challengeReused))
        XCTAssertEqual(try commit(2, challenge: newChallenge()), .accepted(previousCounter: 1))
        XCTAssertThrowsError(try commit(4, challenge: ChallengeUse(id: String(repeating: "x", count: 1000), ttlMs: 1)))
    }

    /// Decision: a challenge presented by a live key is spent even when the counter is refused, so a failed attempt
    /// cannot be retried with the same challenge; the record itself is left as it was.
    func testCounterRejectionSpendsChallengeButChangesNothingElse() throws {
        XCTAssertEqual(try commit(5), .accepted(previousCounter: 0))
        let before = try store.loadKey(keyId: record.keyId)
        let challenge = newChallenge()
        XCTAssertEqual(try commit(5, challenge: challenge), .rejected(.counterNotIncreasing))
        XCTAssertEqual(try store.loadKey(keyId: record.keyId), before)
        XCTAssertEqual(try commit(6, challenge: challenge), .rejected(.challengeReused))
    }

    func testCounterMustIncreaseWithoutWindow() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        XCTAssertEqual(try commit(0), .rejected(.counterNotIncreasing), "the attestation used counter 0")
        XCTAssertEqual(try commit(5, now: now), .accepted(previousCounter: 0))
        XCTAssertEqual(try commit(5), .rejected(.counterNotIncreasing))
        XCTAssertEqual(try commit(4), .rejected(.counterNotIncreasing))
        XCTAssertEqual(try commit(UInt32.max, now: now), .accepted(previousCounter: 5))
        XCTAssertEqual(try commit(UInt32.max), .rejected(.counterNotIncreasing))

        let loaded = try XCTUnwrap(try store.loadKey(keyId: record.keyId))
        XCTAssertEqual(loaded.counter, UInt32.max)
        XCTAssertEqual(loaded.lastUsedAt, now)
    }

    func testWindowAcceptsEachLateCounterOnce() throws {
        XCTAssertEqual(try commit(10, window: 4), .accepted(previousCounter: 0))
        XCTAssertEqual(try commit(8, window: 4), .accepted(previousCounter: 10), "late, inside the window")
        XCTAssertEqual(try commit(8, window: 4), .rejected(.counterNotIncreasing), "duplicate")
        XCTAssertEqual(try commit(7, window: 4), .accepted(previousCounter: 10))
        XCTAssertEqual(try commit(6, window: 4), .accepted(previousCounter: 10), "the oldest counter inside the window")
        XCTAssertEqual(try commit(5, window: 4), .rejected(.counterNotIncreasing), "too old")
        XCTAssertEqual(try commit(10, window: 4), .rejected(.counterNotIncreasing), "the highest itself")
        XCTAssertEqual(try commit(12, window: 4), .accepted(previousCounter: 10))
        XCTAssertEqual(try commit(10, window: 4), .rejected(.counterNotIncreasing), "the old highest is used")
        XCTAssertEqual(try commit(11, window: 4), .accepted(previousCounter: 12))
        XCTAssertEqual(try commit(9, window: 4), .accepted(previousCounter: 12))
        XCTAssertEqual(try commit(7, window: 4), .rejected(.counterNotIncreasing), "left the window")
        XCTAssertEqual(try commit(11, window: 0), .rejected(.counterNotIncreasing), "window 0 is strict")
        XCTAssertEqual(try store.loadKey(keyId: record.keyId)?.counter, 12)
    }

    /// Counters accepted under window 0 are not tracked one by one, so a route with a window (or a config
    /// reloaded with a larger one) must not take them for unused late counters.
    func testWindowNeverReopensCountersAcceptedWithoutOne() throws {
        XCTAssertEqual(try commit(2, window: 0), .accepted(previousCounter: 0))
        XCTAssertEqual(try commit(3, window: 0), .accepted(previousCounter: 2))
        XCTAssertEqual(try commit(2, window: 8), .rejected(.counterNotIncreasing), "2 was used under window 0")
        XCTAssertEqual(try commit(1, window: 8), .rejected(.counterNotIncreasing), "below the window-0 floor")
        XCTAssertEqual(try commit(6, window: 8), .accepted(previousCounter: 3))
        XCTAssertEqual(try commit(5, window: 8), .accepted(previousCounter: 6), "late counter above the floor")
        XCTAssertEqual(try commit(3, window: 8), .rejected(.counterNotIncreasing), "the floor itself")
    }

    func testWindowStaysSmall() throws {
        for counter in stride(from: UInt32(1), through: 200, by: 1) {
            XCTAssertEqual(try commit(counter, window: 8), .accepted(previousCounter: counter - 1))
        }
        let name = "\(fixture.prefix):{\(Base64.encodeURLSafe(record.keyId))}:production:win"
        guard case .integer(let size) = try fixture.connection().command("ZCARD", name) else { return XCTFail() }
        XCTAssertLessThanOrEqual(size, 8)
    }

    func testConcurrentCommitsOfOneCounterAcceptExactlyOne() throws {
        let store = self.store
        let keyId = record.keyId
        let outcomes = onThreads(16) { _ in
            Result { try store.commitAssertion(keyId: keyId, environment: .production, challenge: nil, counter: 1, window: 0) }
        }
        let accepted = outcomes.filter { (try? $0.get()) == .accepted(previousCounter: 0) }
        let refused = outcomes.filter { (try? $0.get()) == .rejected(.counterNotIncreasing) }
        XCTAssertEqual(accepted.count, 1)
        XCTAssertEqual(refused.count, 15)
    }

    func testConcurrentCommitsInsideTheWindowAcceptExactlyOne() throws {
        XCTAssertEqual(try commit(20, window: 8), .accepted(previousCounter: 0))
        let store = self.store
        let keyId = record.keyId
        let outcomes = onThreads(16) { _ in
            try? store.commitAssertion(keyId: keyId, environment: .production, challenge: nil, counter: 17, window: 8)
        }
        XCTAssertEqual(outcomes.filter { $0 == .accepted(previousCounter: 20) }.count, 1)
        XCTAssertEqual(outcomes.filter { $0 == .rejected(.counterNotIncreasing) }.count, 15)
    }

    func testConcurrentUsesOfOneChallengeAcceptExactlyOne() throws {
        let challenge = newChallenge()
        let store = self.store
        let keyId = record.keyId
        let outcomes = onThreads(16) { index in
            try? store.commitAssertion(keyId: keyId, environment: .production, challenge: challenge,
                                       counter: UInt32(index + 1), window: 0)
        }
        XCTAssertEqual(outcomes.filter { if case .accepted = $0 { return true } else { return false } }.count, 1)
        XCTAssertEqual(outcomes.filter { $0 == .rejected(.challengeReused) }.count, 15)
    }

    func testRateLimitCountsAcceptedAssertionsPerKeyAndRouteInAFixedWindow() throws {
        // A minute's window: the three commits fall in it however slow the machine is.
        func limited(_ counter: UInt32, route: String = "/ai/", _ limit: RateLimit = RateLimit(requests: 2, perSeconds: 60)) throws -> CommitOutcome {
            try store.commitAssertion(keyId: record.keyId, environment: record.environment, challenge: nil, counter: counter,
                                      window: 0, rateLimit: limit, route: route)
        }
        XCTAssertEqual(try limited(1), .accepted(previousCounter: 0))
        XCTAssertEqual(try limited(2), .accepted(previousCounter: 1))
        guard case .rateLimited(let retryAfterMs) = try limited(3) else { return XCTFail("the third in the window passed") }
        XCTAssertTrue((1...60_000).contains(retryAfterMs), "\(retryAfterMs)")
        XCTAssertEqual(try limited(3, route: "/other/"), .accepted(previousCounter: 2), "another route counts apart")
        XCTAssertEqual(try limited(2), .rejected(.counterNotIncreasing), "replays are refused before the limit counts")

        // A one-second window ends: counter 5 is refused while it lasts (recording nothing, or 5 would then be
        // a replay) and accepted in the next window, within a few seconds whatever the load.
        let short = RateLimit(requests: 1, perSeconds: 1)
        XCTAssertEqual(try limited(4, route: "/short/", short), .accepted(previousCounter: 3))
        let deadline = Date().addingTimeInterval(10)
        var outcome = try limited(5, route: "/short/", short)
        while case .rateLimited(let waitMs) = outcome, Date() < deadline {
            XCTAssertTrue((1...1000).contains(waitMs), "\(waitMs)")
            Thread.sleep(forTimeInterval: Double(waitMs) / 1000 + 0.05)
            outcome = try limited(5, route: "/short/", short)
        }
        XCTAssertEqual(outcome, .accepted(previousCounter: 4), "a new window; the refused commits recorded nothing")
    }

    func testRateLimitedCommitStillSpendsItsChallenge() throws {
        let limit = RateLimit(requests: 1, perSeconds: 60)
        func limited(_ counter: UInt32, _ challenge: ChallengeUse) throws -> CommitOutcome {
            try store.commitAssertion(keyId: record.keyId, environment: record.environment, challenge: challenge, counter: counter,
                                      window: 0, rateLimit: limit, route: "/ai/")
        }
        XCTAssertEqual(try limited(1, newChallenge()), .accepted(previousCounter: 0))
        let challenge = newChallenge()
        guard case .rateLimited = try limited(2, challenge) else { return XCTFail("over the limit") }
        XCTAssertEqual(try commit(2, challenge: challenge), .rejected(.challengeReused))
        XCTAssertEqual(try commit(2, challenge: newChallenge()), .accepted(previousCounter: 1), "unlimited elsewhere")
    }
}
