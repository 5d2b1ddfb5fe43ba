import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation
@testable import Gateway
import TestSupport
import XCTest

/// The background receipt exchange, against the fake Apple server (which hands out a real refreshed
/// receipt) and a real Redis, with the clock pinned inside that receipt's validity.
final class ReceiptRefresherTests: XCTestCase {
    var fixture: StoreFixture!
    var apple: FakeAppleServer!
    var runtime: GatewayRuntime!
    var refresher: ReceiptRefresher!
    let now = RealRefreshedReceipt.verifyAt
    var record: KeyRecord!

    override func setUpWithError() throws {
        fixture = try StoreFixture()
        apple = try AppleTestKey.fakeApple()
        let directory = TestPaths.temporaryDirectory("refresher")
        try AppleTestKey.pem.write(toFile: directory + "/AuthKey.p8", atomically: true, encoding: .utf8)
        let config = try GatewayConfig.parse(yaml: """
        redis: { url: "\(fixture.url)", key_prefix: "\(fixture.prefix)" }
        app_attest: { apps: ["\(RealRefreshedReceipt.appID)"], environments: [development] }
        upstreams: { api: { url: "http://127.0.0.1:9" } }
        routes: [ { path_prefix: "/", upstream: api, policy: pass } ]
        apple:
          team_id: "\(AppleTestKey.teamID)"
          key_id: "\(AppleTestKey.keyID)"
          private_key_path: "AuthKey.p8"
          devicecheck_url: "\(apple.baseURL)"
          attest_data_url: "\(apple.baseURL)"
          receipt_refresh_seconds: 86400
        """, baseDirectory: directory)
        let log = EventLog(descriptor: -1)
        runtime = try GatewayRuntime.build(config, log: log, metrics: Metrics())
        let pinned = runtime!
        let clock = now
        refresher = ReceiptRefresher(runtime: { pinned }, log: log, metrics: Metrics(), clock: { clock })
        let point = try XCTUnwrap(Base64.decode(RealRefreshedReceipt.publicKeyPoint))
        record = KeyRecord(keyId: SHA256.hash(point), environment: .development, appID: RealRefreshedReceipt.appID.description,
                           publicKeySPKI: try P256PublicKey(bytes: point).spki, counter: 0, receipt: Array("attestation receipt".utf8),
                           createdAt: now.addingTimeInterval(-86_400 * 2))
        XCTAssertEqual(try fixture.store.register(record), .created)
        try fixture.store.scheduleReceiptRefresh(keyId: record.keyId, environment: .development, at: now.addingTimeInterval(-1))
    }

    override func tearDown() {
        apple.stop()
        fixture = nil
    }

    func dueLater(by seconds: TimeInterval) throws -> Bool {
        let claimed = try fixture.store.claimDueReceipts(now: now.addingTimeInterval(seconds), leaseUntil: now.addingTimeInterval(seconds + 1), limit: 10)
        return claimed.contains { $0.keyId == record.keyId }
    }

    func testRefreshStoresTheNewReceiptAndRiskMetricAndReschedules() throws {
        XCTAssertEqual(refresher.runOnce(), 1)
        let stored = try XCTUnwrap(fixture.store.loadKey(keyId: record.keyId))
        XCTAssertEqual(stored.receipt, RealRefreshedReceipt.bytes)
        XCTAssertEqual(stored.riskMetric, 3)
        XCTAssertEqual(apple.requests(to: "/v1/attestationData").count, 1)
        XCTAssertEqual(String(decoding: apple.requests(to: "/v1/attestationData")[0].body, as: UTF8.self),
                       Base64.encode(Array("attestation receipt".utf8)))
        XCTAssertFalse(try dueLater(by: 3600), "next refresh a day later")
        XCTAssertTrue(try dueLater(by: 86_401))
        XCTAssertEqual(try fixture.store.commitAssertion(keyId: record.keyId, environment: .development, challenge: nil, counter: 1, window: 0),
                       .accepted(previousCounter: 0, riskMetric: 3), "the proxy sees the metric with the commit")
    }

    func testTooEarlyRetriesInAnHourAndNoDataStops() throws {
        apple.script("/v1/attestationData", [.status(304, "")])
        XCTAssertEqual(refresher.runOnce(), 1)
        XCTAssertNil(try fixture.store.loadKey(keyId: record.keyId)?.riskMetric)
        XCTAssertFalse(try dueLater(by: 1800))
        XCTAssertTrue(try dueLater(by: 3700))

        try fixture.store.scheduleReceiptRefresh(keyId: record.keyId, environment: .development, at: now.addingTimeInterval(-1))
        apple.script("/v1/attestationData", [.status(404, "")])
        XCTAssertEqual(refresher.runOnce(), 1)
        XCTAssertFalse(try dueLater(by: 86_400 * 365), "no data: off the schedule")
    }

    func testReceiptForAnotherKeyIsNotStored() throws {
        let other = try P256PublicKey(bytes: XCTUnwrap(Base64.decode(AppleTestKey.publicPoint)))
        try fixture.store.scheduleReceiptRefresh(keyId: record.keyId, environment: .development, at: now.addingTimeInterval(-1))
        var impostor = record!
        impostor.keyId = SHA256.hash(other.point)
        impostor.publicKeySPKI = other.spki
        XCTAssertEqual(try fixture.store.register(impostor), .created)
        try fixture.store.scheduleReceiptRefresh(keyId: impostor.keyId, environment: .development, at: now.addingTimeInterval(-1))
        XCTAssertEqual(refresher.runOnce(), 2)
        XCTAssertNil(try fixture.store.loadKey(keyId: impostor.keyId)?.riskMetric, "receipt_key_mismatch: nothing stored")
        XCTAssertEqual(try fixture.store.loadKey(keyId: record.keyId)?.riskMetric, 3)
    }

    func testRevokedKeysLeaveTheSchedule() throws {
        XCTAssertTrue(try fixture.store.revoke(keyId: record.keyId, reason: "test"))
        XCTAssertEqual(refresher.runOnce(), 1)
        XCTAssertTrue(apple.requests(to: "/v1/attestationData").isEmpty)
        XCTAssertFalse(try dueLater(by: 86_400 * 365))
    }

    func testABacklogIsWorkedOffWithoutWaitingForThePoll() throws {
        // Default concurrency 2: 16 keys per pass. 40 more keys due: three passes back to back, where one
        // pass per 30 s poll would leave most of them waiting.
        for _ in 0..<40 {
            var other = StoreFixture.record(environment: .development)
            other.appID = RealRefreshedReceipt.appID.description
            XCTAssertEqual(try fixture.store.register(other), .created)
            try fixture.store.scheduleReceiptRefresh(keyId: other.keyId, environment: .development, at: now.addingTimeInterval(-1))
        }
        refresher.start()
        defer { refresher.stop() }
        // Claimed keys leave the due range at once (leased), so wait for the exchanges themselves.
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, apple.requests(to: "/v1/attestationData").count < 41 {
            Thread.sleep(forTimeInterval: 0.1)
        }
        XCTAssertEqual(apple.requests(to: "/v1/attestationData").count, 41, "exchanges within 10 s")
        guard case .integer(let due) = try fixture.connection().command(
            "ZCOUNT", "\(fixture.prefix):receipt-refresh", "-inf", String(Int64(now.timeIntervalSince1970))) else {
            return XCTFail("ZCOUNT")
        }
        XCTAssertEqual(due, 0)
    }
}
