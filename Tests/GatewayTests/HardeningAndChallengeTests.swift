import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation
@testable import Gateway
import TestSupport
import Upstream
import XCTest

/// Stateless challenges, their rate limit, the path and header hardening and case-insensitive routes,
/// piece by piece (the end-to-end tests run them through the binary).
final class HardeningAndChallengeTests: XCTestCase {
    private let secret = Array("0123456789abcdef0123456789abcdef".utf8)
    private let otherSecret = Array("fedcba9876543210fedcba9876543210".utf8)
    private var codec: ChallengeCodec { ChallengeCodec(secrets: ChallengeSecrets([secret])) }
    private let keyId = [UInt8](repeating: 7, count: 32)

    private func rejection(_ body: () throws(GatewayError) -> ChallengeUse) -> String? {
        do {
            _ = try body()
            return nil
        } catch {
            return error.reasonCode
        }
    }

    // MARK: - Challenges

    func testChallengeIsShortASCIIAndChecksOut() throws {
        let now = Date()
        let challenge = codec.issue(.assert, ttlSeconds: 300, now: now)
        XCTAssertEqual(challenge.utf8.count, 72)
        XCTAssertTrue(challenge.utf8.allSatisfy { $0.isASCIIBase64URL })
        XCTAssertNotEqual(challenge, codec.issue(.assert, ttlSeconds: 300, now: now))
        let use = try codec.check(challenge, kind: .assert, keyId: nil, now: now)
        XCTAssertEqual(use.id.utf8.count, 22, "base64url of the 16 random bytes")
        XCTAssertTrue((300_000...305_000).contains(use.ttlMs), "the remaining lifetime (plus the clock allowance): \(use.ttlMs)")
        XCTAssertFalse(ChallengeCodec.isBound(challenge))
        XCTAssertEqual(try codec.check(Base64.encode(Array(challenge.utf8)), kind: .assert, keyId: nil, now: now).id, use.id,
                       "base64 of the challenge's bytes is the same challenge")
    }

    func testForgedExpiredAndWrongKindChallengesHaveTheirOwnReasons() throws {
        let now = Date()
        let challenge = codec.issue(.assert, ttlSeconds: 60, now: now)
        var bytes = Base64.decode(challenge)!
        bytes[bytes.count - 1] ^= 1
        let forged = Base64.encodeURLSafe(bytes)
        XCTAssertEqual(rejection { () throws(GatewayError) in try codec.check(forged, kind: .assert, keyId: nil, now: now) }, "challenge_invalid")
        XCTAssertEqual(rejection { () throws(GatewayError) in try codec.check(challenge, kind: .assert, keyId: nil, now: now + 61) }, "challenge_expired")
        XCTAssertEqual(rejection { () throws(GatewayError) in try codec.check(challenge, kind: .attest, keyId: nil, now: now) }, "challenge_wrong_kind")
        let attest = codec.issue(.attest, ttlSeconds: 60, now: now)
        XCTAssertEqual(rejection { () throws(GatewayError) in try codec.check(attest, kind: .assert, keyId: nil, now: now) }, "challenge_wrong_kind")
        // The kind byte is MAC'd: relabelling an attestation challenge makes it a forgery.
        var relabelled = Base64.decode(attest)!
        relabelled[1] = ChallengeKind.assert.rawValue
        XCTAssertEqual(rejection { () throws(GatewayError) in try codec.check(Base64.encodeURLSafe(relabelled), kind: .assert, keyId: nil, now: now) },
                       "challenge_invalid")
        for garbage in ["", "x", String(repeating: "A", count: 72), String(repeating: "A", count: 4000), "é" + String(challenge.dropFirst())] {
            XCTAssertEqual(rejection { () throws(GatewayError) in try codec.check(garbage, kind: .assert, keyId: nil, now: now) }, "challenge_invalid")
        }
        let otherGateway = ChallengeCodec(secrets: ChallengeSecrets([otherSecret]))
        XCTAssertEqual(rejection { () throws(GatewayError) in try otherGateway.check(challenge, kind: .assert, keyId: nil, now: now) }, "challenge_invalid")
    }

    func testChallengeIssuedForAKeyIdServesThatKeyOnly() throws {
        let challenge = codec.issue(.assert, keyId: keyId, ttlSeconds: 60)
        XCTAssertTrue(ChallengeCodec.isBound(challenge))
        XCTAssertNoThrow(try codec.check(challenge, kind: .assert, keyId: keyId))
        XCTAssertEqual(rejection { () throws(GatewayError) in try codec.check(challenge, kind: .assert, keyId: [UInt8](repeating: 8, count: 32)) },
                       "challenge_invalid")
        XCTAssertEqual(rejection { () throws(GatewayError) in try codec.check(challenge, kind: .assert, keyId: nil) }, "challenge_invalid")
    }

    /// Rotation: [old, new] accepts both while signing with the old; [new, old] signs with the new.
    func testPreviousSecretIsAcceptedDuringRotation() throws {
        let old = codec.issue(.attest, ttlSeconds: 60)
        let rotated = ChallengeCodec(secrets: ChallengeSecrets([otherSecret, secret]))
        XCTAssertNoThrow(try rotated.check(old, kind: .attest, keyId: nil))
        let new = rotated.issue(.attest, ttlSeconds: 60)
        XCTAssertNoThrow(try ChallengeCodec(secrets: ChallengeSecrets([secret, otherSecret])).check(new, kind: .attest, keyId: nil))
        XCTAssertEqual(rejection { () throws(GatewayError) in try codec.check(new, kind: .attest, keyId: nil) }, "challenge_invalid")
        XCTAssertEqual("\(ChallengeSecrets([secret]))", "ChallengeSecrets(<redacted>)")
    }

    func testSecretFileIsValidatedByCheckConfig() throws {
        let directory = TestPaths.temporaryDirectory("secret")
        func config(_ content: String?) -> String {
            let path = directory + "/secret-\(UUID().uuidString)"
            if let content { _ = FileManager.default.createFile(atPath: path, contents: Data(content.utf8)) }
            return """
                app_attest: { apps: ["ABCDE12345.com.example.app"], challenge_secret_file: "\(path)" }
                upstreams: { api: { url: "http://127.0.0.1:9000" } }
                routes: [{ path_prefix: "/", upstream: api, policy: pass }]
                """
        }
        let good = try GatewayConfig.parse(yaml: config(String(repeating: "s", count: 32) + "\n" + String(repeating: "p", count: 40) + "\n"))
        XCTAssertEqual(good.appAttest.challengeSecrets?.all.count, 2)
        for (content, expected) in [(nil, "cannot read"), ("short\n", "shorter than 32 bytes"), ("", "found 0 lines"),
                                    ((0..<3).map { _ in String(repeating: "s", count: 32) }.joined(separator: "\n"), "found 3 lines")] {
            do {
                _ = try GatewayConfig.parse(yaml: config(content))
                XCTFail("\(String(describing: content)) accepted")
            } catch {
                XCTAssertEqual(error.issues.count, 1)
                XCTAssertTrue(error.issues[0].description.hasPrefix("app_attest.challenge_secret_file:"), error.description)
                XCTAssertTrue(error.description.contains(expected), error.description)
                XCTAssertFalse(error.description.contains("sssssss"), "never quotes the secret")
            }
        }
    }

    func testChallengeRateLimitCountsPerAddressInAlignedWindows() {
        let limiter = ChallengeRateLimiter(limit: RateLimit(requests: 2, perSeconds: 10))
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        XCTAssertNil(limiter.admit("10.0.0.1", now: start))
        XCTAssertNil(limiter.admit("10.0.0.1", now: start + 1))
        XCTAssertEqual(limiter.admit("10.0.0.1", now: start + 2.5), 8, "until the window ends")
        XCTAssertNil(limiter.admit("10.0.0.2", now: start + 3), "per address")
        XCTAssertNil(limiter.admit("10.0.0.1", now: start + 10), "a new window")
    }

    func testChallengeRateLimitConfig() throws {
        let config = try GatewayConfig.parse(yaml: """
            app_attest: { apps: ["ABCDE12345.com.example.app"], challenge_rate_limit: { requests: 20, per_seconds: 60 } }
            upstreams: { api: { url: "http://127.0.0.1:9000" } }
            routes: [{ path_prefix: "/", upstream: api, policy: pass }]
            """)
        XCTAssertEqual(config.appAttest.challengeRateLimit, RateLimit(requests: 20, perSeconds: 60))
        XCTAssertNil(config.appAttest.challengeSecretFile)
    }

    // MARK: - Paths, headers, routes

    func testSemicolonsAreFoundRawAndEncoded() {
        for path in ["/v1/ai;/x", "/admin-only%3b/secret", "/a%3B", "/;"] {
            XCTAssertTrue(PathDecoding.hasPathParameters(PathDecoding.decode(path)!), path)
        }
        XCTAssertFalse(PathDecoding.hasPathParameters(PathDecoding.decode("/v1/ai/x")!))
    }

    func testSegmentsEndingInADotOrSpaceAreFoundAndRefusedUnlessAllowed() {
        for path in ["/deny./x", "/deny%20/x", "/deny%2E/x", "/file.", "/a/b%20", "/a./"] {
            XCTAssertTrue(PathDecoding.hasSegmentEndingInDotOrSpace(PathDecoding.decode(path)!), path)
            XCTAssertNil(RequestHardening().routablePath(path), path)
        }
        for path in ["/", "/a.b/c", "/v1/x/", "/.well-known/x", "/a%20b", "/a/.b"] {
            XCTAssertFalse(PathDecoding.hasSegmentEndingInDotOrSpace(PathDecoding.decode(path)!), path)
            XCTAssertNotNil(RequestHardening().routablePath(path), path)
        }
        var relaxed = RequestHardening()
        relaxed.allowTrailingDotOrSpace = true
        XCTAssertEqual(relaxed.routablePath("/deny./x"), "/deny./x")
        XCTAssertNil(relaxed.routablePath("/deny/../x"), "dot segments stay refused")
    }

    func testHardeningKeysDefaultToStrict() throws {
        let strict = try GatewayConfig.parse(yaml: """
            app_attest: { apps: ["ABCDE12345.com.example.app"] }
            upstreams: { api: { url: "http://127.0.0.1:9000" } }
            routes: [{ path_prefix: "/", upstream: api, policy: pass }]
            """)
        XCTAssertEqual(strict.hardening, RequestHardening())
        XCTAssertFalse(strict.routes[0].caseInsensitive)
        let relaxed = try GatewayConfig.parse(yaml: """
            app_attest: { apps: ["ABCDE12345.com.example.app"] }
            server: { allow_path_parameters: true, forward_underscore_headers: true, case_insensitive_routes: true, allow_trailing_dot_or_space: true }
            upstreams: { api: { url: "http://127.0.0.1:9000" } }
            routes: [{ path_prefix: "/", upstream: api, policy: pass }, { path: "/x", upstream: api, policy: pass, case_insensitive: false }]
            """)
        XCTAssertTrue(relaxed.hardening.allowPathParameters && relaxed.hardening.forwardUnderscoreHeaders && relaxed.hardening.allowTrailingDotOrSpace)
        XCTAssertEqual(relaxed.routes.map(\.caseInsensitive), [true, false], "a route overrides the server default")
        do {
            _ = try GatewayConfig.parse(yaml: """
                app_attest: { apps: ["ABCDE12345.com.example.app"] }
                server: { allow_path_parameters: "yes" }
                upstreams: { api: { url: "http://127.0.0.1:9000" } }
                routes:
                  - { path_prefix: "/v1/ai/", upstream: api, policy: assert, case_insensitive: true }
                  - { path_prefix: "/V1/AI/", upstream: api, policy: pass, case_insensitive: true }
                """)
            XCTFail("accepted")
        } catch {
            XCTAssertEqual(error.issues.map { $0.description.prefix { $0 != ":" } }, ["server.allow_path_parameters", "routes[1].path_prefix"],
                           error.description)
        }
    }

    func testUnderscoreHeadersAreDroppedAndNeverForgeGatewayHeaders() {
        let incoming = [HTTPField("X_Attest_Status", "verified"), HTTPField("X_Attest_Key_Id", "victim"),
                        HTTPField("x_app_attest_key_id", "victim"), HTTPField("X_Forwarded_For", "10.0.0.9"),
                        HTTPField("X_Custom_Flag", "1"), HTTPField("X-Kept", "yes"), HTTPField("X-App-Attest-Anything", "x")]
        XCTAssertEqual(ForwardingRules.requestHeaders(incoming).map(\.name), ["X-Kept"])
        XCTAssertEqual(ForwardingRules.requestHeaders(incoming, forwardUnderscores: true).map(\.name), ["X_Custom_Flag", "X-Kept"],
                       "opting in forwards only names that would be forwarded with dashes")
    }

    func testCaseInsensitiveRoutesMatchCaseVariants() {
        let ai = RouteConfig(match: .prefix("/v1/ai/"), upstream: "api", policy: .assert, caseInsensitive: true, index: 0)
        let health = RouteConfig(match: .exact("/Health"), upstream: "api", policy: .pass, caseInsensitive: true, index: 1)
        let exactCase = RouteConfig(match: .exact("/HEALTH"), upstream: "api", policy: .deny, index: 2)
        let root = RouteConfig(match: .prefix("/"), upstream: "api", policy: .pass, index: 3)
        let router = Router(routes: [root, ai, health, exactCase])
        for path in ["/v1/ai/x", "/V1/AI/x", "/v1/Ai/generate", "/v1/aı/x"] {
            XCTAssertEqual(router.match(method: "POST", path: path), .route(ai), path)
        }
        XCTAssertEqual(router.match(method: "GET", path: "/health"), .route(health))
        XCTAssertEqual(router.match(method: "GET", path: "/HEALTH"), .route(exactCase), "a case-sensitive exact route is more specific")
        XCTAssertEqual(router.match(method: "GET", path: "/v1/other"), .route(root))
        XCTAssertEqual(Router(routes: [root, RouteConfig(match: .prefix("/v1/ai/"), upstream: "api", policy: .assert, index: 0)])
            .match(method: "POST", path: "/V1/AI/x"), .route(root), "case-sensitive by default")
    }

    /// The docs' tables name every key, reason code and metric these features added.
    func testDocsNameEveryNewKeyCodeAndMetric() throws {
        let docs = TestPaths.repository + "/docs/"
        let configuration = try String(contentsOfFile: docs + "configuration.md", encoding: .utf8)
        for key in ["challenge_secret_file", "challenge_rate_limit", "allow_path_parameters", "forward_underscore_headers",
                    "case_insensitive_routes", "`case_insensitive`"] {
            XCTAssertTrue(configuration.contains(key), "docs/configuration.md lacks \(key)")
        }
        let operations = try String(contentsOfFile: docs + "operations.md", encoding: .utf8)
        let client = try String(contentsOfFile: docs + "client.md", encoding: .utf8)
        let errors: [GatewayError] = [.challengeInvalid, .challengeExpired, .challengeWrongKind, .challengeReused,
                                      .challengeRateLimited(retryAfterSeconds: 1)]
        for code in errors.map(\.reasonCode) + ["gateway_key_recoveries_total", "aag:challenge-secret"] {
            XCTAssertTrue(operations.contains("`\(code)`"), "docs/operations.md lacks \(code)")
        }
        for code in errors.map(\.reasonCode) {
            XCTAssertTrue(client.contains("`\(code)`"), "docs/client.md lacks \(code)")
        }
    }
}

private extension UInt8 {
    var isASCIIBase64URL: Bool {
        (self >= 0x30 && self <= 0x39) || (self >= 0x41 && self <= 0x5A) || (self >= 0x61 && self <= 0x7A) || self == 0x2D || self == 0x5F
    }
}
