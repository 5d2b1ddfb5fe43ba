import AssertionCheck
import DeviceSimulator
import Foundation
import XCTest

/// Public key recovery finds the signing key of real and simulated assertions among at most two
/// candidates, and nothing for signatures no key could have made.
final class KeyRecoveryTests: XCTestCase {
    func testEveryRealAssertionYieldsItsKeyId() throws {
        let vectors = try RealVectorTests.vectors(prefix: "ass-")
        XCTAssertEqual(vectors.count, 17)
        for vector in vectors {
            let candidates = try AssertionVerifier.candidateKeys(assertion: vector.bytes("assertion_b64"),
                                                                 clientData: vector.bytes("client_data_b64"))
            XCTAssertTrue((1...2).contains(candidates.count), vector.name)
            let match = candidates.first { $0.keyId == vector.bytes("key_id_b64") }
            XCTAssertEqual(match?.point, vector.bytes("public_key_x963_b64"), vector.name)
        }
    }

    func testSimulatedAssertionsAlwaysRecoverTheirKey() throws {
        let device = try SimulatedDevice(ca: try TestCA(), appID: AppID(teamID: "TEAMID1234", bundleID: "com.example.app"))
        for index in 0..<200 {
            let clientData = Array("request \(index)".utf8)
            let candidates = try AssertionVerifier.candidateKeys(assertion: try device.assert(clientData: clientData), clientData: clientData)
            XCTAssertEqual(candidates.count, 2, "two y parities")
            XCTAssertEqual(candidates.filter { $0.keyId == device.keyId }.count, 1)
            for candidate in candidates {
                XCTAssertEqual(candidate.keyId, SHA256.hash(candidate.point))
                XCTAssertNoThrow(try P256PublicKey(point: candidate.point), "a point on the curve")
            }
        }
    }

    func testOtherClientDataOrTamperedSignatureRecoversAnotherKey() throws {
        let device = try SimulatedDevice(ca: try TestCA(), appID: AppID(teamID: "TEAMID1234", bundleID: "com.example.app"))
        let assertion = try device.assert(clientData: Array("signed".utf8))
        let other = try AssertionVerifier.candidateKeys(assertion: assertion, clientData: Array("not signed".utf8))
        XCTAssertFalse(other.contains { $0.keyId == device.keyId })
        let tampered = try device.assert(clientData: Array("x".utf8), faults: [.corruptedSignature])
        XCTAssertFalse(try AssertionVerifier.candidateKeys(assertion: tampered, clientData: Array("x".utf8)).contains { $0.keyId == device.keyId })
    }

    func testSignaturesNoKeyCouldMakeYieldNothing() throws {
        let order = hex("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551")
        let one = [UInt8](repeating: 0, count: 31) + [1]
        let zero = [UInt8](repeating: 0, count: 32)
        for (r, s) in [(zero, one), (one, zero), (order, one), (one, order)] {
            let der = ECDSASignature.der(fromRaw: r + s)!
            XCTAssertEqual(KeyRecovery.candidates(signature: der, message: [1, 2, 3]), [])
        }
        XCTAssertEqual(KeyRecovery.candidates(signature: [0x30, 0x00], message: []), [])
        XCTAssertEqual(KeyRecovery.candidates(signature: [], message: []), [])
        XCTAssertThrowsError(try AssertionVerifier.candidateKeys(assertion: [0xA0], clientData: [])) { error in
            XCTAssertEqual((error as? VerificationError)?.reason, .badAssertion)
        }
    }

    /// RFC 4231 test cases 1, 2 and 6 (a key longer than the block).
    func testHMACSHA256MatchesRFC4231() {
        let cases: [([UInt8], String, String)] = [
            ([UInt8](repeating: 0x0b, count: 20), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
            (Array("Jefe".utf8), "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
            ([UInt8](repeating: 0xaa, count: 131), "Test Using Larger Than Block-Size Key - Hash Key First",
             "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        ]
        for (key, message, expected) in cases {
            XCTAssertEqual(Bytes.hex(HMACSHA256(key: key).mac(Array(message.utf8))), expected)
        }
        // One key's hash states are reused: each MAC starts from them afresh, whatever came before.
        let (key, message, expected) = cases[1]
        let hmac = HMACSHA256(key: key)
        for _ in 0..<3 {
            XCTAssertEqual(Bytes.hex(hmac.mac(Array(message.utf8))), expected)
            _ = hmac.mac(Array("another message".utf8))
        }
        // A message prefix hashed up front, and a message in two parts, MAC the same bytes.
        let utf8 = Array(message.utf8)
        XCTAssertEqual(Bytes.hex(HMACSHA256(key: key, messagePrefix: Array(utf8[..<10])).mac(utf8[10..<20], Array(utf8[20...]))), expected)
        XCTAssertEqual(Bytes.hex(HMACSHA256(key: cases[2].0, messagePrefix: Array(cases[2].1.utf8)).mac([])), cases[2].2)
        // The MAC as a value: the same bytes, and a constant-time compare that refuses any other 32 bytes or length.
        let digest = HMACSHA256(key: key, messagePrefix: Array(utf8[..<10])).digest(utf8[10..<20], utf8[20...])
        XCTAssertEqual(Bytes.hex(digest.bytes), expected)
        XCTAssertTrue(digest.matches(hex(expected)[...]))
        for index in [0, 17, 31] {
            var altered = hex(expected)
            altered[index] ^= 0x01
            XCTAssertFalse(digest.matches(altered[...]), "byte \(index) altered")
        }
        XCTAssertFalse(digest.matches(hex(expected).dropLast()))
        XCTAssertFalse(digest.matches(hex(expected)[...] + [0]))
        XCTAssertEqual(SHA256.digest(utf8[..<5], utf8[5...]).bytes, SHA256.hash(utf8))
    }

    private func hex(_ text: String) -> [UInt8] {
        let digits = Array(text.utf8)
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
    }
}
