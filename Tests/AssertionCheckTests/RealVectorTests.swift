import AssertionCheck
import Foundation
import XCTest

/// Real Apple data from ../shared/vectors: every valid vector verifies at its `verify_at`, every negative
/// variant fails with the reason its README describes.
final class RealVectorTests: XCTestCase {
    struct Vector {
        let name: String
        let json: [String: Any]
        func string(_ key: String) -> String? { json[key] as? String }
        func bytes(_ key: String) -> [UInt8] { Base64.decode(string(key) ?? "") ?? [] }
        var appID: AppID { AppID(teamID: string("team_id")!, bundleID: string("bundle_id")!) }
        var valid: Bool { ((json["expected"] as? [String: Any])?["result"] as? String) == "valid" }
        var verifyAt: Date {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            let text = string("verify_at")!
            return formatter.date(from: text) ?? ISO8601DateFormatter().date(from: text)!
        }
    }

    static let vectorDirectory: URL = {
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return repo.deletingLastPathComponent().appendingPathComponent("shared/vectors")
    }()

    static func vectors(prefix: String) throws -> [Vector] {
        let names = try FileManager.default.contentsOfDirectory(atPath: vectorDirectory.path)
            .filter { $0.hasPrefix(prefix) && $0.hasSuffix(".json") }.sorted()
        return try names.map { name in
            let data = try Data(contentsOf: vectorDirectory.appendingPathComponent(name))
            return Vector(name: name, json: try JSONSerialization.jsonObject(with: data) as! [String: Any])
        }
    }

    func verifyAttestation(_ vector: Vector, environments: Set<AppAttestEnvironment>? = nil) throws(VerificationError) -> AttestedKey {
        let environment = vector.string("environment").flatMap(AppAttestEnvironment.init(rawValue:))
        let clientData: AttestationClientData = (vector.json["challenge_is_hashed_by_client"] as? Bool) == false
            ? .clientDataHash(vector.bytes("client_data_hash_b64"))
            : .challenge(vector.bytes("challenge_b64"))
        let policy = AttestationPolicy(apps: [vector.appID], environments: environments ?? [environment!])
        return try AttestationVerifier.verify(attestation: vector.bytes("attestation_b64"), keyId: vector.bytes("key_id_b64"),
                                              clientData: clientData, policy: policy, at: vector.verifyAt)
    }

    func verifyAssertion(_ vector: Vector) throws -> VerifiedAssertion {
        let key = try P256PublicKey(bytes: vector.bytes("public_key_b64"))
        return try AssertionVerifier.verify(assertion: vector.bytes("assertion_b64"), clientData: vector.bytes("client_data_b64"),
                                            publicKey: key, appID: vector.appID,
                                            previousCounter: UInt32(vector.json["previous_counter"] as! Int))
    }

    func expectFailure(_ vector: Vector, _ reason: VerificationError.Reason, _ body: () throws -> Void) {
        XCTAssertThrowsError(try body(), vector.name) { error in
            XCTAssertEqual((error as? VerificationError)?.reason, reason, "\(vector.name): \(error)")
        }
    }

    func testAllRealAttestationsVerify() throws {
        let vectors = try Self.vectors(prefix: "att-")
        XCTAssertEqual(vectors.count, 22)
        for vector in vectors {
            XCTAssertTrue(vector.valid)
            do {
                let key = try verifyAttestation(vector)
                XCTAssertEqual(key.keyId, vector.bytes("key_id_b64"), vector.name)
                XCTAssertEqual(key.environment.rawValue, vector.string("environment"), vector.name)
                XCTAssertEqual(key.appID, vector.appID, vector.name)
                XCTAssertEqual(key.counter, 0)
                XCTAssertFalse(key.receipt.isEmpty, vector.name)
                XCTAssertEqual(SHA256.hash(key.publicKey.point), key.keyId, vector.name)
            } catch {
                XCTFail("\(vector.name): \(error)")
            }
        }
    }

    func testApple2026SampleExposesAuthenticatorExtensions() throws {
        let vector = try XCTUnwrap(Self.vectors(prefix: "att-apple-guide-2026-sample").first)
        let key = try verifyAttestation(vector)
        XCTAssertEqual(key.extensions?.bundleVersion, "1")
        XCTAssertEqual(key.extensions?.validationCategory, [0x01, 0x00, 0x00, 0x00])
    }

    func testAllRealAssertionsVerify() throws {
        let vectors = try Self.vectors(prefix: "ass-")
        XCTAssertEqual(vectors.count, 17)
        for vector in vectors {
            do {
                let result = try verifyAssertion(vector)
                XCTAssertEqual(Int(result.counter), vector.json["expected_counter"] as? Int, vector.name)
            } catch {
                XCTFail("\(vector.name): \(error)")
            }
        }
    }

    /// The assertion signature convention: ECDSA-SHA256 over the nonce (the nonce is hashed once more).
    /// Signing the nonce as a raw digest would fail every real assertion; this pins the convention down.
    func testRealAssertionsFailWhenTheNonceIsUsedAsTheDigest() throws {
        for vector in try Self.vectors(prefix: "ass-") {
            let key = try P256PublicKey(bytes: vector.bytes("public_key_b64"))
            let decoded = try CBORDecoder.decode(vector.bytes("assertion_b64"))
            let authData = try XCTUnwrap(decoded["authenticatorData"]?.bytes)
            let signature = try XCTUnwrap(decoded["signature"]?.bytes)
            let nonce = SHA256.hash(authData, SHA256.hash(vector.bytes("client_data_b64")))
            XCTAssertTrue(key.isValidSignature(signature, for: nonce), vector.name)
            XCTAssertFalse(key.isValidSignature(signature, for: authData + SHA256.hash(vector.bytes("client_data_b64"))), vector.name)
        }
    }

    /// Only the one DER spelling of a signature verifies (as with OpenSSL's ECDSA_verify, which re-encodes what
    /// it parsed): padded, long-form, truncated, sign-less or trailing spellings of real signatures all fail,
    /// while the same signature with S replaced by n − S (another valid signature) still verifies.
    func testRealSignaturesVerifyOnlyInTheirDERSpelling() throws {
        func integer(_ magnitude: ArraySlice<UInt8>, pad: Int = 0, longLength: Bool = false, signed: Bool = true) -> [UInt8] {
            var content = Array(magnitude.drop { $0 == 0 })
            if signed, let first = content.first, first & 0x80 != 0 { content.insert(0, at: 0) }
            content = [UInt8](repeating: 0, count: pad) + content
            return [0x02] + (longLength ? [0x81, UInt8(content.count)] : [UInt8(content.count)]) + content
        }
        func sequence(_ body: [UInt8], longLength: Bool = false) -> [UInt8] {
            [0x30] + (longLength ? [0x81, UInt8(body.count)] : [UInt8(body.count)]) + body
        }
        var checked = 0
        for vector in try Self.vectors(prefix: "ass-") where vector.valid {
            let key = try P256PublicKey(bytes: vector.bytes("public_key_b64"))
            let decoded = try CBORDecoder.decode(vector.bytes("assertion_b64"))
            let signature = try XCTUnwrap(decoded["signature"]?.bytes)
            let nonce = SHA256.hash(try XCTUnwrap(decoded["authenticatorData"]?.bytes), SHA256.hash(vector.bytes("client_data_b64")))
            let raw = try XCTUnwrap(ECDSASignature.raw(fromDER: signature))
            let (r, s) = (raw[..<32], raw[32...])
            XCTAssertEqual(sequence(integer(r) + integer(s)), signature, vector.name)
            XCTAssertTrue(key.isValidSignature(signature, for: nonce), vector.name)
            XCTAssertTrue(key.isValidSignature(try XCTUnwrap(ECDSASignature.der(fromRaw: ECDSASignature.flippedS(raw))), for: nonce), vector.name)
            var respelled = [sequence(integer(r, pad: 1) + integer(s)), sequence(integer(r) + integer(s, pad: 1)),
                             sequence(integer(r, longLength: true) + integer(s)), sequence(integer(r) + integer(s), longLength: true),
                             signature + [0], Array(signature.dropLast()), [0x31] + signature.dropFirst(),
                             sequence(integer(r) + integer(s) + integer([1]))]
            if r.first.map({ $0 & 0x80 != 0 }) == true { respelled.append(sequence(integer(r, signed: false) + integer(s))) }
            if s.first.map({ $0 & 0x80 != 0 }) == true { respelled.append(sequence(integer(r) + integer(s, signed: false))) }
            for spelling in respelled { XCTAssertFalse(key.isValidSignature(spelling, for: nonce), "\(vector.name): \(spelling)") }
            checked += 1
        }
        XCTAssertGreaterThanOrEqual(checked, 10)
    }

    func testRealAttestationKeysVerifyTheirAssertions() throws {
        let attestations = Dictionary(uniqueKeysWithValues: try Self.vectors(prefix: "att-").map { ($0.name, $0) })
        var checked = 0
        for vector in try Self.vectors(prefix: "ass-") {
            guard let ref = vector.string("attestation_ref"), let attestation = attestations[ref + ".json"] else { continue }
            let key = try verifyAttestation(attestation)
            let result = try AssertionVerifier.verify(assertion: vector.bytes("assertion_b64"), clientData: vector.bytes("client_data_b64"),
                                                      publicKey: key.publicKey, appID: key.appID, previousCounter: 0)
            XCTAssertGreaterThan(result.counter, 0)
            checked += 1
        }
        XCTAssertGreaterThanOrEqual(checked, 10)
    }

    func testNegativeAttestationsFailForTheirReason() throws {
        let expected: [String: VerificationError.Reason] = [
            "neg-att-apple-guide-2024-sample-hashed-challenge": .nonceMismatch,
            "neg-att-apple-guide-2026-sample-hashed-challenge": .nonceMismatch,
            "neg-att-gematik-before-not-before": .certNotYetValid,
            "neg-att-splitsecure-dev-tampered-leaf-signature": .chainInvalid,
            "neg-att-srinivas-wrong-team-id": .appIdMismatch,
            "neg-att-uebelack-development-expected-production": .environmentMismatch,
            "neg-att-uebelack-development-wrong-challenge": .nonceMismatch,
            "neg-att-uebelack-production-expected-development": .environmentMismatch,
            "neg-att-uebelack-production-wrong-key-id": .keyIdMismatch,
            "neg-att-veehaitch-ios14.4-expired": .certExpired,
            "neg-att-warden-ios16-wrong-bundle-id": .appIdMismatch,
            "neg-att-warden-ios17-tampered-authdata": .nonceMismatch,
            "neg-att-worldcoin-hex-decoded-challenge": .nonceMismatch,
        ]
        let vectors = try Self.vectors(prefix: "neg-att-")
        XCTAssertEqual(Set(vectors.map { String($0.name.dropLast(5)) }), Set(expected.keys))
        for vector in vectors {
            XCTAssertFalse(vector.valid)
            expectFailure(vector, expected[String(vector.name.dropLast(5))]!) { _ = try verifyAttestation(vector) }
        }
    }

    func testNegativeAssertionsFailForTheirReason() throws {
        let expected: [String: VerificationError.Reason] = [
            "neg-ass-basd-counter-not-increasing": .counterNotIncreasing,
            "neg-ass-gematik-wrong-team-id": .appIdMismatch,
            "neg-ass-srinivas-wrong-public-key": .signatureInvalid,
            "neg-ass-uebelack-wrong-bundle-id": .appIdMismatch,
            "neg-ass-veehaitch-ios14.4-flipped-signature-byte": .signatureInvalid,
            "neg-ass-veehaitch-ios14.4-wrong-client-data": .signatureInvalid,
            "neg-ass-warden-ios17-flipped-signature-byte": .signatureInvalid,
            "neg-ass-worldcoin-counter-replay": .counterNotIncreasing,
        ]
        let vectors = try Self.vectors(prefix: "neg-ass-")
        XCTAssertEqual(Set(vectors.map { String($0.name.dropLast(5)) }), Set(expected.keys))
        for vector in vectors {
            expectFailure(vector, expected[String(vector.name.dropLast(5))]!) { _ = try verifyAssertion(vector) }
        }
    }

    /// Trusting Apple's intermediate instead of the root must not be enough: partial chains are refused.
    func testPinningTheIntermediateInsteadOfTheRootFails() throws {
        for vector in try Self.vectors(prefix: "att-") {
            let object = try CBORDecoder.decode(vector.bytes("attestation_b64"))
            guard case .array(let chain)? = object["attStmt"]?["x5c"], let intermediate = chain.last?.bytes else {
                return XCTFail("no x5c in \(vector.name)")
            }
            let pem = "-----BEGIN CERTIFICATE-----\n\(Base64.encode(intermediate))\n-----END CERTIFICATE-----\n"
            let policy = AttestationPolicy(apps: [vector.appID], environments: Set(AppAttestEnvironment.allCases),
                                           trustAnchor: try TrustAnchor(pem: pem))
            XCTAssertThrowsError(try AttestationVerifier.verify(
                attestation: vector.bytes("attestation_b64"), keyId: vector.bytes("key_id_b64"),
                clientData: .clientDataHash(vector.bytes("client_data_hash_b64")), policy: policy, at: vector.verifyAt)) { error in
                XCTAssertEqual((error as? VerificationError)?.reason, .chainInvalid, vector.name)
            }
        }
    }

    func testURLSafeUnpaddedBase64DecodesLikeStandard() throws {
        for vector in try Self.vectors(prefix: "att-") {
            let standard = vector.bytes("attestation_b64")
            let urlSafe = Base64.encodeURLSafe(standard)
            XCTAssertEqual(Base64.decode(urlSafe), standard, vector.name)
        }
    }
}
