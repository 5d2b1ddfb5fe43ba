import AssertionCheck
import Foundation
import TestSupport
import Upstream
import XCTest

/// Failure and lifecycle behaviour, each test with a gateway of its own.
final class OperationsTests: XCTestCase {
    func testRedisDownFailsAssertRoutesButPassRoutesKeepWorking() throws {
        let env = try GatewayEnvironment()
        defer { env.stop() }
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let request = try app.signed("POST", "/secure/x", body: [1])
        let reportRequest = try app.signed("POST", "/report/x", body: [1])
        env.redis.stop()

        let started = Date()
        let denied = try app.send(request)
        XCTAssertEqual(denied.status, 503)
        XCTAssertEqual(denied.error, "store_unavailable")
        XCTAssertLessThan(Date().timeIntervalSince(started), 3, "a dead Redis must fail fast, not hang")
        XCTAssertEqual(try env.request("GET", "/public/still-up").status, 200)
        XCTAssertEqual(try env.request("GET", "/attest/challenge").status, 200, "issuing a challenge needs no Redis")
        XCTAssertEqual(try env.admin("/readyz").status, 503)
        XCTAssertEqual(try env.admin("/healthz").status, 200)
        // Report mode still forwards, marked with the reason.
        XCTAssertEqual(try app.send(reportRequest).forwarded("X-Attest-Status"),
                       ["report_failed:store_unavailable"])
    }

    func testExpiredChallengeIsRejected() throws {
        let env = try GatewayEnvironment(challengeTTL: 1)
        defer { env.stop() }
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let challenge = try app.assertChallenge()
        Thread.sleep(forTimeInterval: 2.1)
        let reply = try app.send(app.signed("POST", "/secure/late", challenge: challenge))
        XCTAssertEqual(reply.status, 409)
        XCTAssertEqual(reply.error, "challenge_expired")

        let attestChallenge = try app.get("/attest/challenge").body
        Thread.sleep(forTimeInterval: 2.1)
        let other = try env.app()
        let late = try other.registerRaw(attestation: try other.device.attest(challenge: attestChallenge), challenge: attestChallenge)
        XCTAssertEqual(late.error, "challenge_expired")
    }

    func testSighupReloadsAndABadFileKeepsTheRunningConfig() throws {
        let env = try GatewayEnvironment()
        defer { env.stop() }
        XCTAssertEqual(try env.request("GET", "/public/page").status, 200)

        try env.reload(routes: """
              - { path_prefix: "/public/", policy: deny }
              - { path_prefix: "/", upstream: echo, policy: pass }
        """)
        XCTAssertNotNil(env.gateway.waitForEvent { $0["event"] as? String == "config_reloaded" })
        XCTAssertEqual(try env.request("GET", "/public/page").status, 403)

        try env.gateway.reload("routes: [ { path_prefix: \"/\", policy: asert } ]\n")
        let failure = env.gateway.waitForEvent { $0["event"] as? String == "config_reload_failed" }
        XCTAssertNotNil(failure)
        XCTAssertTrue("\(failure?["errors"] ?? "")".contains("policy"), "\(failure ?? [:])")
        XCTAssertEqual(try env.request("GET", "/public/page").status, 403, "the previous config stays in force")
        XCTAssertEqual(try env.request("GET", "/other").status, 200)
    }

    func testSigtermDrainsInFlightRequestsAndExitsZero() throws {
        // Slow enough to be still running while the test sees the drain on a loaded machine.
        let env = try GatewayEnvironment(routes: """
              - { path: "/slow", upstream: api, policy: pass, first_byte_timeout_ms: 20000, timeout_ms: 0 }
        """)
        defer { env.stop() }
        let slow = DispatchQueue.global()
        let group = DispatchGroup()
        let status = Mutex12()
        group.enter()
        slow.async {
            status.append((try? env.request("GET", "/slow?ms=3000").status) ?? -1)
            group.leave()
        }
        XCTAssertTrue(try env.waitForInFlightRequests(atLeast: 1), "the slow request reached the gateway")
        env.gateway.process.signal(SIGTERM)
        // The admin listener answers until the drain ends: /readyz turns 503 once the signal is handled.
        var readiness = try env.admin("/readyz")
        let deadline = Date().addingTimeInterval(5)
        while readiness.status != 503, Date() < deadline {
            usleep(20_000)
            readiness = try env.admin("/readyz")
        }
        XCTAssertEqual(readiness.status, 503, "not ready while draining")
        XCTAssertEqual(readiness.error, "draining")
        XCTAssertEqual(group.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(status.values, [200], "the request in flight finishes")
        XCTAssertEqual(env.gateway.process.waitForExit(timeout: 5), 0)
        XCTAssertNotNil(env.gateway.waitForEvent { $0["event"] as? String == "stopped" })
    }

    func testRequestsTheServerRefusesItselfAreLoggedAndCounted() throws {
        let env = try GatewayEnvironment()
        defer { env.stop() }
        let raw = try RawHTTPClient(port: env.gateway.port)
        try raw.send("POST /public/x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n")
        XCTAssertEqual(try raw.readResponse(method: "POST").status, 501)
        let logged = env.gateway.waitForEvent { $0["decision"] as? String == "rejected" }
        XCTAssertEqual(logged?["reason"] as? String, "unsupported_transfer_encoding")
        XCTAssertEqual(logged?["path"] as? String, "/public/x")
        let rejected = "decision=\"rejected\",reason=\"unsupported_transfer_encoding\",code=\"5xx\"} 1"
        XCTAssertTrue(try env.metrics(showing: [rejected]).contains(rejected))
    }

    func testMetricsCountOpenConnectionsAndRequestsInFlight() throws {
        // The slow request stays in flight for seconds, so the scrape that sees it need not race it.
        let env = try GatewayEnvironment(routes: """
              - { path: "/slow", upstream: api, policy: pass, first_byte_timeout_ms: 20000, timeout_ms: 0 }
              - { path_prefix: "/", upstream: echo, policy: pass }
        """)
        defer { env.stop() }
        let idle = try RawHTTPClient(port: env.gateway.port)
        try idle.send("GET /public/x HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try idle.readResponse().status, 200)  // kept alive, now idle
        let slow = try RawHTTPClient(port: env.gateway.port, timeoutSeconds: 10)
        try slow.send("GET /slow?ms=3000 HTTP/1.1\r\nHost: t\r\n\r\n")
        let text = try env.metrics(showing: ["gateway_open_connections 2\n", "gateway_in_flight_requests 1\n"])
        XCTAssertTrue(text.contains("gateway_open_connections 2\n"), text)
        XCTAssertTrue(text.contains("gateway_in_flight_requests 1\n"), text)
        XCTAssertEqual(try slow.readResponse().status, 200)
        XCTAssertTrue(try env.metrics(showing: ["gateway_in_flight_requests 0\n"]).contains("gateway_in_flight_requests 0\n"))
    }

    func testReloadRaisesARouteBodyLimitWithoutRestart() throws {
        let env = try GatewayEnvironment(routes: """
              - { path_prefix: "/", upstream: echo, policy: pass, max_body_bytes: 1000 }
        """)
        defer { env.stop() }
        let body = [UInt8](repeating: 7, count: 300_000)
        XCTAssertEqual(try env.request("POST", "/upload", body: body).status, 413)
        try env.reload(routes: """
              - { path_prefix: "/", upstream: echo, policy: pass, max_body_bytes: 2097152 }
        """)
        XCTAssertNotNil(env.gateway.waitForEvent { $0["event"] as? String == "config_reloaded" })
        XCTAssertEqual(try env.request("POST", "/upload", body: body).status, 200)
    }

    func testInvalidConfigRefusesToStartAndCheckConfigExplains() throws {
        let directory = TestPaths.temporaryDirectory("badconfig")
        let path = directory + "/gateway.yaml"
        try """
        listen: "127.0.0.1:1"
        app_attest: { apps: ["nodot"], environments: [staging] }
        upstreams: { api: { url: "ftp://x" } }
        routes:
          - { path_prefix: "/", upstream: missing, policy: pass }
        """.write(toFile: path, atomically: true, encoding: .utf8)
        let check = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: ["check-config", path])
        XCTAssertEqual(check.waitForExit(timeout: 10), 1)
        let output = check.lines.joined(separator: "\n")
        for fragment in ["app_attest.apps[0]", "app_attest.environments[0]", "upstreams.api.url", "routes[0].upstream"] {
            XCTAssertTrue(output.contains(fragment), "\(fragment) missing from:\n\(output)")
        }
        let serve = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: ["serve", "--config", path])
        XCTAssertEqual(serve.waitForExit(timeout: 10), 1)
        XCTAssertTrue(serve.lines.joined().contains("\"event\":\"config_invalid\""), serve.lines.joined())
    }

    func testDemoPlaysEveryCaseAgainstARunningGateway() throws {
        let env = try GatewayEnvironment()
        defer { env.stop() }
        // The story is the app's: AppAttestClient driven by a simulated iPhone (`make demo`).
        let demo = try ChildProcess(executable: TestPaths.products + "/app-demo", arguments: [
            "--gateway", env.gateway.baseURL, "--ca", env.directory + "/ca", "--config", env.gateway.configPath,
            "--log", env.directory + "/no-log-file",
        ])
        XCTAssertEqual(demo.waitForExit(timeout: 30), 0, demo.lines.joined(separator: "\n"))
        let output = demo.lines.joined(separator: "\n")
        for expected in ["← 200", "challenge_reused", "body_hash_mismatch", "assertion_missing", "Every step answered as expected."] {
            XCTAssertTrue(output.contains(expected), "\(expected) missing from:\n\(output)")
        }
    }

    func testTestTrustAnchorIsAnnouncedLoudly() throws {
        let env = try GatewayEnvironment()
        defer { env.stop() }
        let warning = env.gateway.waitForEvent { $0["event"] as? String == "trust_anchor_not_apple" }
        XCTAssertEqual(warning?["level"] as? String, "warn")
    }
}

/// Configuration edges found by reading the code against the docs.
final class ConfigurationEdgeTests: XCTestCase {
    func testRegistrationIsNotLimitedByTheCatchAllRoutesBodyLimit() throws {
        let env = try GatewayEnvironment(routes: """
              - { path_prefix: "/secure/", upstream: echo, policy: assert, max_body_bytes: 64 }
              - { path_prefix: "/", upstream: echo, policy: pass, max_body_bytes: 16 }
        """)
        defer { env.stop() }
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        XCTAssertEqual(try env.request("POST", "/big", body: [UInt8](repeating: 1, count: 17)).status, 413)
    }

    func testUpstreamSeesTheStandardSpellingOfTheKeyId() throws {
        let env = try GatewayEnvironment()
        defer { env.stop() }
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        var request = try app.signed("GET", "/secure/me")
        request.headers[1] = HTTPField("X-App-Attest-Key-Id", Base64.encodeURLSafe(app.device.keyId))
        let reply = try app.send(request)
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.forwarded("X-Attest-Key-Id"), [app.device.keyIdBase64])
    }

    func testDroppingAnEnvironmentLocksOutItsKeysAtOnce() throws {
        let env = try GatewayEnvironment()
        defer { env.stop() }
        let app = try env.app(environment: .development)
        XCTAssertEqual(try app.register().status, 200)
        XCTAssertEqual(try app.send(app.signed("GET", "/secure/me")).status, 200)
        let productionOnly = GatewayEnvironment.config(port: env.gateway.port, admin: env.gateway.adminPort, redis: env.redisSection,
                                                       upstreamURL: env.upstream.baseURL, directory: env.directory,
                                                       routes: GatewayEnvironment.defaultRoutes, challengeTTL: 300)
            .replacingOccurrences(of: "environments: [development, production]", with: "environments: [production]")
        try env.gateway.reload(productionOnly)
        XCTAssertNotNil(env.gateway.waitForEvent { $0["event"] as? String == "config_reloaded" })
        let reply = try app.send(app.signed("GET", "/secure/me"))
        XCTAssertEqual(reply.status, 401)
        XCTAssertEqual(reply.error, "environment_mismatch")
    }
}
