import AssertionCheck
import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// Gateway tokens through the real binary: minted for a signed request, accepted on token routes without
/// Redis, refused when expired, forged, revoked (on every gateway sharing the Redis) or reused.
final class TokenRouteTests: XCTestCase, SharedGatewayTests {
    static let shared = SharedFixture<(keys: TokenKeys, environment: GatewayEnvironment)>()
    static var keys: TokenKeys { shared.value.keys }
    var env: GatewayEnvironment { Self.shared.value.environment }

    static let routes = """
          - { path_prefix: "/tok/", upstream: echo, policy: assert, accept: [assertion, token] }
          - { path_prefix: "/tok-only/", upstream: echo, policy: assert, accept: [token] }
          - { path_prefix: "/once/", upstream: echo, policy: assert, accept: [assertion, token], token_use: limited }
          - { path_prefix: "/tok-limited/", upstream: echo, policy: assert, accept: [token], rate_limit: { requests: 2, per_seconds: 60 } }
          - { path_prefix: "/secure/", upstream: echo, policy: assert }
          - { path_prefix: "/", upstream: echo, policy: pass }
    """

    override class func setUp() {
        super.setUp()
        shared.make {
            let keys = try TokenKeys()
            return (keys, try GatewayEnvironment(routes: routes, appAttestExtra: keys.section()))
        }
    }

    override class func tearDown() {
        shared.tearDown { $0.environment.stop() }
        super.tearDown()
    }

    override func setUpWithError() throws { try Self.shared.check() }

    func testMintedTokenIsAcceptedOnTokenRoutesAndRefusedOnAssertionOnlyRoutes() throws {
        let app = try registeredApp()
        let minted = try app.mintToken()
        XCTAssertEqual(minted.status, 200, minted.text)
        XCTAssertEqual(minted.json["expires_in"] as? Int, 600)
        XCTAssertEqual(minted.headers.values(named: "Cache-Control"), ["no-store"])
        let token = try XCTUnwrap(minted.json["token"] as? String)
        let claims = try XCTUnwrap(TokenKeys.claims(of: token))
        XCTAssertEqual(claims["sub"] as? String, app.device.keyIdBase64)
        XCTAssertEqual(claims["app"] as? String, GatewayEnvironment.app.description)
        XCTAssertEqual(claims["env"] as? String, "development")
        XCTAssertEqual((claims["exp"] as? Int).map { $0 - (claims["iat"] as? Int ?? 0) }, 600)
        XCTAssertEqual((claims["jti"] as? String)?.isEmpty, false)
        XCTAssertEqual(TokenKeys.header(of: token)?["kid"] as? String, Self.keys.currentKid)

        for path in ["/tok/a", "/tok/b", "/tok-only/c"] {
            let reply = try env.request("POST", path, headers: [HTTPField("X-App-Attest-Token", token),
                                                                HTTPField("X-Attest-Method", "forged")], body: [1])
            XCTAssertEqual(reply.status, 200, "\(path): \(reply.text)")
            XCTAssertEqual(reply.forwarded("X-Attest-Status"), ["verified"])
            XCTAssertEqual(reply.forwarded("X-Attest-Key-Id"), [app.device.keyIdBase64])
            XCTAssertEqual(reply.forwarded("X-Attest-Method"), ["token"], "the client's copy is dropped")
            XCTAssertEqual(reply.forwarded("X-App-Attest-Token"), [], "the token is not forwarded")
        }
        let assertion = try app.send(app.signed("POST", "/tok/signed", body: [2]))
        XCTAssertEqual(assertion.status, 200, assertion.text)
        XCTAssertEqual(assertion.forwarded("X-Attest-Method"), ["assertion"])

        let refused = try env.request("POST", "/secure/x", headers: [HTTPField("X-App-Attest-Token", token)])
        XCTAssertEqual(refused.status, 401, refused.text)
        XCTAssertEqual(refused.error, "assertion_missing")
        XCTAssertTrue(refused.json["message"].map { "\($0)" }?.contains("X-App-Attest-Token") ?? false, refused.text)
        XCTAssertEqual(try env.request("GET", "/tok-only/x").error, "assertion_missing")

        let logged = env.gateway.waitForEvent { $0["event"] as? String == "request" && $0["path"] as? String == "/tok-only/c" }
        XCTAssertEqual(logged?["attest_method"] as? String, "token")
        XCTAssertEqual(logged?["decision"] as? String, "verified")
        let verified = #"gateway_attest_requests_total{route="/tok-only/",attest_method="token",decision="verified",reason=""} 1"#
        let metrics = try env.metrics(showing: [verified])
        XCTAssertTrue(metrics.contains(verified), metrics)
        XCTAssertTrue(metrics.contains(#"attest_method="assertion",decision="verified""#), metrics)
    }

    func testMintingIsASignedRequest() throws {
        let app = try registeredApp()
        let request = try app.signed("POST", "/assert/token")
        XCTAssertEqual(try app.send(request).status, 200)
        XCTAssertEqual(try app.send(request).error, "challenge_reused", "a mint request is single-use like any other")
        XCTAssertEqual(try env.request("POST", "/assert/token").error, "assertion_missing")
        XCTAssertEqual(try env.request("GET", "/assert/token").status, 405)
        let tampered = try app.signed("POST", "/assert/token", body: [1])
        XCTAssertEqual(try app.send(UpstreamRequest(method: "POST", pathAndQuery: "/assert/token", headers: tampered.headers, body: [2])).error,
                       "body_hash_mismatch")
    }

    func testTamperedAndForeignTokensAreInvalid() throws {
        let app = try registeredApp()
        let token = try XCTUnwrap(try app.mintToken().json["token"] as? String)
        let parts = token.split(separator: ".").map(String.init)
        var claims = try XCTUnwrap(TokenKeys.claims(of: token))
        claims["exp"] = (claims["exp"] as? Int ?? 0) + 86_400
        let stretched = parts[0] + "." + TokenKeys.encode(claims) + "." + parts[2]
        let other = try registeredApp()
        claims["sub"] = other.device.keyIdBase64
        let otherKey = parts[0] + "." + TokenKeys.encode(claims) + "." + parts[2]
        let header = try XCTUnwrap(TokenKeys.header(of: token))
        let cases: [(String, String)] = [
            ("payload changed", stretched),
            ("subject changed", otherKey),
            ("signed by another key, our kid", try Self.keys.sign(header: header, claims: claims, with: Self.keys.stranger)),
            ("signed by another key, its kid", try Self.keys.sign(header: ["alg": "ES256", "kid": "someone-else"], claims: claims, with: Self.keys.stranger)),
            ("alg none", TokenKeys.encode(["alg": "none", "kid": Self.keys.currentKid]) + "." + parts[1] + "."),
            ("garbage", "not.a.token"),
            ("two parts", parts[0] + "." + parts[1]),
        ] + Self.otherSpellings(of: token)
        for (what, forged) in cases {
            let reply = try env.request("GET", "/tok/x", headers: [HTTPField("X-App-Attest-Token", forged)])
            XCTAssertEqual(reply.status, 401, "\(what): \(reply.text)")
            XCTAssertEqual(reply.error, "token_invalid", what)
        }
        XCTAssertEqual(try env.request("GET", "/tok/x", headers: [HTTPField("X-App-Attest-Token", token)]).status, 200,
                       "the original still works")
        let twice = try env.request("GET", "/tok/x", headers: [HTTPField("X-App-Attest-Token", token), HTTPField("X-App-Attest-Token", token)])
        XCTAssertEqual(twice.error, "bad_header")
        // The environment is shared by this class's tests: at least these.
        let denied = #"gateway_attest_requests_total{route="/tok/",attest_method="token",decision="denied",reason="token_invalid"}"#
        let metrics = try env.metrics { (MetricsText.sample(denied, in: $0) ?? 0) >= Double(cases.count) }
        XCTAssertGreaterThanOrEqual(MetricsText.sample(denied, in: metrics) ?? 0, Double(cases.count), metrics)
    }

    /// The same token spelled otherwise: each verifies as a signature over the same claims, and each is refused,
    /// so nothing keyed on a token's text (an upstream's replay list, a cache) meets one token under two names.
    private static func otherSpellings(of token: String) -> [(String, String)] {
        let parts = token.split(separator: ".").map(String.init)
        let signature = Base64.decode(parts[2])!
        let standard = token.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        let headerPadding = String(repeating: "=", count: (4 - parts[0].count % 4) % 4)
        return [
            ("high-S signature (n - s)", parts[0] + "." + parts[1] + "." + Base64.encodeURLSafe(ECDSASignature.flippedS(signature))),
            ("padded signature", token + "=="),
            ("a space inside", parts[0] + ". " + parts[1] + "." + parts[2]),
        ] + (headerPadding.isEmpty ? [] : [("padded header", parts[0] + headerPadding + "." + parts[1] + "." + parts[2])])
            + (standard == token ? [] : [("standard alphabet", standard)])
    }

    func testPreviousKeyIsStillAcceptedDuringRotation() throws {
        let app = try registeredApp()
        let now = Int(Date().timeIntervalSince1970)
        let claims: [String: Any] = ["sub": app.device.keyIdBase64, "app": GatewayEnvironment.app.description, "env": "development",
                                     "iat": now, "exp": now + 60, "jti": "rotation-test"]
        let old = try Self.keys.sign(header: ["alg": "ES256", "typ": "JWT", "kid": Self.keys.previousKid], claims: claims, with: Self.keys.previous)
        let reply = try env.request("GET", "/tok/rotated", headers: [HTTPField("X-App-Attest-Token", old)])
        XCTAssertEqual(reply.status, 200, reply.text)
        var foreignApp = claims
        foreignApp["app"] = "TEAMID1234.com.example.other"
        let other = try Self.keys.sign(header: ["alg": "ES256", "kid": Self.keys.currentKid], claims: foreignApp, with: Self.keys.current)
        XCTAssertEqual(try env.request("GET", "/tok/x", headers: [HTTPField("X-App-Attest-Token", other)]).error, "token_invalid",
                       "an app that is not configured")
    }

    func testLimitedUseTokenIsAcceptedOnceThereAndRateLimitsCountTokens() throws {
        let app = try registeredApp()
        let token = try XCTUnwrap(try app.mintToken().json["token"] as? String)
        let header = [HTTPField("X-App-Attest-Token", token)]
        XCTAssertEqual(try env.request("POST", "/once/buy", headers: header).status, 200)
        let again = try env.request("POST", "/once/buy", headers: header)
        XCTAssertEqual(again.status, 409, again.text)
        XCTAssertEqual(again.error, "token_reused")
        XCTAssertEqual(try env.request("POST", "/once/other", headers: header).error, "token_reused")
        XCTAssertEqual(try env.request("POST", "/tok/still", headers: header).status, 200, "reusable routes still take it")
        let fresh = try XCTUnwrap(try app.mintToken().json["token"] as? String)
        XCTAssertEqual(try env.request("POST", "/once/buy", headers: [HTTPField("X-App-Attest-Token", fresh)]).status, 200)

        for _ in 0..<2 { XCTAssertEqual(try env.request("GET", "/tok-limited/x", headers: header).status, 200) }
        let limited = try env.request("GET", "/tok-limited/x", headers: header)
        XCTAssertEqual(limited.status, 429, limited.text)
        XCTAssertNotNil(limited.headers.values(named: "Retry-After").first)
    }

    func testRevokedKeyTokensAreRefusedAndCannotMint() throws {
        let app = try registeredApp()
        let token = try XCTUnwrap(try app.mintToken().json["token"] as? String)
        XCTAssertEqual(try env.request("GET", "/tok/x", headers: [HTTPField("X-App-Attest-Token", token)]).status, 200)
        try Self.revoke(app, config: env.gateway.configPath)
        let refused = try waitForRefusal(token, on: env.gateway.port, within: 5)
        XCTAssertEqual(refused?.status, 403)
        XCTAssertEqual(refused?.error, "token_revoked")
        XCTAssertEqual(try app.mintToken().error, "key_revoked")
    }

    func testJWKSVerifiesAMintedTokenWithAnIndependentVerifier() throws {
        let jwks = try env.request("GET", "/.well-known/jwks.json")
        XCTAssertEqual(jwks.status, 200)
        XCTAssertEqual(jwks.headers.values(named: "Content-Type"), ["application/jwk-set+json"])
        let keys = try XCTUnwrap(jwks.json["keys"] as? [[String: Any]])
        XCTAssertEqual(keys.compactMap { $0["kid"] as? String }, [Self.keys.currentKid, Self.keys.previousKid])
        XCTAssertTrue(keys.allSatisfy { $0["d"] == nil }, "public keys only")
        let token = try XCTUnwrap(try registeredApp().mintToken().json["token"] as? String)
        let verified = try PythonJWS.verify(token: token, jwks: jwks.text)
        guard let verified else {
            throw Prerequisite.missing("Python's cryptography package is not installed and could not be (pip install cryptography)")
        }
        XCTAssertEqual(verified, "valid")
        let parts = token.split(separator: ".").map(String.init)
        var claims = try XCTUnwrap(TokenKeys.claims(of: token))
        claims["env"] = "production"
        XCTAssertEqual(try PythonJWS.verify(token: parts[0] + "." + TokenKeys.encode(claims) + "." + parts[2], jwks: jwks.text), "invalid")
    }

    /// A token signed here with the gateway's key, for the claims' times (seconds from now).
    private func token(for app: AppClient, issuedIn iat: Int, expiringIn exp: Int) throws -> String {
        let now = Int(Date().timeIntervalSince1970)
        let claims: [String: Any] = ["sub": app.device.keyIdBase64, "app": GatewayEnvironment.app.description, "env": "development",
                                     "iat": now + iat, "exp": now + exp, "jti": UUID().uuidString]
        return try Self.keys.sign(header: ["alg": "ES256", "typ": "JWT", "kid": Self.keys.currentKid], claims: claims, with: Self.keys.current)
    }

    /// `clock_skew_seconds: 5` (this class's gateway): a token expired a second ago or issued two seconds ahead (another
    /// gateway's clock) still passes; one expired half a minute ago, or issued a minute ahead, does not.
    func testTheClockSkewAllowanceAppliesToExpiryAndIssueTime() throws {
        let app = try registeredApp()
        let use = { (token: String) in try self.env.request("GET", "/tok/skew", headers: [HTTPField("X-App-Attest-Token", token)]) }
        XCTAssertEqual(try use(token(for: app, issuedIn: -60, expiringIn: -1)).status, 200, "expired within the skew")
        XCTAssertEqual(try use(token(for: app, issuedIn: 2, expiringIn: 600)).status, 200, "issued ahead within the skew")
        let expired = try use(token(for: app, issuedIn: -90, expiringIn: -30))
        XCTAssertEqual(expired.status, 401, expired.text)
        XCTAssertEqual(expired.error, "token_expired")
        let future = try use(token(for: app, issuedIn: 60, expiringIn: 600))
        XCTAssertEqual(future.status, 401, future.text)
        XCTAssertEqual(future.error, "token_invalid", "the same claims as the one issued 2 s ahead, but for iat")
    }

    /// The token is a bearer credential: neither its mint nor its use puts it (or its signature) in a log line.
    func testTheGatewayTokenIsNeverLogged() throws {
        let app = try registeredApp()
        let minted = try app.mintToken()
        let token = try XCTUnwrap(minted.json["token"] as? String)
        let used = try env.request("GET", "/tok/logged", headers: [HTTPField("X-App-Attest-Token", token)])
        XCTAssertEqual(used.status, 200, used.text)
        let requestId = try XCTUnwrap(used.headers.values(named: "X-Request-Id").first)
        XCTAssertNotNil(env.gateway.waitForEvent { $0["request_id"] as? String == requestId }, "the use was logged")
        let signature = try XCTUnwrap(token.split(separator: ".").last)
        for line in env.gateway.process.lines {
            XCTAssertFalse(line.contains(signature), "the token's signature in a log line: \(line)")
        }
    }

    func testExpiredTokenIsRefused() throws {
        let short = try GatewayEnvironment(routes: Self.routes, appAttestExtra: Self.keys.section(ttl: 1, skew: 0))
        defer { short.stop() }
        let app = try registeredApp(short)
        let minted = try app.mintToken()
        XCTAssertEqual(minted.json["expires_in"] as? Int, 1)
        let token = try XCTUnwrap(minted.json["token"] as? String)
        let claims = try XCTUnwrap(TokenKeys.claims(of: token))
        let expiry = Double(claims["exp"] as? Int ?? 0)
        while Date().timeIntervalSince1970 < expiry + 0.2 { usleep(100_000) }
        let reply = try short.request("GET", "/tok/x", headers: [HTTPField("X-App-Attest-Token", token)])
        XCTAssertEqual(reply.status, 401, reply.text)
        XCTAssertEqual(reply.error, "token_expired")
    }

    /// Two gateways on one Redis: the revocation made through the CLI reaches the one that did not mint, within
    /// the lag; a gateway started afterwards refuses the token from its first request (the set is loaded at start).
    func testRevocationReachesAnotherGatewayWithinTheLag() throws {
        let shared = try GatewayEnvironment(routes: Self.routes, appAttestExtra: Self.keys.section())
        defer { shared.stop() }
        let peer = try shared.anotherGateway()
        defer { peer.stop() }
        let app = try registeredApp(shared)
        let token = try XCTUnwrap(try app.mintToken().json["token"] as? String)
        XCTAssertNotNil(peer.waitForEvent { $0["event"] as? String == "token_revocations_current" })
        XCTAssertEqual(try Self.request(port: peer.port, token: token).status, 200)
        let revokedAt = Date()
        try Self.revoke(app, config: shared.gateway.configPath)
        let refused = try waitForRefusal(token, on: peer.port, within: 5)
        XCTAssertEqual(refused?.error, "token_revoked")
        XCTAssertLessThanOrEqual(Date().timeIntervalSince(revokedAt), 5)

        let late = try shared.anotherGateway()
        defer { late.stop() }
        XCTAssertEqual(try Self.request(port: late.port, token: token).error, "token_revoked")
    }

    /// Redis frozen: the subscription's pings go unanswered, so after the lag tokens fail closed; they work
    /// again once Redis answers and the set is reloaded.
    func testTokensFailClosedWhenRevocationsAreNotCurrent() throws {
        let frozen = try GatewayEnvironment(routes: Self.routes, appAttestExtra: Self.keys.section(lag: 1))
        defer { frozen.stop() }
        let app = try registeredApp(frozen)
        let token = try XCTUnwrap(try app.mintToken().json["token"] as? String)
        XCTAssertEqual(try Self.request(port: frozen.gateway.port, token: token).status, 200)
        frozen.redis.pause()
        usleep(2_000_000)
        let stale = try Self.request(port: frozen.gateway.port, token: token)
        frozen.redis.resume()
        XCTAssertEqual(stale.status, 503, stale.text)
        XCTAssertEqual(stale.error, "store_unavailable")
        XCTAssertNotNil(frozen.gateway.waitForEvent { $0["event"] as? String == "token_revocations_lost" })
        XCTAssertNotNil(frozen.gateway.waitForEvent(timeout: 10) {
            $0["event"] as? String == "token_revocations_current" && $0["resubscribed"] as? Bool == true
        })
        XCTAssertEqual(try Self.request(port: frozen.gateway.port, token: token).status, 200)
    }

    /// A revocation whose message nobody heard (written to the set only) is picked up when the subscription
    /// reconnects, since the set is reloaded then.
    func testRevocationSetIsReloadedAfterTheSubscriptionReconnects() throws {
        let app = try registeredApp()
        let token = try XCTUnwrap(try app.mintToken().json["token"] as? String)
        XCTAssertEqual(try Self.request(port: env.gateway.port, token: token).status, 200)
        let member = Base64.encodeURLSafe(app.device.keyId)
        try redisCLI(["ZADD", "aag:revoked-keys", String(Int(Date().timeIntervalSince1970)), member])
        XCTAssertEqual(try Self.request(port: env.gateway.port, token: token).status, 200, "not announced: not known yet")
        try redisCLI(["CLIENT", "KILL", "TYPE", "pubsub"])
        XCTAssertEqual(try waitForRefusal(token, on: env.gateway.port, within: 5)?.error, "token_revoked")
    }

    func redisCLI(_ arguments: [String]) throws {
        let cli = try ChildProcess(executable: "/usr/bin/env", arguments: ["redis-cli", "-p", String(env.redis.port)] + arguments)
        XCTAssertEqual(cli.waitForExit(timeout: 10), 0, cli.lines.joined(separator: "\n"))
    }

    static func revoke(_ app: AppClient, config: String) throws {
        let revoke = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: ["keys", "revoke", app.device.keyIdBase64, "--config", config])
        XCTAssertEqual(revoke.waitForExit(timeout: 10), 0, revoke.lines.joined(separator: "\n"))
    }

    static func request(port: Int, token: String) throws -> Reply {
        let client = UpstreamClient(target: try UpstreamTarget(baseURL: "http://127.0.0.1:\(port)", connectTimeoutMs: 1000, timeoutMs: 5000))
        return try Reply(client.send(UpstreamRequest(method: "GET", pathAndQuery: "/tok/x",
                                                     headers: [HTTPField("Host", "gateway.test"), HTTPField("X-App-Attest-Token", token)])))
    }

    /// Polls until the token is refused; nil if it was still accepted after `seconds`.
    func waitForRefusal(_ token: String, on port: Int, within seconds: TimeInterval) throws -> Reply? {
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            let reply = try Self.request(port: port, token: token)
            if reply.status != 200 { return reply }
            usleep(50_000)
        } while Date() < deadline
        return nil
    }
}

extension AppClient {
    /// POST /assert/token, signed like any assert request.
    func mintToken() throws -> Reply { try send(signed("POST", "/assert/token")) }
}

/// The gateway's signing keys (current, previous) and a stranger's, as PEM files made by the openssl CLI.
final class TokenKeys: @unchecked Sendable {
    let directory = TestPaths.temporaryDirectory("token-keys")
    let current: P256PrivateKey
    let previous: P256PrivateKey
    let stranger: P256PrivateKey
    let currentKid: String
    let previousKid: String

    init() throws {
        current = try Self.make(directory + "/current.pem")
        previous = try Self.make(directory + "/previous.pem")
        stranger = try Self.make(directory + "/stranger.pem")
        currentKid = Self.thumbprint(current.publicKey)
        previousKid = Self.thumbprint(previous.publicKey)
    }

    /// The `token:` section under `app_attest:`.
    func section(ttl: Int = 600, skew: Int = 5, lag: Int = 5) -> String {
        """
          token:
            signing_key_file: "\(directory)/current.pem"
            previous_signing_key_file: "\(directory)/previous.pem"
            ttl_seconds: \(ttl)
            clock_skew_seconds: \(skew)
            revocation_max_lag_seconds: \(lag)
        """
    }

    func sign(header: [String: Any], claims: [String: Any], with key: P256PrivateKey) throws -> String {
        let input = Self.encode(header) + "." + Self.encode(claims)
        return input + "." + Base64.encodeURLSafe(try key.es256Signature(for: Array(input.utf8)))
    }

    static func encode(_ object: [String: Any]) -> String {
        Base64.encodeURLSafe(Array(try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])))
    }

    static func header(of token: String) -> [String: Any]? { part(0, of: token) }
    static func claims(of token: String) -> [String: Any]? { part(1, of: token) }

    private static func part(_ index: Int, of token: String) -> [String: Any]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let bytes = Base64.decode(parts[index]) else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }

    /// RFC 7638, computed here independently of the gateway's code.
    static func thumbprint(_ key: P256PublicKey) -> String {
        let x = Base64.encodeURLSafe(Array(key.point[1..<33]))
        let y = Base64.encodeURLSafe(Array(key.point[33...]))
        return Base64.encodeURLSafe(SHA256.hash(Array(#"{"crv":"P-256","kty":"EC","x":"\#(x)","y":"\#(y)"}"#.utf8)))
    }

    private static func make(_ path: String) throws -> P256PrivateKey {
        let openssl = try ChildProcess(executable: "/usr/bin/env",
                                       arguments: ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
        guard openssl.waitForExit(timeout: 10) == 0 else { throw TestSupportError("openssl genpkey failed: \(openssl.lines)") }
        return try P256PrivateKey(pem: String(contentsOfFile: path, encoding: .utf8))
    }
}

/// Verifies a token against a JWK Set with Python's `cryptography` package: nothing of the gateway's code.
enum PythonJWS {
    static let script = """
    import base64, hashlib, json, sys
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
    except ImportError:
        print("missing"); sys.exit(0)
    def b64(text): return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    jwks, token = json.loads(sys.argv[1]), sys.argv[2]
    head, body, signature = token.split(".")
    kid = json.loads(b64(head))["kid"]
    jwk = next(key for key in jwks["keys"] if key["kid"] == kid)
    members = {name: jwk[name] for name in ("crv", "kty", "x", "y")}
    thumbprint = base64.urlsafe_b64encode(hashlib.sha256(json.dumps(members, separators=(",", ":"), sort_keys=True).encode()).digest())
    assert thumbprint.rstrip(b"=").decode() == kid, "kid is not the key's RFC 7638 thumbprint"
    point = ec.EllipticCurvePublicNumbers(int.from_bytes(b64(jwk["x"]), "big"), int.from_bytes(b64(jwk["y"]), "big"), ec.SECP256R1())
    raw = b64(signature)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        point.public_key().verify(der, (head + "." + body).encode(), ec.ECDSA(hashes.SHA256()))
        print("valid")
    except InvalidSignature:
        print("invalid")
    """

    /// "valid" or "invalid"; nil when `cryptography` is not importable.
    static func verify(token: String, jwks: String) throws -> String? {
        let python = try ChildProcess(executable: "/usr/bin/env", arguments: ["python3", "-c", script, jwks, token])
        XCTAssertEqual(python.waitForExit(timeout: 20), 0, python.lines.joined(separator: "\n"))
        usleep(50_000)
        let answer = python.lines.last ?? ""
        return answer == "missing" ? nil : answer
    }
}
