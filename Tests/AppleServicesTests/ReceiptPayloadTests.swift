@testable import AssertionCheck
import Foundation
import XCTest

/// The payload parser on hand-built DER: what Apple documents parses, anything else is `receipt_invalid`.
/// (Signed receipts cannot be made without Apple's key, so the parser is reached directly.)
final class ReceiptPayloadTests: XCTestCase {
    private static func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        let count = content.count
        let length: [UInt8] = count < 0x80 ? [UInt8(count)] : count < 0x100 ? [0x81, UInt8(count)] : [0x82, UInt8(count >> 8), UInt8(count & 0xFF)]
        return [tag] + length + content
    }

    private static func field(_ type: Int, _ value: [UInt8]) -> [UInt8] {
        tlv(0x30, tlv(0x02, [UInt8(type)]) + tlv(0x02, [1]) + tlv(0x04, value))
    }

    private static let key = Base64.decode(TestKeys.signingPublicPoint)!

    private static let documented: [Int: [UInt8]] = [
        17: Array("7".utf8), 6: Array("RECEIPT".utf8), 2: Array("TEAM123456.com.example.app".utf8),
        3: key, 4: [1, 2, 3], 5: Array("dG9rZW4=".utf8), 7: Array("production".utf8),
        12: Array("2024-05-01T10:00:00.5Z".utf8), 19: Array("2024-05-02T10:00:00Z".utf8),
        21: Array("2024-07-30T10:00:00.500Z".utf8),
    ]

    private func payload(_ fields: [Int: [UInt8]] = documented, extra: [[UInt8]] = []) -> [UInt8] {
        Self.tlv(0x31, fields.keys.sorted().flatMap { Self.field($0, fields[$0]!) } + extra.joined())
    }

    private func assertInvalid(_ bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try AttestationReceipt(payload: bytes), file: file, line: line) { error in
            XCTAssertEqual((error as? VerificationError)?.reason, .receiptInvalid, "\(error)", file: file, line: line)
        }
    }

    func testDocumentedFieldsParse() throws {
        let receipt = try AttestationReceipt(payload: payload())
        XCTAssertEqual(receipt.appID, "TEAM123456.com.example.app")
        XCTAssertEqual(receipt.publicKey.point, Self.key, "a bare point in field 3 is accepted too")
        XCTAssertEqual(receipt.clientHash, [1, 2, 3])
        XCTAssertEqual(receipt.token, "dG9rZW4=")
        XCTAssertEqual(receipt.kind, .receipt)
        XCTAssertEqual(receipt.environment, "production")
        XCTAssertEqual(receipt.riskMetric, 7)
        XCTAssertEqual(receipt.creationTime.timeIntervalSince1970, 1_714_557_600.5, accuracy: 0.001)
        XCTAssertEqual(receipt.notBefore?.timeIntervalSince1970, 1_714_644_000)
        XCTAssertEqual(receipt.expirationTime.timeIntervalSince1970, 1_722_333_600.5, accuracy: 0.001)
    }

    func testOptionalFieldsMayBeAbsentOrBlank() throws {
        var fields = Self.documented
        fields[17] = Array(" ".utf8)
        fields[19] = []
        fields[7] = nil
        fields[3] = try P256PublicKey(point: Self.key).spki
        let receipt = try AttestationReceipt(payload: payload(fields))
        XCTAssertNil(receipt.riskMetric)
        XCTAssertNil(receipt.notBefore)
        XCTAssertNil(receipt.environment)
        XCTAssertEqual(receipt.publicKey.point, Self.key)
    }

    func testMissingOrMalformedFieldsAreInvalid() {
        for required in [2, 3, 4, 5, 6, 12, 21] {
            var fields = Self.documented
            fields[required] = nil
            assertInvalid(payload(fields))
        }
        let spoiled: [(Int, [UInt8])] = [
            (6, Array("ATTESTED".utf8)), (12, Array("yesterday".utf8)), (21, Array("2024-07-30".utf8)),
            (17, Array("-1".utf8)), (17, Array("three".utf8)), (3, [0x30, 0x03, 0x02, 0x01, 0x01]),
            (2, [0xFF, 0xFE]),
        ]
        for (type, value) in spoiled {
            var fields = Self.documented
            fields[type] = value
            assertInvalid(payload(fields))
        }
    }

    func testMalformedDERIsInvalid() {
        let good = payload()
        assertInvalid([])
        assertInvalid(good + [0])
        assertInvalid(Array(good.dropLast()))
        assertInvalid(payload(extra: [Self.field(2, Array("again".utf8))]))
        assertInvalid(payload(extra: [Self.tlv(0x30, Self.tlv(0x02, [9]) + Self.tlv(0x02, [1]))]))
        assertInvalid(payload(extra: [Self.tlv(0x30, Self.tlv(0x02, [0x80]) + Self.tlv(0x02, [1]) + Self.tlv(0x04, []))]))
        assertInvalid(payload(extra: [Self.tlv(0x04, [1])]))
        // A length with a leading zero octet is not DER.
        XCTAssertEqual(good[1], 0x82)
        assertInvalid([0x31, 0x83, 0x00] + good.dropFirst(2))
        assertInvalid(Self.tlv(0x30, Array(good.dropFirst(2))))
    }
}
