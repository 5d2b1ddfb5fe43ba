import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation
import Gateway
import XCTest

/// Spent challenges, registration and key records against a real redis-server.
final class StoreTests: XCTestCase {
    var fixture: StoreFixture!
    var store: AttestStore { fixture.store }

    override func setUpWithError() throws { fixture = try StoreFixture() }
    override func tearDown() { fixture = nil }

    func use(_ id: String = Base64.encodeURLSafe(StoreFixture.randomBytes(16)), ttlMs: Int = 60_000) -> ChallengeUse {
        ChallengeUse(id: id, ttlMs: ttlMs)
    }

    func testSpentChallengeIsRefusedASecondTime() throws {
        let challenge = use()
        XCTAssertTrue(try store.spendChallenge(challenge))
        XCTAssertFalse(try store.spendChallenge(challenge))
        XCTAssertTrue(try store.spendChallenge(use()))
    }

    func testSpentChallengeIsForgottenWhenItExpires() throws {
        let challenge = use(ttlMs: 300)
        XCTAssertTrue(try store.spendChallenge(challenge))
        let ttl = try fixture.connection().command("PTTL", "\(fixture.prefix):ch:{\(challenge.id)}")
        guard case .integer(let milliseconds) = ttl else { return XCTFail("PTTL answered \(ttl)") }
        XCTAssertTrue((1...300).contains(milliseconds), "PTTL \(milliseconds)")
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertEqual(try fixture.connection().command("EXISTS", "\(fixture.prefix):ch:{\(challenge.id)}"), .integer(0))
    }

    func testMalformedChallengeUsesAreRefusedWithoutARoundTrip() throws {
        for bad in [use(""), use("a{b}"), use(String(repeating: "A", count: 65)), use("a b"), use(ttlMs: 0), use(ttlMs: 86_400_001)] {
            XCTAssertThrowsError(try store.spendChallenge(bad)) { error in
                XCTAssertEqual((error as? StoreError)?.reasonCode, "store_invalid_argument")
            }
        }
    }

    /// Every assertion challenge is spent in the slot of the key that used it, so a commit stays one script on
    /// one Cluster slot: a challenge issued without a key id serves each key once (another key cannot replay
    /// an assertion it did not sign). Registration spends under the challenge's own tag.
    func testAssertionChallengesAreSpentInTheKeySlot() throws {
        let first = StoreFixture.record()
        let second = StoreFixture.record()
        XCTAssertEqual(try store.register(first), .created)
        XCTAssertEqual(try store.register(second), .created)
        let shared = use()
        XCTAssertEqual(try store.commitAssertion(keyId: first.keyId, environment: .production, challenge: shared,
                                                 counter: 1, window: 0), .accepted(previousCounter: 0))
        XCTAssertEqual(try store.commitAssertion(keyId: first.keyId, environment: .production, challenge: shared,
                                                 counter: 2, window: 0), .rejected(.challengeReused))
        let unboundName = "\(fixture.prefix):{\(Base64.encodeURLSafe(first.keyId))}:ch:\(shared.id)"
        XCTAssertEqual(try fixture.connection().command("EXISTS", unboundName), .integer(1))
        XCTAssertTrue(try store.spendChallenge(shared), "registration's record is separate")
        XCTAssertFalse(try store.spendChallenge(shared))

        let bound = use()
        XCTAssertEqual(try store.commitAssertion(keyId: second.keyId, environment: .production, challenge: bound,
                                                 counter: 1, window: 0), .accepted(previousCounter: 0))
        let name = "\(fixture.prefix):{\(Base64.encodeURLSafe(second.keyId))}:ch:\(bound.id)"
        XCTAssertEqual(try fixture.connection().command("EXISTS", name), .integer(1))
        XCTAssertEqual(try store.commitAssertion(keyId: second.keyId, environment: .production, challenge: bound,
                                                 counter: 2, window: 0), .rejected(.challengeReused))
    }

    /// Unknown and revoked keys never leave a spent-challenge record behind: Redis holds only what live keys used.
    func testUnknownOrRevokedKeysWriteNothing() throws {
        let record = StoreFixture.record()
        XCTAssertEqual(try store.register(record), .created)
        XCTAssertTrue(try store.revoke(keyId: record.keyId, reason: "test"))
        let challenge = use()
        XCTAssertEqual(try store.commitAssertion(keyId: StoreFixture.randomBytes(32), environment: .production, challenge: challenge,
                                                 counter: 1, window: 0), .rejected(.keyUnknown))
        XCTAssertEqual(try store.commitAssertion(keyId: record.keyId, environment: .production, challenge: challenge,
                                                 counter: 1, window: 0), .rejected(.keyRevoked))
        XCTAssertTrue(try store.spendChallenge(challenge), "still unspent")
    }

    func testSharedChallengeSecretIsSetOnce() throws {
        let first = Array(String(repeating: "a", count: 44).utf8)
        XCTAssertEqual(try store.sharedChallengeSecret(candidate: first), first)
        XCTAssertEqual(try store.sharedChallengeSecret(candidate: Array(String(repeating: "b", count: 44).utf8)), first)
        XCTAssertEqual(try fixture.connection().command("SET", "\(fixture.prefix):challenge-secret", "short"), .status("OK"))
        XCTAssertThrowsError(try store.sharedChallengeSecret(candidate: first)) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_error")
        }
    }

    func testKeyIsRegisteredOnceAcrossEnvironments() throws {
        let record = StoreFixture.record()
        XCTAssertEqual(try store.register(record), .created)

        var again = record
        again.appID = "OTHERTEAM1.com.example.other"
        XCTAssertEqual(try store.register(again), .alreadyRegistered)
        again.environment = .development
        XCTAssertEqual(try store.register(again), .alreadyRegistered)

        XCTAssertEqual(try store.loadKey(keyId: record.keyId), record, "the first registration is untouched")
        XCTAssertNil(try store.loadKey(keyId: record.keyId, environment: .development))
    }

    func testRecordRoundTripsBinaryValues() throws {
        let receipt: [UInt8] = [0, 0, 0x30, 0x82, 0, 0xFF, 0x0D, 0x0A, 0] + StoreFixture.randomBytes(4000)
        var record = StoreFixture.record(environment: .development, counter: 7, receipt: receipt)
        record.publicKeySPKI[3] = 0
        XCTAssertEqual(try store.register(record), .created)

        XCTAssertEqual(try store.loadKey(keyId: record.keyId), record)
        XCTAssertEqual(try store.loadKey(keyId: record.keyId, environment: .development), record)
        XCTAssertNil(try store.loadKey(keyId: record.keyId, environment: .production))
        XCTAssertNil(try store.loadKey(keyId: StoreFixture.randomBytes(32)))
        XCTAssertNil(try store.loadKey(keyId: []))
    }

    func testRevokedKeyIsRecordedWithItsReason() throws {
        let record = StoreFixture.record()
        XCTAssertEqual(try store.register(record), .created)
        XCTAssertTrue(try store.revoke(keyId: record.keyId, reason: "device reported stolen"))

        let loaded = try XCTUnwrap(try store.loadKey(keyId: record.keyId))
        XCTAssertTrue(loaded.revoked)
        XCTAssertEqual(loaded.revokedReason, "device reported stolen")
        XCTAssertFalse(try store.revoke(keyId: StoreFixture.randomBytes(32), reason: "unknown"))
        XCTAssertFalse(try store.revoke(keyId: record.keyId, environment: .development, reason: "wrong environment"))
    }

    func testBadArgumentsAreTypedErrors() throws {
        XCTAssertThrowsError(try AttestStore(redis: Redis(options: fixture.options), keyPrefix: "a{b}")) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_invalid_argument")
        }
        XCTAssertThrowsError(try store.register(KeyRecord(keyId: [], environment: .production, appID: "A.b",
                                                          publicKeySPKI: [], counter: 0, receipt: [], createdAt: Date())))
        XCTAssertThrowsError(try store.commitAssertion(keyId: [1], environment: .production, challenge: nil,
                                                       counter: 1, window: -1))
    }

    func testRecordWrittenBySomeoneElseIsAStoreError() throws {
        let keyId = StoreFixture.randomBytes(32)
        let name = "\(fixture.prefix):{\(Base64.encodeURLSafe(keyId))}:production:key"
        XCTAssertEqual(try fixture.connection().command("HSET", name, "counter", "not a number"), .integer(1))
        XCTAssertThrowsError(try store.loadKey(keyId: keyId)) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_error")
        }
    }

    func testPublicKeyPartsLoadFromEitherEnvironmentWithoutTheReceipt() throws {
        let production = StoreFixture.record(receipt: StoreFixture.randomBytes(6000))
        let development = StoreFixture.record(environment: .development)
        XCTAssertEqual(try store.register(production), .created)
        XCTAssertEqual(try store.register(development), .created)
        let loaded = try XCTUnwrap(try store.loadPublicKey(keyId: production.keyId))
        XCTAssertEqual(loaded.publicKeySPKI, production.publicKeySPKI)
        XCTAssertEqual(loaded.appID, production.appID)
        XCTAssertEqual(loaded.environment, .production)
        XCTAssertEqual(try store.loadPublicKey(keyId: development.keyId)?.environment, .development)
        XCTAssertNil(try store.loadPublicKey(keyId: StoreFixture.randomBytes(32)))
        XCTAssertNil(try store.loadPublicKey(keyId: []))
    }

    func testPublicKeyOfARecordWithoutEnvironmentIsAStoreError() throws {
        let keyId = StoreFixture.randomBytes(32)
        let name = "\(fixture.prefix):{\(Base64.encodeURLSafe(keyId))}:production:key"
        XCTAssertEqual(try fixture.connection().command("HSET", name, "public_key", "x", "app_id", "A.b"), .integer(2))
        XCTAssertThrowsError(try store.loadPublicKey(keyId: keyId)) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_error")
        }
    }

    func testPingAnswers() {
        XCTAssertTrue(store.ping())
    }
}
