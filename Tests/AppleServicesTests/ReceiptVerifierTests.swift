import AssertionCheck
import Foundation
import TestSupport
import XCTest

/// The receipts inside the real attestations of ../shared/vectors: each verifies against the key its
/// attestation yields, and each kind of damage fails with its reason.
final class ReceiptVerifierTests: XCTestCase {
    struct Vector {
        let name: String
        let json: [String: Any]
        let key: AttestedKey
        let credCert: [UInt8]

        func bytes(_ field: String) -> [UInt8] { Base64.decode(json[field] as? String ?? "") ?? [] }

        /// Apple writes the receipt right after the credCert, whose notBefore it backdates by one day.
        var receiptTime: Date { Self.date(json["leaf_not_before"] as! String).addingTimeInterval(86_400 + 60) }

        static func date(_ text: String) -> Date {
            (try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text)) ?? (try! Date.ISO8601FormatStyle().parse(text))
        }
    }

    static func vectors() throws -> [Vector] {
        let names = try FileManager.default.contentsOfDirectory(atPath: Vectors.directory)
            .filter { $0.hasPrefix("att-") && $0.hasSuffix(".json") }.sorted()
        return try names.map { name in
            let data = try Data(contentsOf: URL(fileURLWithPath: Vectors.directory).appendingPathComponent(name))
            let json = try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
            let bytes = { (field: String) in Base64.decode(json[field] as? String ?? "") ?? [] }
            let app = AppID(teamID: json["team_id"] as! String, bundleID: json["bundle_id"] as! String)
            let policy = AttestationPolicy(apps: [app], environments: Set(AppAttestEnvironment.allCases))
            let key = try AttestationVerifier.verify(
                attestation: bytes("attestation_b64"), keyId: bytes("key_id_b64"),
                clientData: .clientDataHash(bytes("client_data_hash_b64")), policy: policy,
                at: Vector.date(json["verify_at"] as! String))
            guard case .array(let chain)? = try CBORDecoder.decode(bytes("attestation_b64"))["attStmt"]?["x5c"],
                  let credCert = chain.first?.bytes else { throw TestSupportError("no x5c in \(name)") }
            return Vector(name: name, json: json, key: key, credCert: credCert)
        }
    }

    private var veehaitch: Vector {
        get throws { try XCTUnwrap(Self.vectors().first { $0.name == "att-veehaitch-ios14.4.json" }) }
    }

    private func verify(_ vector: Vector, receipt: [UInt8]? = nil, appID: AppID? = nil, publicKey: P256PublicKey? = nil,
                        at time: Date? = nil, trustAnchor: ReceiptTrustAnchor = .apple,
                        maxAge: TimeInterval? = nil) throws -> AttestationReceipt {
        try ReceiptVerifier.verify(receipt: receipt ?? vector.key.receipt, appID: appID ?? vector.key.appID,
                                   publicKey: publicKey ?? vector.key.publicKey, at: time ?? vector.receiptTime,
                                   trustAnchor: trustAnchor, maxAge: maxAge)
    }

    func testEveryRealReceiptVerifiesAgainstItsAttestation() throws {
        let vectors = try Self.vectors()
        XCTAssertEqual(vectors.count, 22)
        for vector in vectors {
            let receipt = try verify(vector)
            XCTAssertEqual(receipt.kind, .attest, vector.name)
            XCTAssertEqual(receipt.appID, vector.key.appID.description, vector.name)
            XCTAssertEqual(receipt.attestedKeyField, vector.credCert, "\(vector.name): field 3 is the credCert")
            XCTAssertEqual(receipt.publicKey.point, vector.key.publicKey.point, vector.name)
            XCTAssertEqual(receipt.clientHash, vector.bytes("client_data_hash_b64"), vector.name)
            XCTAssertEqual(receipt.environment, vector.key.environment == .production ? "production" : "sandbox", vector.name)
            XCTAssertNil(receipt.riskMetric, "\(vector.name): ATTEST receipts carry no risk metric")
            XCTAssertNil(receipt.notBefore, vector.name)
            XCTAssertFalse(receipt.token.isEmpty, vector.name)
            XCTAssertLessThanOrEqual(receipt.creationTime, vector.receiptTime, vector.name)
            XCTAssertGreaterThan(receipt.creationTime, vector.receiptTime.addingTimeInterval(-86_400), vector.name)
            XCTAssertEqual(receipt.expirationTime.timeIntervalSince(receipt.creationTime), 90 * 86_400, accuracy: 1, vector.name)
        }
    }

    func testARealRefreshedReceiptHasTheRiskMetricAndItsTimes() throws {
        let key = try P256PublicKey(bytes: XCTUnwrap(Base64.decode(RealRefreshedReceipt.publicKeyPoint)))
        let receipt = try ReceiptVerifier.verify(receipt: RealRefreshedReceipt.bytes, appID: RealRefreshedReceipt.appID,
                                                 publicKey: key, at: RealRefreshedReceipt.verifyAt)
        XCTAssertEqual(receipt.kind, .receipt)
        XCTAssertEqual(receipt.riskMetric, 3)
        XCTAssertEqual(receipt.environment, "sandbox")
        XCTAssertEqual(receipt.creationTime, Vector.date("2020-10-22T17:21:33.761Z"))
        XCTAssertEqual(receipt.notBefore, Vector.date("2020-10-23T17:21:33.761Z"))
        XCTAssertEqual(receipt.expirationTime, Vector.date("2021-01-20T17:21:33.761Z"))
        XCTAssertEqual(receipt.publicKey.point, key.point)
        XCTAssertEqual(Array(receipt.attestedKeyField.prefix(2)), [0x30, 0x82], "field 3 holds the credCert")
        let otherKey = try P256PublicKey(bytes: XCTUnwrap(Base64.decode(TestKeys.signingPublicPoint)))
        assertFails(.receiptKeyMismatch) {
            _ = try ReceiptVerifier.verify(receipt: RealRefreshedReceipt.bytes, appID: RealRefreshedReceipt.appID,
                                           publicKey: otherKey, at: RealRefreshedReceipt.verifyAt)
        }
    }

    func testBuiltInRootIsAppleRootCAG3() {
        XCTAssertTrue(ReceiptTrustAnchor.apple.isApple)
        XCTAssertEqual(Bytes.hex(ReceiptTrustAnchor.apple.sha256Fingerprint),
                       "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179")
    }

    func testTamperedContentFailsTheSignature() throws {
        let vector = try veehaitch
        var receipt = vector.key.receipt
        let appID = Array(vector.key.appID.description.utf8)
        let offset = try XCTUnwrap(receipt.firstRange(of: appID)).lowerBound
        receipt[offset] ^= 0x01
        assertFails(.receiptSignatureInvalid) { _ = try verify(vector, receipt: receipt) }
    }

    func testTamperedSignatureFails() throws {
        let vector = try veehaitch
        var receipt = vector.key.receipt
        // SignerInfo ends with ecdsa-with-SHA256, then OCTET STRING { SEQUENCE { INTEGER r, INTEGER s } }.
        let algorithm: [UInt8] = [0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x02]
        let signature = try XCTUnwrap(receipt.ranges(of: algorithm).last).upperBound
        XCTAssertEqual([receipt[signature], receipt[signature + 2], receipt[signature + 4]], [0x04, 0x30, 0x02])
        receipt[signature + 8] ^= 0x01  // inside r
        assertFails(.receiptSignatureInvalid) { _ = try verify(vector, receipt: receipt) }
    }

    func testMalformedReceiptsAreInvalid() throws {
        let vector = try veehaitch
        let real = vector.key.receipt
        for receipt in [[], [0x30], Array(real.dropLast(10)), real + [0], Array(real.reversed()),
                        [UInt8](repeating: 0x30, count: ReceiptVerifier.maxReceiptBytes + 1)] {
            assertFails(.receiptInvalid) { _ = try verify(vector, receipt: receipt) }
        }
    }

    func testTheAppAttestRootDoesNotAnchorReceipts() throws {
        let vector = try veehaitch
        let appAttestRoot = try ReceiptTrustAnchor(pemFile: Vectors.directory + "/apple_app_attest_root_ca.pem")
        XCTAssertFalse(appAttestRoot.isApple)
        assertFails(.receiptChainInvalid) { _ = try verify(vector, trustAnchor: appAttestRoot) }
    }

    func testTimesOutsideTheSigningCertificatesValidityFail() throws {
        let vector = try veehaitch  // receipt-signing certificate valid 2020-05-19 – 2021-06-18
        assertFails(.receiptExpired) { _ = try verify(vector, at: Vector.date("2021-06-19T00:00:00Z")) }
        assertFails(.receiptNotYetValid) { _ = try verify(vector, at: Vector.date("2020-05-18T00:00:00Z")) }
    }

    func testReceiptPastItsExpirationTimeFails() throws {
        let vector = try veehaitch
        let receipt = try verify(vector)
        XCTAssertNoThrow(try verify(vector, at: receipt.expirationTime))
        assertFails(.receiptExpired) { _ = try verify(vector, at: receipt.expirationTime.addingTimeInterval(1)) }
    }

    func testMaxAgeRejectsOldReceipts() throws {
        let vector = try veehaitch
        let created = try verify(vector).creationTime
        XCTAssertNoThrow(try verify(vector, at: created.addingTimeInterval(299), maxAge: 300))
        assertFails(.receiptTooOld) { _ = try verify(vector, at: created.addingTimeInterval(301), maxAge: 300) }
    }

    func testReceiptOfAnotherAppOrKeyIsRefused() throws {
        let vectors = try Self.vectors()
        let vector = try XCTUnwrap(vectors.first { $0.name == "att-veehaitch-ios14.4.json" })
        let sameApp = try XCTUnwrap(vectors.first { $0.name == "att-veehaitch-ios14.3.json" })
        assertFails(.receiptAppIdMismatch) {
            _ = try verify(vector, appID: AppID(teamID: "6MURL8TA57", bundleID: "de.vincent-haupert.other"))
        }
        assertFails(.receiptKeyMismatch) { _ = try verify(vector, publicKey: sameApp.key.publicKey) }
    }
}
