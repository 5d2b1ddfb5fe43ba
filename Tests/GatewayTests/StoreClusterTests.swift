import AssertionCheck
import AttestStore
import EventLoop
import Foundation
import RedisClient
import TestSupport
import XCTest

/// The store on a real Redis Cluster (3 primaries, 3 replicas, shared by the test run): every operation on
/// one slot (a CROSSSLOT error anywhere fails these tests), keys spread over every primary, a slot migrated
/// under the client's feet (ASK, TRYAGAIN, MOVED), and a primary that dies.
final class StoreClusterTests: XCTestCase {
    private var cluster: RedisTestCluster!
    private var store: AttestStore!
    private var direct: BlockingRedis!
    private let storePrefix = "cluster-\(UUID().uuidString.prefix(8))"

    override func setUpWithError() throws {
        cluster = try RedisTestCluster.shared()
        try cluster.waitUntilHealthy()
        let options = RedisOptions(topology: .cluster(seeds: cluster.nodes.prefix(2).map { RedisAddress(host: "127.0.0.1", port: $0.port) }),
                                   timeoutMs: 1000)
        store = try AttestStore(redis: Redis(options: options), keyPrefix: storePrefix)
        direct = BlockingRedis(options: options)
    }

    override func tearDown() {
        store = nil
        direct = nil
    }

    /// TRYAGAIN error replies the primaries sent so far (Redis' `INFO errorstats`).
    private func tryAgainReplies() throws -> Int {
        try cluster.primaries().reduce(0) { sum, node in
            let line = try node.query("INFO", "errorstats").split(whereSeparator: \.isNewline).first { $0.hasPrefix("errorstat_TRYAGAIN:count=") }
            return sum + (line.flatMap { Int($0.dropFirst("errorstat_TRYAGAIN:count=".count)) } ?? 0)
        }
    }

    private func commit(_ record: KeyRecord, _ counter: UInt32, challenge: ChallengeUse? = nil) throws -> CommitOutcome {
        try store.commitAssertion(keyId: record.keyId, environment: record.environment, challenge: challenge, counter: counter, window: 0)
    }

    private func newChallenge() -> ChallengeUse { ChallengeUse(id: Base64.encodeURLSafe(StoreFixture.randomBytes(16)), ttlMs: 60_000) }

    func testEveryStoreOperationRunsOnOneSlot() throws {
        let record = StoreFixture.record()
        XCTAssertEqual(try store.register(record), .created)
        XCTAssertEqual(try store.register(record), .alreadyRegistered)
        XCTAssertEqual(try store.loadKey(keyId: record.keyId)?.appID, record.appID)
        XCTAssertEqual(try store.loadPublicKey(keyId: record.keyId)?.publicKeySPKI, record.publicKeySPKI)
        let challenge = newChallenge()
        XCTAssertEqual(try commit(record, 1, challenge: challenge), .accepted(previousCounter: 0))
        XCTAssertEqual(try commit(record, 2, challenge: challenge), .rejected(.challengeReused))
        XCTAssertEqual(try store.commitAssertion(keyId: record.keyId, environment: .production, challenge: newChallenge(), counter: 5,
                                                 window: 8, rateLimit: RateLimit(requests: 10, perSeconds: 60), route: "chat"),
                       .accepted(previousCounter: 1))
        XCTAssertTrue(try store.spendChallenge(challenge))
        XCTAssertFalse(try store.spendChallenge(challenge))
        XCTAssertTrue(try store.consumeDeviceToken(StoreFixture.randomBytes(64), ttlSeconds: 60))
        XCTAssertTrue(try store.claimInFlight(keyId: record.keyId, route: "buy", ttlMs: 5000))
        XCTAssertFalse(try store.claimInFlight(keyId: record.keyId, route: "buy", ttlMs: 5000))
        try store.releaseClaim(keyId: record.keyId, route: "buy")
        XCTAssertEqual(try store.useToken(keyId: record.keyId, tokenId: "jti-1", expiresAt: Int64(Date().timeIntervalSince1970) + 60,
                                          spend: true, rateLimit: RateLimit(requests: 5, perSeconds: 60), route: "chat"), .accepted)
        try store.scheduleReceiptRefresh(keyId: record.keyId, environment: .production, at: Date(timeIntervalSinceNow: -1))
        XCTAssertEqual(try store.dueReceiptCount(now: Date()), 1)
        XCTAssertEqual(try store.claimDueReceipts(now: Date(), leaseUntil: Date(timeIntervalSinceNow: 60), limit: 10).map(\.keyId), [record.keyId])
        XCTAssertTrue(try store.storeReceipt(keyId: record.keyId, environment: .production, receipt: [1, 2, 3], riskMetric: 4, at: Date()))
        let secret = try store.sharedChallengeSecret(candidate: StoreFixture.randomBytes(32))
        XCTAssertEqual(try store.sharedChallengeSecret(candidate: StoreFixture.randomBytes(32)), secret)

        let subscription = try store.subscribeToRevocations()
        XCTAssertTrue(try store.revoke(keyId: record.keyId, reason: "test"))
        try store.announceRevocation(keyId: record.keyId)
        XCTAssertEqual(try store.loadRevokedKeys(since: Date(timeIntervalSinceNow: -60)), [record.keyId])
        var heard: RedisSubscription.Push?
        let deadline = Date().addingTimeInterval(5)
        while heard == nil, Date() < deadline { heard = try subscription.next(waitingMs: 100) }
        XCTAssertEqual(heard, .message(Array(Base64.encodeURLSafe(record.keyId).utf8)), "pub/sub reaches a subscriber on any node")
        XCTAssertEqual(try commit(record, 9), .rejected(.keyRevoked))
    }

    func testKeysSpreadOverEveryPrimaryAndEachKeepsItsOwnCounter() throws {
        let records = (0..<120).map { _ in StoreFixture.record() }
        for record in records { XCTAssertEqual(try store.register(record), .created) }
        for record in records { XCTAssertEqual(try commit(record, 1, challenge: newChallenge()), .accepted(previousCounter: 0)) }
        for record in records { XCTAssertEqual(try commit(record, 1), .rejected(.counterNotIncreasing)) }
        let owners = try Set(records.map { record in
            try cluster.owner(ofSlot: cluster.slot(ofKey: "x:{\(Base64.encodeURLSafe(record.keyId))}")).port
        })
        XCTAssertEqual(owners.count, 3, "120 random keys land on all three primaries")
    }

    /// A script's keys (some of them not created yet) in a slot being migrated get TRYAGAIN from Redis: the
    /// client waits and asks again within its timeout, so a migration that ends meanwhile (as each slot of a
    /// reshard does within milliseconds) is invisible; one that does not is `store_unavailable`, never a
    /// wrong answer. Afterwards MOVED leads to the new owner.
    func testScriptsOnASlotInMigrationWaitForItOrAreUnavailable() throws {
        let record = StoreFixture.record()
        XCTAssertEqual(try store.register(record), .created)
        XCTAssertEqual(try commit(record, 1), .accepted(previousCounter: 0))
        let slot = try cluster.slot(ofKey: "x:{\(Base64.encodeURLSafe(record.keyId))}")
        let source = try cluster.owner(ofSlot: slot)
        let target = try XCTUnwrap(try cluster.primaries().first { $0 !== source })
        let migration = try cluster.beginMigration(ofSlot: slot, to: target)
        var finished = false
        defer { if !finished { try? cluster.finishMigration(migration) } }

        let started = Date()
        XCTAssertThrowsError(try commit(record, 2)) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_unavailable", "\(error)")
            XCTAssertTrue("\(error)".contains("TRYAGAIN"), "\(error)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 2.5, "bounded by the client's timeout")
        try cluster.moveKeys(of: migration)
        XCTAssertThrowsError(try store.loadKey(keyId: record.keyId), "moved, but the development record is missing: TRYAGAIN")

        // The migration ends while the client waits: the commit goes through on the target. A patient client (10 s)
        // is refused with TRYAGAIN first (seen in Redis' error counts), then the migration is finished: no race
        // between a timer and the time redis-cli takes to finish it on a loaded machine.
        let options = RedisOptions(topology: .cluster(seeds: cluster.nodes.prefix(2).map { RedisAddress(host: "127.0.0.1", port: $0.port) }),
                                   timeoutMs: 10_000)
        let patient = try AttestStore(redis: Redis(options: options), keyPrefix: storePrefix)
        let refusalsBefore = try tryAgainReplies()
        let outcome = Locked<Result<CommitOutcome, Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            outcome.withLock { $0 = Result { try patient.commitAssertion(keyId: record.keyId, environment: record.environment, challenge: nil,
                                                                        counter: 2, window: 0) } }
            done.signal()
        }
        let deadline = Date().addingTimeInterval(8)
        while try tryAgainReplies() == refusalsBefore, Date() < deadline { usleep(20_000) }
        XCTAssertGreaterThan(try tryAgainReplies(), refusalsBefore, "the commit met the migration")
        try cluster.finishMigration(migration)
        finished = true
        XCTAssertEqual(done.wait(timeout: .now() + 15), .success)
        XCTAssertEqual(try outcome.withLock { $0 }?.get(), .accepted(previousCounter: 1))
        try cluster.waitUntilHealthy()
        XCTAssertEqual(try cluster.owner(ofSlot: slot).port, target.port)
        XCTAssertEqual(try store.loadKey(keyId: record.keyId)?.counter, 2)
        XCTAssertEqual(try commit(record, 2), .rejected(.counterNotIncreasing))
    }

    func testACrashedPrimaryFailsItsSlotsUntilItsReplicaIsPromoted() throws {
        let records = (0..<12).map { _ in StoreFixture.record() }
        for record in records { XCTAssertEqual(try store.register(record), .created) }
        let slots = try records.map { try cluster.slot(ofKey: "x:{\(Base64.encodeURLSafe($0.keyId))}") }
        let owners = try slots.map { try cluster.owner(ofSlot: $0).port }
        let victim = try cluster.owner(ofSlot: slots[0])
        // Replicated before the crash, so the promoted replica has the records.
        try victim.waitForReplicas()
        let crashed = try cluster.crashPrimary(servingSlot: slots[0])
        defer { XCTAssertNoThrow(try cluster.restore()) }

        let elsewhere = zip(records, owners).filter { $0.1 != crashed.port }.map(\.0)
        XCTAssertFalse(elsewhere.isEmpty)
        let started = Date()
        XCTAssertThrowsError(try store.loadKey(keyId: records[0].keyId)) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_unavailable", "\(error)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 3, "bounded by the client's timeouts")
        for record in elsewhere { XCTAssertEqual(try store.loadKey(keyId: record.keyId)?.keyId, record.keyId, "other slots keep working") }

        try cluster.waitForPromotion(ofSlot: slots[0], replacing: crashed)
        // The client finds the promoted replica by itself (its map is refreshed after the failures).
        var recovered: KeyRecord?
        let deadline = Date().addingTimeInterval(10)
        while recovered == nil, Date() < deadline {
            recovered = try? store.loadKey(keyId: records[0].keyId)
            if recovered == nil { usleep(100_000) }
        }
        XCTAssertEqual(recovered?.keyId, records[0].keyId)
        // Nodes learn of the promotion one by one: one that has not yet may answer CLUSTERDOWN for a moment
        // (store_unavailable, waited out); a record that is not found is lost, and fails at once.
        for record in records {
            var loaded: KeyRecord??
            while loaded == nil, Date() < deadline.addingTimeInterval(10) {
                do throws(StoreError) {
                    loaded = .some(try store.loadKey(keyId: record.keyId))
                } catch {
                    guard error.reasonCode == "store_unavailable" else { throw error }
                    usleep(100_000)
                }
            }
            XCTAssertEqual(loaded??.keyId, record.keyId, "no registration lost")
        }
    }

    /// The revocation subscription's node dies: the subscription ends, and subscribing again reaches a live
    /// node (the map refreshed, the primaries taken in turn) that hears revocations published anywhere.
    func testASubscriptionOnACrashedNodeIsOpenedAgainElsewhere() throws {
        let subscription = try store.subscribeToRevocations()
        let node = try XCTUnwrap(cluster.nodes.first { $0.port == subscription.address.port })
        let servedSlot = try XCTUnwrap(try cluster.clusterNodes().first { $0.address == node.address }?.slots.first?.lowerBound)
        try node.waitForReplicas()
        node.crash()
        defer {
            // Restarted only once its replica took over (a primary back within the node timeout confuses the Cluster).
            XCTAssertNoThrow(try cluster.waitForPromotion(ofSlot: servedSlot, replacing: node))
            XCTAssertNoThrow(try cluster.restore())
        }
        var ended = false
        let deadline = Date().addingTimeInterval(5)
        while !ended, Date() < deadline {
            do { _ = try subscription.next(waitingMs: 100) } catch { ended = true }
        }
        XCTAssertTrue(ended, "the subscription reports its connection lost")

        var again: RedisSubscription?
        let retryUntil = Date().addingTimeInterval(15)
        while again == nil, Date() < retryUntil {
            again = try? store.subscribeToRevocations()
            if again == nil { usleep(200_000) }
        }
        let resubscribed = try XCTUnwrap(again)
        XCTAssertNotEqual(resubscribed.address.port, node.port)
        let keyId = StoreFixture.randomBytes(32)
        var announced = false
        while !announced, Date() < retryUntil { announced = (try? store.announceRevocation(keyId: keyId)) != nil }
        var heard: RedisSubscription.Push?
        while heard == nil || heard == .pong, Date() < retryUntil { heard = try resubscribed.next(waitingMs: 100) }
        XCTAssertEqual(heard, .message(Array(Base64.encodeURLSafe(keyId).utf8)))
    }
}
