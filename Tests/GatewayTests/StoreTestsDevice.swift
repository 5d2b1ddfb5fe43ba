import AssertionCheck
import Foundation
import Gateway
import TestSupport
import XCTest

/// State for Apple's server APIs: single-use device tokens, the receipt schedule, stored risk metrics.
final class StoreTestsDevice: RegisteredKeyTestCase {
    func testDeviceTokenIsSingleUse() throws {
        let token = Array("device-token-bytes".utf8)
        XCTAssertTrue(try store.consumeDeviceToken(token, ttlSeconds: 60))
        XCTAssertFalse(try store.consumeDeviceToken(token, ttlSeconds: 60))
        XCTAssertTrue(try store.consumeDeviceToken(Array("another".utf8), ttlSeconds: 60))
    }

    func testReceiptRiskMetricIsStoredAndReturnedByTheCommit() throws {
        XCTAssertEqual(try store.commitAssertion(keyId: record.keyId, environment: record.environment, challenge: nil, counter: 1, window: 0),
                       .accepted(previousCounter: 0, riskMetric: nil))
        let receipt: [UInt8] = [0, 1, 2, 0xFF]
        XCTAssertTrue(try store.storeReceipt(keyId: record.keyId, environment: record.environment, receipt: receipt, riskMetric: 7, at: Date()))
        XCTAssertEqual(try store.commitAssertion(keyId: record.keyId, environment: record.environment, challenge: nil, counter: 2, window: 0),
                       .accepted(previousCounter: 1, riskMetric: 7))
        let loaded = try XCTUnwrap(store.loadKey(keyId: record.keyId))
        XCTAssertEqual(loaded.receipt, receipt)
        XCTAssertEqual(loaded.riskMetric, 7)
        XCTAssertNotNil(loaded.receiptRefreshedAt)
        XCTAssertTrue(try store.storeReceipt(keyId: record.keyId, environment: record.environment, receipt: receipt, riskMetric: nil, at: Date()))
        XCTAssertNil(try store.loadKey(keyId: record.keyId)?.riskMetric)
        XCTAssertFalse(try store.storeReceipt(keyId: [9, 9, 9], environment: .production, receipt: receipt, riskMetric: 1, at: Date()),
                       "no record, nothing written")
        XCTAssertNil(try store.loadKey(keyId: [9, 9, 9]))
    }

    func testDueReceiptsAreClaimedOnceAndLeased() throws {
        let now = Date()
        let other = StoreFixture.record()
        XCTAssertEqual(try store.register(other), .created)
        try store.scheduleReceiptRefresh(keyId: record.keyId, environment: record.environment, at: now.addingTimeInterval(-5))
        try store.scheduleReceiptRefresh(keyId: other.keyId, environment: other.environment, at: now.addingTimeInterval(3600))
        let first = try store.claimDueReceipts(now: now, leaseUntil: now.addingTimeInterval(600), limit: 10)
        XCTAssertEqual(first.map(\.keyId), [record.keyId])
        XCTAssertEqual(first.first?.environment, record.environment)
        XCTAssertTrue(try store.claimDueReceipts(now: now, leaseUntil: now.addingTimeInterval(600), limit: 10).isEmpty, "leased")
        let later = try store.claimDueReceipts(now: now.addingTimeInterval(3700), leaseUntil: now.addingTimeInterval(4000), limit: 10)
        XCTAssertEqual(Set(later.map(\.keyId)), [record.keyId, other.keyId], "the lease ran out, the other came due")
        try store.unscheduleReceiptRefresh(keyId: record.keyId, environment: record.environment)
        XCTAssertEqual(try store.claimDueReceipts(now: now.addingTimeInterval(9000), leaseUntil: now.addingTimeInterval(9600), limit: 10).map(\.keyId),
                       [other.keyId])
    }

    func testConcurrentGatewaysClaimEachDueKeyOnce() throws {
        let now = Date()
        for _ in 0..<20 {
            let key = StoreFixture.record()
            XCTAssertEqual(try store.register(key), .created)
            try store.scheduleReceiptRefresh(keyId: key.keyId, environment: key.environment, at: now)
        }
        let store = self.store
        let claims = Gathered<[UInt8]>()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            let claimed = (try? store.claimDueReceipts(now: now, leaseUntil: now.addingTimeInterval(600), limit: 50)) ?? []
            claims.append(contentsOf: claimed.map(\.keyId))
        }
        XCTAssertEqual(claims.values.count, 20)
        XCTAssertEqual(Set(claims.values).count, 20, "no key claimed twice")
    }
}
