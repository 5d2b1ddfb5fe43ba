import AssertionCheck
import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// Play Integrity through the real binary and a real Redis: a classic token (made by the test-side token
/// maker, as Google would) exchanged for a gateway token that then passes protected routes; every refusal
/// with its code; a challenge spent once; routes restricted by `token_methods`.
final class PlayIntegrityTests: XCTestCase {
    static let shared = SharedFixture<(environment: GatewayEnvironment, tokenKeys: TokenKeys, maker: PlayIntegrityTokenMaker)>()
    var env: GatewayEnvironment { Self.shared.value.environment }
    var tokenKeys: TokenKeys { Self.shared.value.tokenKeys }
    var maker: PlayIntegrityTokenMaker { Self.shared.value.maker }

    static let package = "com.example.android"
    static let certificate = Base64.encodeURLSafe(SHA256.hash(Array("release signing certificate".utf8)))
    static let secret = Array(String(repeating: "s", count: 40).utf8)

    static let routes = """
          - { path_prefix: "/tok/", upstream: echo, policy: assert, accept: [assertion, token] }
          - { path_prefix: "/ios-only/", upstream: echo, policy: assert, accept: [token], token_methods: [app_attest] }
          - { path_prefix: "/android-only/", upstream: echo, policy: assert, accept: [token], token_methods: [play_integrity] }
          - { path_prefix: "/once/", upstream: echo, policy: assert, accept: [token], token_use: limited }
          - { path_prefix: "/", upstream: echo, policy: pass }
    """

    static func section(keys: (decryption: String, verification: String), extra: String = "") -> String {
        """
        play_integrity:
          package_names: ["\(package)"]
          certificate_sha256: ["\(certificate)"]
          decryption_key_file: "\(keys.decryption)"
          verification_key_file: "\(keys.verification)"
          max_token_age_seconds: 300
        \(extra)
        """
    }

    override class func setUp() {
        super.setUp()
        shared.make {
            let tokenKeys = try TokenKeys()
            let maker = try PlayIntegrityTokenMaker()
            let directory = TestPaths.temporaryDirectory("play-integrity")
            let keys = try maker.writeKeys(to: directory)
            try (String(decoding: secret, as: UTF8.self) + "\n").write(toFile: directory + "/challenge-secret", atomically: true, encoding: .utf8)
            let environment = try GatewayEnvironment(routes: routes,
                                                     appAttestExtra: tokenKeys.section() + "\n  challenge_secret_file: \"\(directory)/challenge-secret\"",
                                                     extra: section(keys: keys))
            return (environment, tokenKeys, maker)
        }
    }

    override class func tearDown() {
        shared.tearDown { $0.environment.stop() }
        super.tearDown()
    }

    override func setUpWithError() throws { try Self.shared.check() }

    func challenge() throws -> String {
        let reply = try env.request("GET", "/play-integrity/challenge")
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.headers.values(named: "Cache-Control"), ["no-store"])
        return reply.text
    }

    func verdict(_ challenge: String, _ change: (inout PlayIntegrityVerdict) -> Void = { _ in }) -> PlayIntegrityVerdict {
        var verdict = PlayIntegrityVerdict(packageName: Self.package, nonce: challenge, certificateDigests: [Self.certificate])
        change(&verdict)
        return verdict
    }

    func exchange(_ token: String, challenge: String) throws -> Reply {
        let body = try JSONSerialization.data(withJSONObject: ["integrity_token": token, "challenge": challenge])
        return try env.request("POST", "/play-integrity/token", headers: [HTTPField("Content-Type", "application/json")], body: Array(body))
    }

    /// challenge → classic token → gateway token.
    func mintedToken() throws -> String {
        let challenge = try challenge()
        let reply = try exchange(maker.classicToken(verdict(challenge)), challenge: challenge)
        XCTAssertEqual(reply.status, 200, reply.text)
        return try XCTUnwrap(reply.json["token"] as? String)
    }

    func testClassicTokenMintsAGatewayTokenThatPassesProtectedRoutes() throws {
        let challenge = try challenge()
        XCTAssertEqual(challenge.utf8.count, 72)
        let reply = try exchange(maker.classicToken(verdict(challenge)), challenge: challenge)
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.json["expires_in"] as? Int, 600)
        XCTAssertEqual(reply.headers.values(named: "Cache-Control"), ["no-store"])
        let token = try XCTUnwrap(reply.json["token"] as? String)
        let claims = try XCTUnwrap(TokenKeys.claims(of: token))
        XCTAssertEqual(claims["amr"] as? [String], ["play_integrity"])
        XCTAssertEqual(claims["app"] as? String, Self.package)
        XCTAssertEqual(claims["device_integrity"] as? [String], ["MEETS_DEVICE_INTEGRITY"])
        XCTAssertNil(claims["env"])
        XCTAssertEqual(Base64.decode(claims["sub"] as? String ?? "")?.count, 32)

        for path in ["/tok/a", "/android-only/b"] {
            let passed = try env.request("POST", path, headers: [HTTPField("X-App-Attest-Token", token), HTTPField("X-Attest-Method", "app_attest"),
                                                                  HTTPField("X-Attest-Device-Integrity", "MEETS_STRONG_INTEGRITY")],
                                         body: [1])
            XCTAssertEqual(passed.status, 200, "\(path): \(passed.text)")
            XCTAssertEqual(passed.forwarded("X-Attest-Status"), ["verified"])
            XCTAssertEqual(passed.forwarded("X-Attest-Method"), ["play_integrity"], "set by the gateway; the client's copy is dropped")
            XCTAssertEqual(passed.forwarded("X-Attest-Key-Id"), [claims["sub"] as? String ?? ""])
            XCTAssertEqual(passed.forwarded("X-Attest-Device-Integrity"), ["MEETS_DEVICE_INTEGRITY"])
        }
        if let verified = try PythonJWS.verify(token: token, jwks: env.request("GET", "/.well-known/jwks.json").text) {
            XCTAssertEqual(verified, "valid", "an upstream verifies it with the JWK Set like an App Attest token")
        }
        let refused = try env.request("GET", "/ios-only/c", headers: [HTTPField("X-App-Attest-Token", token)])
        XCTAssertEqual(refused.status, 403, refused.text)
        XCTAssertEqual(refused.error, "token_method_refused")

        let again = try exchange(maker.classicToken(verdict(challenge)), challenge: challenge)
        XCTAssertEqual(again.status, 401, again.text)
        XCTAssertEqual(again.error, "integrity_challenge_reused", "a challenge is spent once")
    }

    func testAppAttestTokensAreRefusedWhereOnlyPlayIntegrityIsAccepted() throws {
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let token = try XCTUnwrap(try app.mintToken().json["token"] as? String)
        XCTAssertEqual(TokenKeys.claims(of: token)?["amr"] as? [String], ["app_attest"])
        let ios = try env.request("GET", "/ios-only/x", headers: [HTTPField("X-App-Attest-Token", token)])
        XCTAssertEqual(ios.status, 200, ios.text)
        XCTAssertEqual(ios.forwarded("X-Attest-Method"), ["token"])
        XCTAssertEqual(ios.forwarded("X-Attest-Device-Integrity"), [], "App Attest tokens carry no Play verdict")
        let android = try env.request("GET", "/android-only/x", headers: [HTTPField("X-App-Attest-Token", token)])
        XCTAssertEqual(android.status, 403, android.text)
        XCTAssertEqual(android.error, "token_method_refused")
    }

    func testEveryVerdictRefusalHasItsCodeAndLeavesTheChallengeUnspent() throws {
        let now = Date()
        let cases: [(String, (inout PlayIntegrityVerdict) -> Void, String, Int)] = [
            ("another nonce", { $0.nonce = String(repeating: "x", count: 72) }, "integrity_nonce_mismatch", 401),
            ("request package", { $0.requestPackageName = "com.example.other" }, "integrity_package_not_allowed", 403),
            ("app package", { $0.packageName = "com.example.repackaged" }, "integrity_package_not_allowed", 403),
            ("certificate", { $0.certificateDigests = [Base64.encodeURLSafe(SHA256.hash([9]))] }, "integrity_certificate_not_allowed", 403),
            ("too old", { $0.timestamp = now.addingTimeInterval(-400) }, "integrity_token_too_old", 401),
            ("future", { $0.timestamp = now.addingTimeInterval(120) }, "integrity_token_from_future", 401),
            ("not recognized", { $0.appRecognitionVerdict = "UNRECOGNIZED_VERSION" }, "integrity_app_not_recognized", 403),
            ("basic device", { $0.deviceRecognitionVerdict = ["MEETS_BASIC_INTEGRITY"] }, "integrity_device_not_trusted", 403),
            ("no device label", { $0.deviceRecognitionVerdict = [] }, "integrity_device_not_trusted", 403),
        ]
        let challenge = try challenge()
        for (what, change, code, status) in cases {
            let reply = try exchange(maker.classicToken(verdict(challenge, change)), challenge: challenge)
            XCTAssertEqual(reply.status, status, "\(what): \(reply.text)")
            XCTAssertEqual(reply.error, code, what)
            XCTAssertEqual(reply.headers.values(named: "X-Attest-Error"), [code], what)
        }
        for fault in IntegrityTokenFault.allCases {
            let reply = try exchange(maker.classicToken(verdict(challenge), fault: fault), challenge: challenge)
            XCTAssertEqual(reply.error, fault.expectedReason.rawValue, "\(fault): \(reply.text)")
            XCTAssertEqual(reply.status, 401, "\(fault)")
        }
        let stranger = try PlayIntegrityTokenMaker()
        XCTAssertEqual(try exchange(stranger.classicToken(verdict(challenge)), challenge: challenge).error, "integrity_token_undecryptable")
        XCTAssertEqual(try exchange("a-standard-token", challenge: challenge).error, "integrity_token_malformed",
                       "no service account: a token that is not a JWE cannot be read")
        XCTAssertEqual(try exchange(String(repeating: "A", count: IntegrityToken.maxBytes + 1), challenge: challenge).error,
                       "integrity_token_malformed")
        XCTAssertEqual(try env.request("POST", "/play-integrity/token", body: Array("{}".utf8)).error, "bad_request")
        XCTAssertEqual(try env.request("GET", "/play-integrity/token").status, 405)

        // Nothing was written for any refusal: the same challenge still mints once.
        XCTAssertEqual(try exchange(maker.classicToken(verdict(challenge)), challenge: challenge).status, 200)
        let logged = env.gateway.waitForEvent {
            $0["event"] as? String == "request" && $0["reason"] as? String == "integrity_device_not_trusted"
        }
        XCTAssertEqual(logged?["route"] as? String, "builtin:/play-integrity/token")
        XCTAssertEqual(logged?["status"] as? Int, 403)
        let series = [#"gateway_requests_total{route="builtin:/play-integrity/token",decision="denied",reason="integrity_device_not_trusted",code="4xx"} 2"#,
                      #"gateway_play_integrity_verdicts_total{result="refused",reason="integrity_device_not_trusted"} 2"#]
        let metrics = try env.metrics(showing: series)
        for line in series { XCTAssertTrue(metrics.contains(line), "\(line)\n\(metrics)") }
    }

    func testChallengesOfAnotherKindOrIssuerOrExpiredAreRefused() throws {
        let token = { (challenge: String) in try self.maker.classicToken(self.verdict(challenge)) }
        let assertChallenge = try env.request("GET", "/assert/challenge").text
        XCTAssertEqual(try exchange(token(assertChallenge), challenge: assertChallenge).error, "integrity_challenge_wrong_kind")
        let foreign = Self.craftChallenge(secret: Array(String(repeating: "o", count: 40).utf8), expiry: Date().addingTimeInterval(60))
        XCTAssertEqual(try exchange(token(foreign), challenge: foreign).error, "integrity_challenge_invalid")
        let expired = Self.craftChallenge(secret: Self.secret, expiry: Date().addingTimeInterval(-1))
        let reply = try exchange(token(expired), challenge: expired)
        XCTAssertEqual(reply.status, 401, reply.text)
        XCTAssertEqual(reply.error, "integrity_challenge_expired")
        let valid = Self.craftChallenge(secret: Self.secret, expiry: Date().addingTimeInterval(60))
        XCTAssertEqual(try exchange(token(valid), challenge: valid).status, 200, "the crafted format is the gateway's")
        XCTAssertEqual(try exchange(token("garbage"), challenge: "garbage").error, "integrity_challenge_invalid")
        // And the other way round: a Play Integrity challenge is not an assertion challenge.
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let signed = try app.signed("POST", "/tok/x", challenge: try challenge())
        XCTAssertEqual(try app.send(signed).error, "challenge_wrong_kind")
    }

    func testLimitedUseAndRevocationApplyToPlayIntegrityTokens() throws {
        let token = try mintedToken()
        let header = [HTTPField("X-App-Attest-Token", token)]
        XCTAssertEqual(try env.request("POST", "/once/buy", headers: header).status, 200)
        XCTAssertEqual(try env.request("POST", "/once/buy", headers: header).error, "token_reused")

        let subject = try XCTUnwrap(TokenKeys.claims(of: token)?["sub"] as? String)
        XCTAssertEqual(try env.request("GET", "/tok/x", headers: header).status, 200)
        let revoke = try ChildProcess(executable: TestPaths.gatewayBinary,
                                      arguments: ["keys", "revoke", subject, "--token-subject", "--config", env.gateway.configPath])
        XCTAssertEqual(revoke.waitForExit(timeout: 10), 0, revoke.lines.joined(separator: "\n"))
        let deadline = Date().addingTimeInterval(5)
        var reply = try env.request("GET", "/tok/x", headers: header)
        while reply.status == 200, Date() < deadline {
            usleep(50_000)
            reply = try env.request("GET", "/tok/x", headers: header)
        }
        XCTAssertEqual(reply.status, 403, reply.text)
        XCTAssertEqual(reply.error, "token_revoked")
        XCTAssertEqual(try env.request("GET", "/tok/x", headers: [HTTPField("X-App-Attest-Token", try mintedToken())]).status, 200,
                       "another mint has another subject")
    }

    /// Signed by the gateway's own key, so only the claims decide: an unlisted package or an unknown method is refused.
    func testPlayIntegrityClaimsAreCheckedOnEveryUse() throws {
        let now = Int(Date().timeIntervalSince1970)
        let base: [String: Any] = ["sub": Base64.encode(SHA256.hash([7])), "app": Self.package, "amr": ["play_integrity"],
                                   "device_integrity": ["MEETS_DEVICE_INTEGRITY"], "iat": now, "exp": now + 60, "jti": "claims-test"]
        let header: [String: Any] = ["alg": "ES256", "typ": "JWT", "kid": tokenKeys.currentKid]
        func use(_ claims: [String: Any]) throws -> Reply {
            try env.request("GET", "/tok/x", headers: [HTTPField("X-App-Attest-Token", try tokenKeys.sign(header: header, claims: claims, with: tokenKeys.current))])
        }
        XCTAssertEqual(try use(base).status, 200, "the claims as minted")
        var other = base
        other["app"] = "com.example.unlisted"
        XCTAssertEqual(try use(other).error, "token_invalid", "a package not in package_names")
        other = base
        other["amr"] = ["sms_otp"]
        XCTAssertEqual(try use(other).error, "token_invalid", "a method the gateway does not mint")
        other = base
        other["device_integrity"] = nil
        XCTAssertEqual(try use(other).error, "token_invalid", "a Play Integrity token without its verdict")
    }

    func testZeroSeriesExistFromStart() throws {
        let metrics = try env.admin("/metrics").text
        for line in [#"gateway_play_integrity_verdicts_total{result="minted",reason=""}"#,
                     #"gateway_play_integrity_verdicts_total{result="refused",reason="integrity_signature_invalid"}"#,
                     #"gateway_requests_total{route="builtin:/play-integrity/token",decision="denied",reason="integrity_token_undecryptable",code="4xx"}"#,
                     #"gateway_requests_total{route="builtin:/play-integrity/token",decision="denied",reason="integrity_challenge_reused",code="4xx"}"#,
                     #"gateway_requests_total{route="builtin:/play-integrity/challenge",decision="builtin",reason="",code="2xx"}"#,
                     #"gateway_requests_total{route="/android-only/",decision="denied",reason="token_method_refused",code="4xx"}"#] {
            XCTAssertTrue(metrics.contains(line), "\(line) missing")
        }
    }

    /// The challenge format written out here (version, kind 3, expiry, nonce, HMAC over a domain), so a test
    /// can make one this gateway would have issued, or one it would not.
    static func craftChallenge(secret: [UInt8], expiry: Date) -> String {
        let seconds = UInt32(expiry.timeIntervalSince1970)
        var bytes: [UInt8] = [1, 3] + (0..<4).reversed().map { UInt8(truncatingIfNeeded: seconds >> ($0 * 8)) }
        bytes += (0..<16).map { _ in UInt8.random(in: 0...255) }
        bytes += HMACSHA256(key: secret).mac(Array("app-attest-gateway challenge".utf8) + bytes)
        return Base64.encodeURLSafe(bytes)
    }
}
