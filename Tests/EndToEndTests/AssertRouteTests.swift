import AssertionCheck
import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// A device registers and calls protected routes through the real gateway binary.
final class AssertRouteTests: XCTestCase, SharedGatewayTests {
    static let shared = SharedFixture<GatewayEnvironment>()
    var env: GatewayEnvironment { Self.shared.value }

    override class func setUp() {
        super.setUp()
        shared.make { try GatewayEnvironment() }
    }

    override class func tearDown() {
        shared.tearDown { $0.stop() }
        super.tearDown()
    }

    override func setUpWithError() throws { try Self.shared.check() }

    func testRegisterThenVerifiedRequestIsForwardedWithIdentityHeaders() throws {
        let app = try env.app()
        let registration = try app.register()
        XCTAssertEqual(registration.status, 200, registration.text)
        XCTAssertEqual(registration.json["key_id"] as? String, app.device.keyIdBase64)
        XCTAssertEqual(registration.json["environment"] as? String, "development")

        let body = Array(#"{"prompt":"hello"}"#.utf8)
        let reply = try app.send(app.signed("POST", "/secure/orders", query: "draft=1&x=%20", body: body))
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.json["path"] as? String, "/echo/secure/orders")
        XCTAssertEqual(reply.json["query"] as? String, "draft=1&x=%20")
        XCTAssertEqual(reply.json["body_base64"] as? String, Base64.encode(body))
        XCTAssertEqual(reply.forwarded("X-Attest-Status"), ["verified"])
        XCTAssertEqual(reply.forwarded("X-Attest-Key-Id"), [app.device.keyIdBase64])
        XCTAssertEqual(reply.forwarded("X-Forwarded-For"), ["127.0.0.1"])
        XCTAssertEqual(reply.forwarded("X-Request-Id").count, 1)
        for stripped in ["X-App-Attest-Key-Id", "X-App-Attest-Assertion", "X-App-Attest-Client-Data"] {
            XCTAssertEqual(reply.forwarded(stripped), [], stripped)
        }
        XCTAssertEqual(reply.headers.values(named: "X-Request-Id"), reply.forwarded("X-Request-Id"))
        let logged = env.gateway.waitForEvent { $0["event"] as? String == "request" && $0["path"] as? String == "/secure/orders" }
        XCTAssertEqual(logged?["decision"] as? String, "verified")
        XCTAssertEqual(logged?["counter"] as? Int, 1)
        XCTAssertEqual(logged?["upstream_status"] as? Int, 200)

        // The key is cached now: the next assertion counts a hit.
        let hit = "gateway_key_cache_total{result=\"hit\"}"
        let hits = MetricsText.sample(hit, in: try env.admin("/metrics").text) ?? 0
        XCTAssertEqual(try app.send(app.signed("GET", "/secure/orders")).status, 200)
        let metrics = try env.metrics { (MetricsText.sample(hit, in: $0) ?? 0) >= hits + 1 }
        XCTAssertEqual(MetricsText.sample(hit, in: metrics), hits + 1, metrics)

        // A key id sent in the URL-safe alphabet, unpadded, is logged and forwarded in the one standard spelling.
        var urlSafe = try app.signed("GET", "/secure/url-safe-key-id")
        urlSafe.headers = urlSafe.headers.map { $0.hasName("X-App-Attest-Key-Id") ? HTTPField($0.name, Base64.encodeURLSafe(app.device.keyId)) : $0 }
        let urlSafeReply = try app.send(urlSafe)
        XCTAssertEqual(urlSafeReply.status, 200)
        XCTAssertEqual(urlSafeReply.forwarded("X-Attest-Key-Id"), [app.device.keyIdBase64])
        let loggedURLSafe = env.gateway.waitForEvent { $0["event"] as? String == "request" && $0["path"] as? String == "/secure/url-safe-key-id" }
        XCTAssertEqual(loggedURLSafe?["key_id"] as? String, app.device.keyIdBase64)
    }

    func testReplayedRequestIsRejected() throws {
        let app = try registeredApp()
        let request = try app.signed("POST", "/secure/pay", body: Array("1 EUR".utf8))
        XCTAssertEqual(try app.send(request).status, 200)
        let replay = try app.send(request)
        XCTAssertEqual(replay.status, 409)
        XCTAssertEqual(replay.error, "challenge_reused")
        // Same counter again with a fresh challenge: the counter rule catches it.
        let sameCounter = try app.send(app.signed("POST", "/secure/pay", body: Array("1 EUR".utf8), counter: app.device.counter))
        XCTAssertEqual(sameCounter.status, 409)
        XCTAssertEqual(sameCounter.error, "counter_not_increasing")
    }

    func testConcurrentRequestsWithTheSameCounterLetExactlyOneThrough() throws {
        let app = try registeredApp()
        let requests = try (0..<12).map { _ in try app.signed("POST", "/secure/race", body: [1], counter: 7) }
        let statuses = Mutex12()
        DispatchQueue.concurrentPerform(iterations: requests.count) { index in
            statuses.append((try? app.send(requests[index]).status) ?? -1)
        }
        XCTAssertEqual(statuses.values.filter { $0 == 200 }.count, 1, "\(statuses.values)")
        XCTAssertEqual(statuses.values.filter { $0 == 409 }.count, requests.count - 1, "\(statuses.values)")
    }

    func testRateLimitRefusesAKeyOverItsShareWithRetryAfter() throws {
        let app = try registeredApp()
        for _ in 0..<2 { XCTAssertEqual(try app.send(app.signed("GET", "/limited/feed")).status, 200) }
        let over = try app.send(app.signed("GET", "/limited/feed"))
        XCTAssertEqual(over.status, 429, over.text)
        XCTAssertEqual(over.error, "rate_limited")
        let retryAfter = over.headers.values(named: "Retry-After").first.flatMap { Int($0) }
        XCTAssertTrue((1...60).contains(retryAfter ?? 0), "Retry-After: \(String(describing: retryAfter))")
        XCTAssertEqual(over.headers.values(named: "X-Attest-Error"), ["rate_limited"])
        let other = try registeredApp()
        XCTAssertEqual(try other.send(other.signed("GET", "/limited/feed")).status, 200, "the limit is per key")
        XCTAssertEqual(try app.send(app.signed("GET", "/secure/feed")).status, 200, "and per route")
    }

    func testTamperedRequestsFailForTheirReason() throws {
        let app = try registeredApp()
        let body = Array(#"{"amount":1}"#.utf8)
        func tampered(_ change: (inout UpstreamRequest) -> Void) throws -> Reply {
            var request = try app.signed("POST", "/secure/transfer", query: "to=alice", body: body)
            change(&request)
            return try app.send(request)
        }
        let cases: [(String, (inout UpstreamRequest) -> Void)] = [
            ("body_hash_mismatch", { $0.body = Array(#"{"amount":1000}"#.utf8) }),
            ("path_mismatch", { $0.pathAndQuery = "/secure/admin?to=alice" }),
            ("query_mismatch", { $0.pathAndQuery = "/secure/transfer?to=mallory" }),
            ("method_mismatch", { $0.method = "PUT" }),
        ]
        for (reason, change) in cases {
            let reply = try tampered(change)
            XCTAssertEqual(reply.status, 401, reason)
            XCTAssertEqual(reply.error, reason)
        }
        var wrongSignature = try app.signed("POST", "/secure/transfer", body: body)
        let otherApp = try env.app()
        wrongSignature.headers[2] = HTTPField("X-App-Attest-Assertion", Base64.encode(try otherApp.device.assert(clientData: Array("x".utf8))))
        XCTAssertEqual(try app.send(wrongSignature).error, "signature_invalid")
    }

    func testMissingOrMalformedHeaders() throws {
        let missing = try env.request("POST", "/secure/x", body: [1])
        XCTAssertEqual(missing.status, 401)
        XCTAssertEqual(missing.error, "assertion_missing")
        XCTAssertEqual(missing.headers.values(named: "X-Attest-Error"), ["assertion_missing"])
        XCTAssertEqual(try env.request("GET", "/public/fine").headers.values(named: "X-Attest-Error"), [])
        let app = try registeredApp()
        var request = try app.signed("POST", "/secure/x", body: [1])
        request.headers[2] = HTTPField("X-App-Attest-Assertion", "not base64!")
        let malformed = try app.send(request)
        XCTAssertEqual(malformed.status, 400)
        XCTAssertEqual(malformed.error, "bad_header")
        request = try app.signed("POST", "/secure/x", body: [1])
        request.headers[3] = HTTPField("X-App-Attest-Client-Data", Base64.encode(Array("{}".utf8)))
        XCTAssertEqual(try app.send(request).error, "client_data_invalid")
    }

    func testUnknownAndRevokedKeys() throws {
        let stranger = try env.app()
        let unknown = try stranger.send(stranger.signed("POST", "/secure/x"))
        XCTAssertEqual(unknown.status, 401)
        XCTAssertEqual(unknown.error, "key_unknown")

        let app = try registeredApp()
        let revoke = try ChildProcess(executable: TestPaths.gatewayBinary,
                                      arguments: ["keys", "revoke", app.device.keyIdBase64, "--config", env.gateway.configPath, "--reason", "fraud"])
        XCTAssertEqual(revoke.waitForExit(timeout: 10), 0, revoke.lines.joined(separator: "\n"))
        let show = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: ["keys", "show", app.device.keyIdBase64, "--config", env.gateway.configPath])
        XCTAssertEqual(show.waitForExit(timeout: 10), 0)
        XCTAssertTrue(show.lines.joined().contains("\"revoked\":true"), show.lines.joined())
        let reply = try app.send(app.signed("POST", "/secure/x"))
        XCTAssertEqual(reply.status, 403)
        XCTAssertEqual(reply.error, "key_revoked")
    }

    func testChallengeFetchedWithAKeyIdServesOnlyThatKey() throws {
        let app = try registeredApp()
        let other = try registeredApp()
        let challenge = try other.assertChallenge()
        let foreign = try app.send(app.signed("POST", "/secure/x", challenge: challenge))
        XCTAssertEqual(foreign.status, 409)
        XCTAssertEqual(foreign.error, "challenge_invalid")
        XCTAssertEqual(try other.send(other.signed("POST", "/secure/x", challenge: challenge)).status, 200, "its own key may")
        XCTAssertEqual(try env.request("GET", "/assert/challenge?key_id=short").status, 400)
    }

    func testRegistrationRules() throws {
        let app = try registeredApp()
        let again = try app.register()
        XCTAssertEqual(again.status, 409)
        XCTAssertEqual(again.error, "key_already_registered")

        let broken = try env.app()
        let reply = try broken.register(faults: [.wrongAppID])
        XCTAssertEqual(reply.status, 401)
        XCTAssertEqual(reply.error, "app_id_mismatch")

        let reused = try env.app()
        let challenge = try reused.get("/attest/challenge").body
        let attestation = try reused.device.attest(challenge: challenge)
        XCTAssertEqual(try reused.registerRaw(attestation: attestation, challenge: challenge).status, 200)
        let second = try env.app()
        let replayedChallenge = try second.registerRaw(attestation: try second.device.attest(challenge: challenge), challenge: challenge)
        XCTAssertEqual(replayedChallenge.status, 409)
        XCTAssertEqual(replayedChallenge.error, "challenge_reused")

        let garbage = try env.request("POST", "/attest/verify", body: Array("{\"key_id\":1}".utf8))
        XCTAssertEqual(garbage.status, 400)
        XCTAssertEqual(garbage.error, "bad_request")
        XCTAssertEqual(try env.request("GET", "/attest/verify").status, 405)
    }

    func testReportModeForwardsAndMarksTheFailure() throws {
        let reply = try env.request("POST", "/report/anything", headers: [HTTPField("X-Attest-Status", "verified")], body: [1])
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.forwarded("X-Attest-Status"), ["report_failed:assertion_missing"])
        XCTAssertEqual(reply.forwarded("X-Attest-Key-Id"), [])
        let logged = env.gateway.waitForEvent { $0["path"] as? String == "/report/anything" }
        XCTAssertEqual(logged?["decision"] as? String, "report_failed")
        XCTAssertEqual(logged?["reason"] as? String, "assertion_missing")

        let app = try registeredApp()
        let verified = try app.send(app.signed("POST", "/report/ok", body: [2]))
        XCTAssertEqual(verified.forwarded("X-Attest-Status"), ["verified"])
    }

    func testForgedGatewayHeadersAreStripped() throws {
        let forged = [HTTPField("X-Attest-Status", "verified"), HTTPField("x-attest-key-id", "forged"),
                      HTTPField("X-Attest-Risk-Metric", "0"), HTTPField("X-Forwarded-For", "10.0.0.1")]
        let reply = try env.request("GET", "/public/page", headers: forged)
        XCTAssertEqual(reply.status, 200)
        XCTAssertEqual(reply.forwarded("X-Attest-Status"), ["unverified"])
        XCTAssertEqual(reply.forwarded("X-Attest-Key-Id"), [])
        XCTAssertEqual(reply.forwarded("X-Attest-Risk-Metric"), [])
        XCTAssertEqual(reply.forwarded("X-Forwarded-For"), ["10.0.0.1, 127.0.0.1"])

        let app = try registeredApp()
        let verified = try app.send(app.signed("GET", "/secure/me", extraHeaders: forged))
        XCTAssertEqual(verified.forwarded("X-Attest-Key-Id"), [app.device.keyIdBase64])
        XCTAssertEqual(verified.forwarded("X-Attest-Status"), ["verified"])
    }

    func testHopByHopHeadersAreNotForwarded() throws {
        let reply = try env.request("GET", "/public/hop", headers: [
            HTTPField("Connection", "keep-alive, X-Secret-Hop"), HTTPField("X-Secret-Hop", "1"), HTTPField("Keep-Alive", "timeout=5"),
            HTTPField("Proxy-Authorization", "Basic eA=="), HTTPField("TE", "trailers"), HTTPField("X-Kept", "yes"),
        ])
        for name in ["Connection", "X-Secret-Hop", "Keep-Alive", "Proxy-Authorization", "TE"] {
            XCTAssertEqual(reply.forwarded(name), [], name)
        }
        XCTAssertEqual(reply.forwarded("X-Kept"), ["yes"])
    }

    func testRoutingDenyMethodsAndNotFound() throws {
        let closed = try env.request("GET", "/closed/door")
        XCTAssertEqual(closed.status, 403)
        XCTAssertEqual(closed.error, "route_denied")
        // /v1/ai/ only takes POST: a GET must not fall through to the "/" pass route.
        let wrongMethod = try env.request("GET", "/v1/ai/generate")
        XCTAssertEqual(wrongMethod.status, 405)
        XCTAssertEqual(wrongMethod.headers.values(named: "Allow"), ["POST"])
        XCTAssertEqual(try env.request("GET", "/a/%2e%2e/secure/x").error, "bad_path")
    }

    func testOversizedBodyIsRefused() throws {
        let reply = try env.request("POST", "/secure/upload", body: [UInt8](repeating: 7, count: 10_000))
        XCTAssertEqual(reply.status, 413)
    }

    func testUpstreamDownAndSlow() throws {
        let down = try env.request("GET", "/down/x")
        XCTAssertEqual(down.status, 502)
        XCTAssertEqual(down.error, "upstream_unavailable")
        let slow = try env.request("GET", "/slow?ms=4000")
        XCTAssertEqual(slow.status, 504)
        XCTAssertEqual(slow.error, "upstream_timeout")
    }

    func testStreamingResponseArrivesIncrementally() throws {
        let app = try registeredApp()
        let started = Date()
        let response = try env.client.send(try app.signed("POST", "/v1/ai/stream", query: "events=4&interval_ms=250", body: Array("{}".utf8)))
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.headers.values(named: "Content-Type").first?.hasPrefix("text/event-stream"), true)
        var arrivals: [TimeInterval] = []
        var text = ""
        while let chunk = try response.readBody() {
            arrivals.append(Date().timeIntervalSince(started))
            text += String(decoding: chunk, as: UTF8.self)
        }
        XCTAssertTrue(text.contains("[DONE]"), text)
        XCTAssertGreaterThan(arrivals.count, 2)
        XCTAssertLessThan(arrivals.first!, arrivals.last! - 0.5, "first bytes must arrive well before the stream ends: \(arrivals)")
    }

    func testBodySignedRouteAndCounterWindow() throws {
        let app = try registeredApp()
        let body = Array(#"{"claim":"promo"}"#.utf8)
        let assertion = try app.device.assert(clientData: body)
        let request = UpstreamRequest(method: "POST", pathAndQuery: "/body-signed/claim", headers: [
            HTTPField("Host", "gateway.test"), HTTPField("X-App-Attest-Key-Id", app.device.keyIdBase64),
            HTTPField("X-App-Assertion", Base64.encode(assertion)),
        ], body: body)
        XCTAssertEqual(try app.send(request).status, 200)
        XCTAssertEqual(try app.send(request).error, "counter_not_increasing")

        // Window 8: counters 20 then 18 (late, unseen) pass; 18 again and 5 (too old) do not.
        let window = try registeredApp()
        XCTAssertEqual(try window.send(window.signed("POST", "/window/a", counter: 20)).status, 200)
        XCTAssertEqual(try window.send(window.signed("POST", "/window/b", counter: 18)).status, 200)
        XCTAssertEqual(try window.send(window.signed("POST", "/window/c", counter: 18)).error, "counter_not_increasing")
        XCTAssertEqual(try window.send(window.signed("POST", "/window/d", counter: 5)).error, "counter_not_increasing")
    }

    func testAdminEndpoints() throws {
        XCTAssertEqual(try env.admin("/healthz").status, 200)
        XCTAssertEqual(try env.admin("/readyz").status, 200)
        // The class shares one gateway: other tests' requests are counted too, so the change is what is checked.
        let passed = "gateway_requests_total{route=\"/\",decision=\"pass\",reason=\"\",code=\"2xx\"}"
        let before = MetricsText.sample(passed, in: try env.admin("/metrics").text) ?? 0
        XCTAssertEqual(try env.request("GET", "/public/metrics-probe").status, 200)
        let metrics = try env.metrics { (MetricsText.sample(passed, in: $0) ?? 0) >= before + 1 }
        XCTAssertGreaterThanOrEqual(MetricsText.sample(passed, in: metrics) ?? 0, before + 1, metrics)
        XCTAssertTrue(metrics.contains("gateway_request_duration_seconds_bucket"))
        XCTAssertEqual(try env.request("GET", "/healthz").forwarded("X-Attest-Status"), ["unverified"], "admin paths are not on the public port")
    }

    func testClientRequestIdIsKeptWhenValid() throws {
        let reply = try env.request("GET", "/public/id", headers: [HTTPField("X-Request-Id", "abc-123")])
        XCTAssertEqual(reply.forwarded("X-Request-Id"), ["abc-123"])
        let invalid = try env.request("GET", "/public/id", headers: [HTTPField("X-Request-Id", "bad id with spaces")])
        XCTAssertNotEqual(invalid.forwarded("X-Request-Id"), ["bad id with spaces"])
    }
}

/// Statuses collected from concurrent requests (the name other tests of this target use).
typealias Mutex12 = Gathered<Int>
