import AssertionCheck
import Foundation
import XCTest

/// Hostile bytes end in a typed error: never a crash, a hang or a huge allocation.
final class MalformedInputTests: XCTestCase {
    let app = AppID(teamID: "6MURL8TA57", bundleID: "de.vincent-haupert.apple-appattest-poc")
    lazy var policy = AttestationPolicy(apps: [app], environments: [.development])
    var vector: RealVectorTests.Vector!
    var assertionVector: RealVectorTests.Vector!

    /// A missing ../shared/vectors fails these tests with a message instead of crashing the whole suite.
    override func setUpWithError() throws {
        let missing = "no vectors in \(RealVectorTests.vectorDirectory.path)"
        vector = try XCTUnwrap(RealVectorTests.vectors(prefix: "att-veehaitch-ios14.4.json").first, missing)
        assertionVector = try XCTUnwrap(RealVectorTests.vectors(prefix: "ass-veehaitch-ios14.4.json").first, missing)
    }

    func attestationReason(_ bytes: [UInt8]) -> VerificationError.Reason? {
        do {
            _ = try AttestationVerifier.verify(attestation: bytes, keyId: vector.bytes("key_id_b64"),
                                               clientData: .challenge(vector.bytes("challenge_b64")), policy: policy, at: vector.verifyAt)
            return nil
        } catch {
            return error.reason
        }
    }

    func assertionReason(_ bytes: [UInt8], clientData: [UInt8]? = nil) -> VerificationError.Reason? {
        do {
            let key = try P256PublicKey(bytes: assertionVector.bytes("public_key_b64"))
            _ = try AssertionVerifier.verify(assertion: bytes, clientData: clientData ?? assertionVector.bytes("client_data_b64"),
                                             publicKey: key, appID: app, previousCounter: 0)
            return nil
        } catch {
            return error.reason
        }
    }

    func testTruncatedAttestationAtEveryLengthFails() {
        let bytes = vector.bytes("attestation_b64")
        XCTAssertNil(attestationReason(bytes))
        for length in stride(from: 0, to: bytes.count, by: 7) {
            XCTAssertNotNil(attestationReason(Array(bytes.prefix(length))), "prefix \(length)")
        }
    }

    func testTruncatedAssertionAtEveryLengthFails() {
        let bytes = assertionVector.bytes("assertion_b64")
        XCTAssertNil(assertionReason(bytes))
        for length in 0..<bytes.count {
            XCTAssertNotNil(assertionReason(Array(bytes.prefix(length))), "prefix \(length)")
        }
    }

    func testRandomByteFlipsNeverCrashAndNeverVerify() {
        var generator = SystemRandomNumberGenerator()
        let attestation = vector.bytes("attestation_b64")
        let assertion = assertionVector.bytes("assertion_b64")
        for _ in 0..<300 {
            var mutated = attestation
            let index = Int.random(in: 0..<mutated.count, using: &generator)
            mutated[index] ^= UInt8.random(in: 1...255, using: &generator)
            // A flip inside the receipt is not covered by Apple's checks; everything else must fail.
            _ = attestationReason(mutated)
            var mutatedAssertion = assertion
            let assertionIndex = Int.random(in: 0..<assertion.count, using: &generator)
            mutatedAssertion[assertionIndex] ^= UInt8.random(in: 1...255, using: &generator)
            XCTAssertNotNil(assertionReason(mutatedAssertion), "assertion byte \(assertionIndex)")
        }
    }

    func testHugeDeclaredLengthsAreRejectedBeforeAllocation() {
        let lies: [[UInt8]] = [
            [0x9B, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00],   // array of 2^36 items
            [0x9A, 0x10, 0x00, 0x00, 0x00],                           // array of 2^28 items (2 GiB of pointers)
            [0xBA, 0x10, 0x00, 0x00, 0x00],                           // map of 2^28 pairs
            [0x5B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF],   // byte string of 2^64-1 bytes
            [0x7A, 0x7F, 0xFF, 0xFF, 0xFF, 0x41],                     // text string of 2 GiB
        ]
        for bytes in lies {
            XCTAssertEqual(attestationReason(bytes), .badCBOR, "\(bytes)")
            XCTAssertEqual(assertionReason(bytes), .badAssertion, "\(bytes)")
        }
    }

    func testDeepNestingIsRejected() {
        let nestedArrays = [UInt8](repeating: 0x81, count: 50_000) + [0x00]
        XCTAssertEqual(attestationReason(nestedArrays), .badCBOR)
        let nestedTags = [UInt8](repeating: 0xC6, count: 30_000) + [0x00]
        XCTAssertEqual(attestationReason(nestedTags), .badCBOR)
        let indefinite = [UInt8](repeating: 0x9F, count: 30_000)
        XCTAssertEqual(attestationReason(indefinite), .badCBOR)
    }

    func testWrongTypesAndShapes() {
        let cases: [([UInt8], VerificationError.Reason)] = [
            ([], .badCBOR),
            ([0xFF], .badCBOR),
            ([0x00], .badFormat),                                       // integer, not a map
            ([0xA0], .badFormat),                                       // empty map
            ([0xA1, 0x63, 0x66, 0x6D, 0x74, 0x01], .badFormat),         // {"fmt": 1}
            ([0xA1, 0x63, 0x66, 0x6D, 0x74, 0x64, 0x6E, 0x6F, 0x6E, 0x65], .badFormat), // {"fmt": "none"}
            ([0xA0, 0x00], .badCBOR),                                   // trailing bytes
            ([0x62, 0xC3, 0x28], .badCBOR),                             // invalid UTF-8 text
            ([0xA1, 0x61, 0x61, 0xF9, 0x3C, 0x00], .badFormat),         // {"a": 1.0 (half float)}: found by the byte-flip test
            ([0xA1, 0x61, 0x61, 0xFB, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0], .badFormat), // {"a": 1.0 (double)}
            ([0xA1, 0x61, 0x61, 0xF5], .badFormat),                     // {"a": true}
        ]
        for (bytes, reason) in cases {
            XCTAssertEqual(attestationReason(bytes), reason, "\(bytes)")
        }
        XCTAssertEqual(assertionReason([0xA0]), .badAssertion)
        XCTAssertEqual(assertionReason([0xA1, 0x69] + Array("signature".utf8) + [0x40]), .badAssertion)
        XCTAssertEqual(assertionReason([UInt8](repeating: 0, count: AssertionVerifier.maxAssertionBytes + 1)), .badAssertion)
    }

    func testAttestationObjectWithWrongFieldTypes() throws {
        let object = try CBORDecoder.decode(vector.bytes("attestation_b64"))
        XCTAssertEqual(object["fmt"], .text("apple-appattest"))
        // authData as text instead of bytes, x5c empty: re-encoded by hand would need an encoder; instead
        // replace the authData bytes in place with a CBOR text header of the same length.
        var bytes = vector.bytes("attestation_b64")
        let marker = Array("authData".utf8)
        let position = try XCTUnwrap(bytes.indices.first { Array(bytes[$0..<min($0 + marker.count, bytes.count)]) == marker })
        let header = position + marker.count
        XCTAssertEqual(bytes[header] & 0xE0, 0x40)   // major type 2 (bytes)
        bytes[header] = (bytes[header] & 0x1F) | 0x60  // major type 3 (text) of the same length
        XCTAssertNotNil(attestationReason(bytes))
    }

    func testBase64RejectsWhatIsNotBase64() {
        XCTAssertNil(Base64.decode("a"))
        XCTAssertNil(Base64.decode("ab$="))
        XCTAssertNil(Base64.decode("ab=c"))
        XCTAssertNil(Base64.decode("abc=d"))
        XCTAssertNil(Base64.decode("ab c"))
        XCTAssertNil(Base64.decode("QQ==="))
        XCTAssertNil(Base64.decode("QR=="))     // non-zero trailing bits
        XCTAssertEqual(Base64.decode(""), [])
        XCTAssertEqual(Base64.decode("QQ=="), [0x41])
        XCTAssertEqual(Base64.decode("QQ"), [0x41])
        XCTAssertEqual(Base64.decode("-_-_"), [0xFB, 0xFF, 0xBF])
        XCTAssertEqual(Base64.decode("+/+/"), [0xFB, 0xFF, 0xBF])
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            XCTAssertEqual(Base64.decode(Base64.encode(bytes)), bytes)
            XCTAssertEqual(Base64.decode(Base64.encodeURLSafe(bytes)), bytes)
            XCTAssertEqual(Base64.encode(bytes), Data(bytes).base64EncodedString())
        }
    }

    func testPublicKeyInputsAreChecked() {
        XCTAssertThrowsError(try P256PublicKey(bytes: [])) { XCTAssertEqual(($0 as? VerificationError)?.reason, .badPublicKey) }
        XCTAssertThrowsError(try P256PublicKey(bytes: [0x04] + [UInt8](repeating: 1, count: 64))) {   // not on the curve
            XCTAssertEqual(($0 as? VerificationError)?.reason, .badPublicKey)
        }
        XCTAssertThrowsError(try P256PublicKey(bytes: [UInt8](repeating: 0x30, count: 91)))
        let spki = assertionVector.bytes("public_key_b64")
        let point = assertionVector.bytes("public_key_x963_b64")
        XCTAssertEqual(try P256PublicKey(bytes: spki).point, point)
        XCTAssertEqual(try P256PublicKey(bytes: point).spki, spki)
    }

    func testAssertionExtensionsAfterTheFixedBytes() throws {
        // Splice an extension map after the 37 bytes: parsing must accept it (the signature then fails,
        // since the device did not sign it), and non-map trailing bytes must be a bad_assertion.
        let decoded = try CBORDecoder.decode(assertionVector.bytes("assertion_b64"))
        let signature = try XCTUnwrap(decoded["signature"]?.bytes)
        let authData = try XCTUnwrap(decoded["authenticatorData"]?.bytes)
        let extensionMap: [UInt8] = [0xA1, 0x63, 0x66, 0x6F, 0x6F, 0x01]  // {"foo": 1}
        XCTAssertEqual(assertionReason(encodeAssertion(signature: signature, authData: authData + extensionMap)), .signatureInvalid)
        XCTAssertEqual(assertionReason(encodeAssertion(signature: signature, authData: authData + [0x01])), .badAssertion)
        XCTAssertEqual(assertionReason(encodeAssertion(signature: signature, authData: authData + extensionMap + [0x00])), .badAssertion)
        XCTAssertEqual(assertionReason(encodeAssertion(signature: signature, authData: Array(authData.prefix(36)))), .badAssertion)
    }

    /// The common layout is read without libcbor; every other spelling of the same map (keys swapped, longer
    /// length heads, chunked strings, an indefinite map, an extra entry) still goes through the full decoder
    /// and verifies the same; an empty or text signature, or bytes after the map, are refused as before.
    func testAssertionMapSpellingsDecodeAlike() throws {
        let decoded = try CBORDecoder.decode(assertionVector.bytes("assertion_b64"))
        let signature = try XCTUnwrap(decoded["signature"]?.bytes)
        let authData = try XCTUnwrap(decoded["authenticatorData"]?.bytes)
        func text(_ string: String) -> [UInt8] { [0x60 | UInt8(string.utf8.count)] + Array(string.utf8) }
        func head(_ major: UInt8, _ count: Int, width: Int) -> [UInt8] {
            switch width {
            case 0: return [major << 5 | UInt8(count)]
            case 1: return [major << 5 | 24, UInt8(count)]
            case 2: return [major << 5 | 25, UInt8(count >> 8), UInt8(count & 0xFF)]
            default: return [major << 5 | 26, 0, 0, UInt8(count >> 8), UInt8(count & 0xFF)]
            }
        }
        let common = encodeAssertion(signature: signature, authData: authData)
        XCTAssertEqual(common, assertionVector.bytes("assertion_b64"))
        XCTAssertNotNil(CBORDecoder.twoByteStrings(common, keys: "signature", "authenticatorData"))
        XCTAssertNil(assertionReason(common))
        let chunked = [0x5F] + head(2, 10, width: 0) + signature[..<10] + head(2, signature.count - 10, width: 1) + signature[10...] + [0xFF]
        let spellings: [[UInt8]] = [
            [0xA2] + text("authenticatorData") + head(2, authData.count, width: 1) + authData + text("signature") + head(2, signature.count, width: 1) + signature,
            [0xA2] + text("signature") + head(2, signature.count, width: 2) + signature + text("authenticatorData") + head(2, authData.count, width: 4) + authData,
            [0xA2] + text("signature") + chunked + text("authenticatorData") + head(2, authData.count, width: 1) + authData,
            [0xBF] + Array(common.dropFirst()) + [0xFF],
        ]
        for spelling in spellings {
            XCTAssertNil(CBORDecoder.twoByteStrings(spelling, keys: "signature", "authenticatorData"))
            XCTAssertNil(assertionReason(spelling), "\(spelling)")
        }
        XCTAssertNil(assertionReason([0xA3] + Array(common.dropFirst()) + text("x") + [0x01]))
        XCTAssertEqual(assertionReason(common + [0x00]), .badAssertion)
        XCTAssertEqual(assertionReason([0xA2] + text("signature") + [0x40] + Array(common.dropFirst(1 + 10 + 2 + signature.count))), .badAssertion)
        XCTAssertEqual(assertionReason([0xA2] + text("signature") + head(3, 1, width: 0) + [0x41] + Array(common.dropFirst(1 + 10 + 2 + signature.count))), .badAssertion)
    }

    /// {"signature": sig, "authenticatorData": authData} with one-byte or two-byte length heads.
    func encodeAssertion(signature: [UInt8], authData: [UInt8]) -> [UInt8] {
        func byteString(_ bytes: [UInt8]) -> [UInt8] { (bytes.count < 24 ? [0x40 | UInt8(bytes.count)] : [0x58, UInt8(bytes.count)]) + bytes }
        func text(_ string: String) -> [UInt8] { [0x60 | UInt8(string.utf8.count)] + Array(string.utf8) }
        return [0xA2] + text("signature") + byteString(signature) + [0x71] + Array("authenticatorData".utf8) + byteString(authData)
    }
}
