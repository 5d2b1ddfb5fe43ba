import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation
@testable import Gateway
import TestSupport
import XCTest

/// `app_attest.token` and the routes' `accept` / `token_use`: values, defaults, refusals, and the docs.
final class TokenConfigTests: XCTestCase {
    /// A folder with two P-256 keys (key.pem, old.pem) and an RSA one (rsa.pem), made by the openssl CLI.
    static let shared = SharedFixture<String>()
    static var directory: String { shared.value }

    override class func setUp() {
        super.setUp()
        shared.make {
            let directory = TestPaths.temporaryDirectory("token-config")
            let keys = ["key", "old"].map { ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "\(directory)/\($0).pem"] }
            for arguments in keys + [["genpkey", "-algorithm", "RSA", "-out", "\(directory)/rsa.pem"]] {
                let made = try Command.run("openssl", arguments, timeout: 30)
                guard made.status == 0 else { throw TestSupportError("openssl \(arguments.joined(separator: " ")) failed: \(made.output)") }
            }
            return directory
        }
    }

    override func setUpWithError() throws { try Self.shared.check() }

    private func yaml(token: String?, routes: String = #"- { path_prefix: "/", upstream: api, policy: assert, accept: [assertion, token] }"#) -> String {
        """
        app_attest:
          apps: ["ABCDE12345.com.example.app"]
        \(token.map { "  token:\n" + $0.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n") } ?? "")
        upstreams: { api: { url: "http://127.0.0.1:9000" } }
        routes:
          \(routes)
        """
    }

    private func issues(_ text: String) -> [String] {
        do {
            _ = try GatewayConfig.parse(yaml: text, baseDirectory: Self.directory)
            XCTFail("expected the configuration to be refused")
            return []
        } catch {
            return error.issues.map(\.description)
        }
    }

    func testTokenSectionValuesAndDefaults() throws {
        let config = try GatewayConfig.parse(yaml: yaml(token: "signing_key_file: key.pem"), baseDirectory: Self.directory)
        let token = try XCTUnwrap(config.appAttest.token)
        XCTAssertEqual(token.signingKey.file, Self.directory + "/key.pem")
        XCTAssertEqual([token.ttlSeconds, token.revocationMaxLagSeconds, token.clockSkewSeconds], [600, 5, 5])
        XCTAssertNil(token.previousKey)
        XCTAssertNil(token.rateLimit)
        XCTAssertEqual(token.signingKey.kid.utf8.count, 43, "base64url of a SHA-256 thumbprint")
        XCTAssertEqual(config.routes[0].accept, [.assertion, .token])
        XCTAssertEqual(config.routes[0].tokenUse, .reusable)

        let full = try GatewayConfig.parse(yaml: yaml(token: """
            signing_key_file: key.pem
            previous_signing_key_file: old.pem
            ttl_seconds: 86400
            revocation_max_lag_seconds: 30
            clock_skew_seconds: 0
            rate_limit: { requests: 10, per_seconds: 3600 }
            """, routes: #"- { path_prefix: "/", upstream: api, policy: assert, accept: [token], token_use: limited }"#),
                                           baseDirectory: Self.directory)
        let rotated = try XCTUnwrap(full.appAttest.token)
        XCTAssertEqual([rotated.ttlSeconds, rotated.revocationMaxLagSeconds, rotated.clockSkewSeconds], [86400, 30, 0])
        XCTAssertNotEqual(rotated.previousKey?.kid, rotated.signingKey.kid)
        XCTAssertEqual(rotated.rateLimit, RateLimit(requests: 10, perSeconds: 3600))
        XCTAssertEqual(full.routes[0].accept, [.token])
        XCTAssertEqual(full.routes[0].tokenUse, .limited)

        let plain = try GatewayConfig.parse(yaml: yaml(token: nil, routes: #"- { path_prefix: "/", upstream: api, policy: assert }"#))
        XCTAssertNil(plain.appAttest.token)
        XCTAssertEqual(plain.routes[0].accept, [.assertion], "the default")
    }

    func testRefusals() {
        let key = "signing_key_file: key.pem"
        let cases: [(String, String)] = [
            (yaml(token: nil), "accepts tokens, which need an app_attest.token section"),
            (yaml(token: "ttl_seconds: 60"), "app_attest.token.signing_key_file: required key is missing"),
            (yaml(token: "signing_key_file: missing.pem"), "cannot read"),
            (yaml(token: "signing_key_file: rsa.pem"), "is not a P-256 private key"),
            (yaml(token: key + "\nprevious_signing_key_file: key.pem"), "is the same key as signing_key_file"),
            (yaml(token: key + "\nttl_seconds: 86401"), "app_attest.token.ttl_seconds: expected an integer in 1...86400"),
            (yaml(token: key + "\nrevocation_max_lag_seconds: 0"), "revocation_max_lag_seconds: expected an integer in 1...300"),
            (yaml(token: key + "\nttl: 60"), "app_attest.token.ttl: unknown key"),
            (yaml(token: key, routes: #"- { path_prefix: "/", upstream: api, policy: assert, accept: [] }"#), "must list assertion, token or both"),
            (yaml(token: key, routes: #"- { path_prefix: "/", upstream: api, policy: assert, accept: [token, token] }"#), "token is listed twice"),
            (yaml(token: key, routes: #"- { path_prefix: "/", upstream: api, policy: assert, accept: [jwt] }"#), "expected one of assertion, token"),
            (yaml(token: key, routes: #"- { path_prefix: "/", upstream: api, policy: pass, accept: [token] }"#), "only valid with policy assert"),
            (yaml(token: key, routes: #"- { path_prefix: "/", upstream: api, policy: assert, token_use: limited }"#),
             "only valid on routes whose accept lists token"),
            (yaml(token: key, routes: #"- { path_prefix: "/", upstream: api, policy: assert, accept: [token], token_use: once }"#),
             "expected one of reusable, limited"),
        ]
        for (text, expected) in cases {
            let found = issues(text)
            XCTAssertTrue(found.contains { $0.contains(expected) }, "\(expected) not in \(found)")
        }
    }

    /// With a token section, the minting endpoint and the JWK Set have their zero series: a mint is an
    /// assertion check (json client data) and a signature, so an alert on failed mints has a series from start.
    func testTokenEndpointsHaveZeroSeriesOnlyWhenTokensAreOn() throws {
        func series(_ token: String?) throws -> Set<KnownSeries.Request> {
            let route = #"- { path_prefix: "/", upstream: api, policy: assert\#(token == nil ? "" : ", accept: [assertion, token]") }"#
            return Set(KnownSeries(config: try GatewayConfig.parse(yaml: yaml(token: token, routes: route), baseDirectory: Self.directory)).requests)
        }
        let mint = "builtin:/assert/token"
        let plain = try series("signing_key_file: key.pem")
        for (decision, reason, code) in [("builtin", "", "2xx"), ("denied", "signature_invalid", "4xx"), ("denied", "challenge_expired", "4xx"),
                                         ("denied", "store_unavailable", "5xx"), ("denied", "token_signing_failed", "5xx"),
                                         ("denied", "method_not_allowed", "4xx"), ("denied", "body_too_large", "4xx")] {
            XCTAssertTrue(plain.contains(KnownSeries.Request(route: mint, decision: decision, reason: reason, code: code)), "\(decision) \(reason)")
        }
        XCTAssertTrue(plain.contains(KnownSeries.Request(route: "builtin:/.well-known/jwks.json", decision: "builtin", reason: "", code: "2xx")))
        XCTAssertFalse(plain.contains { $0.route == mint && $0.reason == "rate_limited" }, "no token rate limit configured")
        XCTAssertFalse(plain.contains { $0.route == "/" && $0.reason == "token_signing_failed" }, "routes never sign")
        XCTAssertFalse(plain.contains { $0.route == mint && ["token_expired", "debug_token_invalid"].contains($0.reason) },
                       "a mint takes an assertion, never a token")
        XCTAssertTrue(plain.contains(KnownSeries.Request(route: "/", decision: "denied", reason: "token_expired", code: "4xx")))
        let limited = try series("signing_key_file: key.pem\nrate_limit: { requests: 10, per_seconds: 60 }")
        XCTAssertTrue(limited.contains(KnownSeries.Request(route: mint, decision: "denied", reason: "rate_limited", code: "4xx")))
        XCTAssertFalse(try series(nil).contains { $0.route.hasPrefix("builtin:/assert/token") || $0.route.hasSuffix("jwks.json") })
    }

    /// The docs' tables name every key, reason code, metric and event of tokens.
    func testDocsNameEveryTokenKeyAndCode() throws {
        let docs = TestPaths.repository + "/docs/"
        let configuration = try String(contentsOfFile: docs + "configuration.md", encoding: .utf8)
        for key in ["signing_key_file", "previous_signing_key_file", "ttl_seconds", "revocation_max_lag_seconds", "clock_skew_seconds",
                    "`accept`", "`token_use`"] {
            XCTAssertTrue(configuration.contains(key), "docs/configuration.md lacks \(key)")
        }
        let operations = try String(contentsOfFile: docs + "operations.md", encoding: .utf8)
        for name in ["token_expired", "token_invalid", "token_revoked", "token_reused", "token_signing_failed", "gateway_attest_requests_total",
                     "gateway_tokens_minted_total", "attest_method", "token_revocations_current", "token_revocations_lost", "aag:revoked-keys"] {
            XCTAssertTrue(operations.contains("`\(name)"), "docs/operations.md lacks \(name)")
        }
        let errors: [GatewayError] = [.tokenExpired, .tokenInvalid(""), .tokenRevoked, .tokenReused, .tokenSigningFailed("")]
        for error in errors {
            XCTAssertTrue(operations.contains("| `\(error.reasonCode)` | \(error.status) |"), "docs/operations.md: \(error.reasonCode) row with its status")
        }
        for page in ["client.md", "security.md"] {
            let text = try String(contentsOfFile: docs + page, encoding: .utf8)
            XCTAssertTrue(text.contains("X-App-Attest-Token") && text.contains("/assert/token"), "docs/\(page) lacks tokens")
        }
    }
}
