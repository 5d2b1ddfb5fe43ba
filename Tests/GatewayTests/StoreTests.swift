import AssertionCheck
import Foundation
import Gateway
import XCTest

/// Challenges, registration and key records against a real redis-server.
final class StoreTests: XCTestCase {
    var fixture: StoreFixture!
    var store: AttestStore { fixture.store }

    override func setUpWithError() throws { fixture = try StoreFixture() }
    override func tearDown() { fixture = nil }

    func testAttestChallengeIsSingleUse() throws {
        let challenge = try store.issueAttestChallenge(ttlSeconds: 60)
        XCTAssertEqual(challenge.utf8.count, 43, "base64url of 32 random bytes")
        XCTAssertNotEqual(challenge, try store.issueAttestChallenge(ttlSeconds: 60))
        XCTAssertTrue(try store.consumeAttestChallenge(challenge))
        XCTAssertFalse(try store.consumeAttestChallenge(challenge))
    }

    func testUnknownAndMalformedChallengesAreNotAccepted() throws {
        XCTAssertFalse(try store.consumeAttestChallenge("never-issued"))
        XCTAssertFalse(try store.consumeAttestChallenge(""))
        XCTAssertFalse(try store.consumeAttestChallenge(String(repeating: "A", count: 10_000)))
        XCTAssertFalse(try store.consumeAttestChallenge("}{\r\n\0"))
    }

    func testChallengesExpireAfterTheirTTL() throws {
        let record = StoreFixture.record()
        XCTAssertEqual(try store.register(record), .created)
        let attest = try store.issueAttestChallenge(ttlSeconds: 1)
        let assert = try store.issueAssertChallenge(keyId: record.keyId, ttlSeconds: 1)
        Thread.sleep(forTimeInterval: 1.3)
        XCTAssertFalse(try store.consumeAttestChallenge(attest))
        XCTAssertEqual(try store.commitAssertion(keyId: record.keyId, environment: .production, challenge: assert,
                                                 counter: 1, window: 0), .rejected(.challengeUnknown))
    }

    func testChallengeTTLIsSetInRedis() throws {
        let challenge = try store.issueAttestChallenge(ttlSeconds: 300)
        let ttl = try fixture.connection().command("TTL", "\(fixture.prefix):ch:{\(challenge)}")
        guard case .integer(let seconds) = ttl else { return XCTFail("TTL answered \(ttl)") }
        XCTAssertTrue((290...300).contains(seconds), "TTL \(seconds)")
    }

    func testChallengePurposesAndKeysDoNotMix() throws {
        let first = StoreFixture.record()
        let second = StoreFixture.record()
        XCTAssertEqual(try store.register(first), .created)
        XCTAssertEqual(try store.register(second), .created)

        let attest = try store.issueAttestChallenge(ttlSeconds: 60)
        XCTAssertEqual(try store.commitAssertion(keyId: first.keyId, environment: .production, challenge: attest,
                                                 counter: 1, window: 0), .rejected(.challengeUnknown))

        let assert = try store.issueAssertChallenge(keyId: first.keyId, ttlSeconds: 60)
        XCTAssertFalse(try store.consumeAttestChallenge(assert))
        XCTAssertEqual(try store.commitAssertion(keyId: second.keyId, environment: .production, challenge: assert,
                                                 counter: 1, window: 0), .rejected(.challengeUnknown))
        XCTAssertEqual(try store.commitAssertion(keyId: first.keyId, environment: .production, challenge: assert,
                                                 counter: 1, window: 0), .accepted(previousCounter: 0))
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
        XCTAssertThrowsError(try AttestStore(pool: fixture.pool, keyPrefix: "a{b}")) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_invalid_argument")
        }
        XCTAssertThrowsError(try store.issueAttestChallenge(ttlSeconds: 0))
        XCTAssertThrowsError(try store.issueAssertChallenge(keyId: [], ttlSeconds: 60))
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
