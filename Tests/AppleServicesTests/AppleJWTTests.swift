import AppleServices
import AssertionCheck
import Foundation
import Synchronization
import XCTest

final class AppleJWTTests: XCTestCase {
    private struct Parts {
        let header: [String: Any]
        let claims: [String: Any]
        let signature: [UInt8]
        let signingInput: String
        let encoded: [String]
    }

    private func split(_ token: String) throws -> Parts {
        let encoded = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        XCTAssertEqual(encoded.count, 3)
        let decoded = try encoded.map { part in try XCTUnwrap(Base64.decode(part), "not base64url: \(part)") }
        return Parts(
            header: try XCTUnwrap(JSONSerialization.jsonObject(with: Data(decoded[0])) as? [String: Any]),
            claims: try XCTUnwrap(JSONSerialization.jsonObject(with: Data(decoded[1])) as? [String: Any]),
            signature: decoded[2], signingInput: encoded[0] + "." + encoded[1], encoded: encoded)
    }

    func testTokenHasApplesHeaderClaimsAndARawES256Signature() throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000.75))
        let jwt = try AppleJWT(credentials: TestKeys.credentials(), clock: { clock.date })
        let parts = try split(jwt.token())

        XCTAssertEqual(parts.header.count, 2)
        XCTAssertEqual(parts.header["alg"] as? String, "ES256")
        XCTAssertEqual(parts.header["kid"] as? String, TestKeys.keyID)
        XCTAssertEqual(parts.claims.count, 2)
        XCTAssertEqual(parts.claims["iss"] as? String, TestKeys.teamID)
        XCTAssertEqual(parts.claims["iat"] as? Int, 1_700_000_000)
        // base64url without padding, and R || S rather than DER.
        for part in parts.encoded {
            XCTAssertFalse(part.contains("=") || part.contains("+") || part.contains("/"), part)
        }
        XCTAssertEqual(parts.signature.count, 64)
        let der = try XCTUnwrap(ECDSASignature.der(fromRaw: parts.signature))
        let publicKey = try P256PublicKey(bytes: XCTUnwrap(Base64.decode(TestKeys.signingPublicPoint)))
        XCTAssertTrue(publicKey.isValidSignature(der, for: Array(parts.signingInput.utf8)))
        XCTAssertFalse(publicKey.isValidSignature(der, for: Array((parts.signingInput + "x").utf8)))
    }

    func testTokenIsReusedUntilRefreshAfterThenReplaced() throws {
        let start = Date(timeIntervalSince1970: 1_700_000_000)
        let clock = TestClock(start)
        let jwt = try AppleJWT(credentials: TestKeys.credentials(), clock: { clock.date })
        let first = try jwt.token()
        clock.advance(20 * 60 - 1)
        XCTAssertEqual(try jwt.token(), first)

        clock.advance(1)
        let second = try jwt.token()
        XCTAssertNotEqual(second, first)
        XCTAssertEqual(try split(second).claims["iat"] as? Int, Int(start.timeIntervalSince1970) + 20 * 60)
        XCTAssertEqual(try jwt.token(), second)
    }

    func testAClockThatWentBackwardsGetsAFreshToken() throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_700_000_000))
        let jwt = try AppleJWT(credentials: TestKeys.credentials(), clock: { clock.date })
        let first = try jwt.token()
        clock.advance(-60)
        let second = try jwt.token()
        XCTAssertNotEqual(second, first)
        XCTAssertEqual(try split(second).claims["iat"] as? Int, 1_700_000_000 - 60)
    }

    func testInvalidateForcesANewToken() throws {
        let jwt = try TestKeys.jwt()
        let first = try jwt.token()
        XCTAssertEqual(try jwt.token(), first)
        jwt.invalidate()
        // ECDSA signatures are randomised, so even the same second gives a different token.
        XCTAssertNotEqual(try jwt.token(), first)
    }

    func testConcurrentCallersShareOneToken() throws {
        let jwt = try TestKeys.jwt()
        let tokens = Mutex<Set<String>>([])
        DispatchQueue.concurrentPerform(iterations: 64) { _ in
            if let token = try? jwt.token() { tokens.withLock { _ = $0.insert(token) } }
        }
        XCTAssertEqual(tokens.withLock { $0.count }, 1)
    }

    func testRefreshIntervalMustStayWellUnderAnHour() throws {
        for seconds in [0, 0.5, 50 * 60 + 1, 3600] as [TimeInterval] {
            XCTAssertThrowsError(try AppleJWT(credentials: TestKeys.credentials(), refreshAfter: seconds)) { error in
                XCTAssertEqual((error as? AppleServiceError)?.reasonCode, "apple_invalid_configuration")
            }
        }
        XCTAssertEqual(try AppleJWT(credentials: TestKeys.credentials(), refreshAfter: 50 * 60).refreshAfter, 3000)
    }
}

final class AppleCredentialsTests: XCTestCase {
    func testPrivateKeyDerivesThePublicKeyOpenSSLPrints() throws {
        let key = try P256PrivateKey(pem: TestKeys.signing)
        XCTAssertEqual(key.publicKey.point, Base64.decode(TestKeys.signingPublicPoint))
    }

    func testUnusableKeysAreRejectedWithoutQuotingThem() throws {
        let body = TestKeys.signing.split(separator: "\n")[1]
        let cases = [
            "", "not a key", TestKeys.p384,
            TestKeys.signing.replacingOccurrences(of: String(body), with: String(body.reversed())),
            TestKeys.encrypted,
        ]
        for pem in cases {
            XCTAssertThrowsError(try TestKeys.credentials(pem)) { error in
                XCTAssertEqual((error as? AppleServiceError)?.reasonCode, "apple_invalid_configuration", "\(error)")
                XCTAssertFalse("\(error)".contains(String(body.prefix(12))), "\(error)")
            }
        }
        XCTAssertThrowsError(try P256PrivateKey(pem: TestKeys.p384)) { error in
            XCTAssertEqual((error as? VerificationError)?.reason, .badPrivateKey)
        }
    }

    func testMissingKeyFileIsAConfigurationError() {
        XCTAssertThrowsError(try AppleCredentials(teamID: "T", keyID: "K", privateKeyFile: "/nonexistent/AuthKey.p8")) { error in
            XCTAssertEqual((error as? AppleServiceError)?.reasonCode, "apple_invalid_configuration")
        }
    }

    func testKeyFileLoads() throws {
        let path = NSTemporaryDirectory() + "AuthKey_\(UUID().uuidString).p8"
        try TestKeys.signing.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let credentials = try AppleCredentials(teamID: TestKeys.teamID, keyID: TestKeys.keyID, privateKeyFile: path)
        XCTAssertEqual(credentials.privateKey.publicKey.point, Base64.decode(TestKeys.signingPublicPoint))
    }

    func testPrintingNeverShowsTheKey() throws {
        let credentials = try TestKeys.credentials()
        var dumped = ""
        dump(credentials, to: &dumped)
        let body = String(TestKeys.signing.split(separator: "\n")[1].prefix(12))
        for text in ["\(credentials)", String(reflecting: credentials), "\(credentials.privateKey)", dumped] {
            XCTAssertFalse(text.contains(body), text)
            XCTAssertFalse(text.contains("BEGIN"), text)
        }
        XCTAssertEqual("\(credentials)", "AppleCredentials(team: \(TestKeys.teamID), key: \(TestKeys.keyID))")
    }

    func testIdentifiersMustBeLettersAndDigits() throws {
        let key = try P256PrivateKey(pem: TestKeys.signing)
        for (team, keyID) in [("", "K1"), ("T1", ""), ("TEAM\"1", "K1"), ("T1", "KEY 1"), ("T1", String(repeating: "K", count: 65))] {
            XCTAssertThrowsError(try AppleCredentials(teamID: team, keyID: keyID, privateKey: key)) { error in
                XCTAssertEqual((error as? AppleServiceError)?.reasonCode, "apple_invalid_configuration")
            }
        }
    }

    func testSignatureEncodingsConvertBothWays() throws {
        let key = try P256PrivateKey(pem: TestKeys.signing)
        let message = Array("header.claims".utf8)
        let raw = try key.es256Signature(for: message)
        let der = try XCTUnwrap(ECDSASignature.der(fromRaw: raw))
        XCTAssertEqual(der.first, 0x30)
        XCTAssertEqual(ECDSASignature.raw(fromDER: der), raw)
        XCTAssertTrue(key.publicKey.isValidSignature(der, for: message))

        XCTAssertNil(ECDSASignature.der(fromRaw: Array(raw.prefix(63))))
        XCTAssertNil(ECDSASignature.raw(fromDER: der + [0]))
        XCTAssertNil(ECDSASignature.raw(fromDER: Array(der.dropLast())))
        XCTAssertNil(ECDSASignature.raw(fromDER: []))
    }
}
