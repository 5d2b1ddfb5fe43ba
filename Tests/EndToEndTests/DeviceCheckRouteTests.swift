import AssertionCheck
import Foundation
import TestSupport
import Upstream
import XCTest

/// DeviceCheck on routes, against a fake Apple server that checks the gateway's JWTs and keeps the bits.
final class DeviceCheckRouteTests: XCTestCase {
    static let shared = SharedFixture<(environment: GatewayEnvironment, apple: FakeAppleServer)>()
    var env: GatewayEnvironment { Self.shared.value.environment }
    var apple: FakeAppleServer { Self.shared.value.apple }

    static let routes = """
          - { path_prefix: "/fallback/", upstream: echo, policy: assert, fallback: devicecheck, deny_if_bits: { bit1: true } }
          - { path_prefix: "/promo/", methods: [POST], upstream: echo, policy: assert, fallback: devicecheck, once_per_device: bit0 }
          - { path_prefix: "/status/", methods: [GET], upstream: api, policy: assert, fallback: devicecheck, once_per_device: bit0 }
          - { path_prefix: "/risky/", upstream: echo, policy: assert, max_risk_metric: 5, risk_action: deny }
          - { path_prefix: "/risk-report/", upstream: echo, policy: assert, max_risk_metric: 5 }
          - { path_prefix: "/claim-open/", upstream: echo, policy: assert, once_per_device: bit0, apple_unreachable: open }
          - { path_prefix: "/claim-closed/", upstream: echo, policy: assert, once_per_device: bit0 }
          - { path_prefix: "/slow", methods: [GET], upstream: api, policy: assert, once_per_device: bit0, first_byte_timeout_ms: 20000, timeout_ms: 0 }
          - { path_prefix: "/", upstream: echo, policy: pass }
    """

    override class func setUp() {
        super.setUp()
        shared.make { try GatewayEnvironment.withFakeApple(routes: routes, appleExtra: "\n  timeout_ms: 1000") }
    }

    override class func tearDown() {
        shared.tearDown {
            $0.environment.stop()
            $0.apple.stop()
        }
        super.tearDown()
    }

    override func setUpWithError() throws { try Self.shared.check() }

    /// A fresh token of one device (the fake keeps bits per device, tokens differ per call).
    func token(_ device: String) -> String { Base64.encode(Array("\(device):\(UUID().uuidString)".utf8)) }

    func testFallbackPassesAValidTokenOnceAndMarksIt() throws {
        let token = token("phone-fallback")
        let reply = try env.request("GET", "/fallback/feed", headers: [HTTPField("X-Apple-Device-Token", token)])
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.forwarded("X-Attest-Status"), ["devicecheck"])
        XCTAssertEqual(reply.forwarded("X-Apple-Device-Token"), [token], "the upstream may want the token too")
        let reused = try env.request("GET", "/fallback/feed", headers: [HTTPField("X-Apple-Device-Token", token)])
        XCTAssertEqual(reused.status, 409)
        XCTAssertEqual(reused.error, "device_token_reused")
        XCTAssertTrue(apple.requests(to: "/v1/query_two_bits").allSatisfy(\.jwtVerified))
    }

    func testFallbackRefusesBadTokensFlaggedDevicesAndMissingProof() throws {
        let bad = try env.request("GET", "/fallback/x", headers: [HTTPField("X-Apple-Device-Token", Base64.encode(Array("bad-token".utf8)))])
        XCTAssertEqual(bad.status, 401)
        XCTAssertEqual(bad.error, "device_token_invalid")
        let none = try env.request("GET", "/fallback/x")
        XCTAssertEqual(none.error, "assertion_missing")

        let fraudster = "phone-fraud"
        let set = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: [
            "devicecheck", "set", "--config", env.gateway.configPath, "--token", token(fraudster), "--bit1", "true",
        ])
        XCTAssertEqual(set.waitForExit(timeout: 10), 0, set.lines.joined(separator: "\n"))
        let flagged = try env.request("GET", "/fallback/x", headers: [HTTPField("X-Apple-Device-Token", token(fraudster))])
        XCTAssertEqual(flagged.status, 403)
        XCTAssertEqual(flagged.error, "device_flagged")
    }

    func testOncePerDeviceSetsTheBitOnlyAfterSuccess() throws {
        let device = "phone-promo"
        let first = try env.request("POST", "/promo/claim", headers: [HTTPField("X-Apple-Device-Token", token(device))], body: [1])
        XCTAssertEqual(first.status, 200, first.text)
        let second = try env.request("POST", "/promo/claim", headers: [HTTPField("X-Apple-Device-Token", token(device))], body: [1])
        XCTAssertEqual(second.status, 409)
        XCTAssertEqual(second.error, "already_claimed")

        // An upstream failure does not use up the device's one chance.
        let unlucky = "phone-unlucky"
        let failed = try env.request("GET", "/status/500", headers: [HTTPField("X-Apple-Device-Token", token(unlucky))])
        XCTAssertEqual(failed.status, 500)
        XCTAssertEqual(failed.forwarded("X-Attest-Status"), [], "the upstream's own answer")
        let query = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: [
            "devicecheck", "query", "--config", env.gateway.configPath, "--token", token(unlucky),
        ])
        XCTAssertEqual(query.waitForExit(timeout: 10), 0)
        XCTAssertTrue(query.lines.joined().contains("\"bit0\":false"), query.lines.joined())
    }

    func testOncePerDeviceOnAnAssertionRouteNeedsTheTokenToo() throws {
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let missing = try app.send(app.signed("POST", "/claim-closed/x", body: [1]))
        XCTAssertEqual(missing.status, 401)
        XCTAssertEqual(missing.error, "device_token_missing")
        let device = token("phone-asserting")
        let claimed = try app.send(app.signed("POST", "/claim-closed/x", body: [1], extraHeaders: [HTTPField("X-Apple-Device-Token", device)]))
        XCTAssertEqual(claimed.status, 200, claimed.text)
        XCTAssertEqual(claimed.forwarded("X-Attest-Status"), ["verified"])
        let again = try app.send(app.signed("POST", "/claim-closed/x", body: [1], extraHeaders: [HTTPField("X-Apple-Device-Token", token("phone-asserting"))]))
        XCTAssertEqual(again.error, "already_claimed")
    }

    func testOncePerDeviceLetsOneRequestOfAnAppRunAtATime() throws {
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let device = "phone-double-tap"
        let slow = try app.signed("GET", "/slow", query: "ms=3000", extraHeaders: [HTTPField("X-Apple-Device-Token", token(device))])
        let quick = try app.signed("GET", "/slow", query: "ms=1", extraHeaders: [HTTPField("X-Apple-Device-Token", token(device))])
        let replies = Gathered<(index: Int, reply: Reply?)>()
        let redisPort = env.redis.port
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            // The quick one goes once the slow one holds its claim (the in-flight mark in Redis), not after a guessed delay.
            if index == 1 { XCTAssertTrue(Self.waitForClaimMark(redisPort: redisPort), "the slow request claimed the device") }
            replies.append((index, try? app.send(index == 0 ? slow : quick)))
        }
        let (slowReply, quickReply) = (replies.values.first { $0.index == 0 }?.reply, replies.values.first { $0.index == 1 }?.reply)
        XCTAssertEqual(slowReply?.status, 200, slowReply?.text ?? "no reply")
        XCTAssertEqual(quickReply?.status, 409)
        XCTAssertEqual(quickReply?.error, "claim_in_progress")
        let later = try app.send(app.signed("GET", "/slow", query: "ms=1", extraHeaders: [HTTPField("X-Apple-Device-Token", token(device))]))
        XCTAssertEqual(later.error, "already_claimed", "the first request's claim was settled, then its mark released")
    }

    /// Whether a `once_per_device` in-flight mark (`…:claim:<route>`) appeared in this environment's Redis within 10 s.
    private static func waitForClaimMark(redisPort: Int) -> Bool {
        let deadline = Date().addingTimeInterval(10)
        repeat {
            let keys = try? Command.run("redis-cli", ["-p", String(redisPort), "--scan", "--pattern", "*:claim:*"], timeout: 5).output
            if keys?.contains(":claim:") == true { return true }
            usleep(20_000)
        } while Date() < deadline
        return false
    }

    func testAFailedOncePerDeviceRequestLeavesNoMarkBehind() throws {
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        apple.script("/v1/query_two_bits", Array(repeating: .status(503, "down"), count: 3))  // every attempt of one request
        let down = try app.send(app.signed("POST", "/claim-closed/z", body: [1], extraHeaders: [HTTPField("X-Apple-Device-Token", token("phone-z"))]))
        XCTAssertEqual(down.error, "apple_unavailable")
        let retried = try app.send(app.signed("POST", "/claim-closed/z", body: [1], extraHeaders: [HTTPField("X-Apple-Device-Token", token("phone-z"))]))
        XCTAssertEqual(retried.status, 200, retried.text)
    }

    func testAppleUnreachableFailsClosedUnlessTheRouteSaysOpen() throws {
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let earlierLines = env.gateway.process.lines.count  // the class shares one gateway and its log
        apple.script("/v1/query_two_bits", Array(repeating: .status(503, "down"), count: 6))
        let closed = try app.send(app.signed("POST", "/claim-closed/y", body: [1], extraHeaders: [HTTPField("X-Apple-Device-Token", token("phone-x"))]))
        XCTAssertEqual(closed.status, 503)
        XCTAssertEqual(closed.error, "apple_unavailable")
        let open = try app.send(app.signed("POST", "/claim-open/y", body: [1], extraHeaders: [HTTPField("X-Apple-Device-Token", token("phone-y"))]))
        XCTAssertEqual(open.status, 200, open.text)
        // This test's failed calls (six attempts, each Apple's 503), then every line of the log: none carries a piece
        // of the key. The outcome is part of the filter: the previous test's refused call (a 401) can be read from
        // the shared gateway's output after `earlierLines` was taken.
        let failedCalls = { [env] in
            env.gateway.process.lines.dropFirst(earlierLines).filter {
                $0.contains("\"event\":\"apple_call\"") && $0.contains("\"outcome\":\"apple_unavailable\"")
            }
        }
        // A line is read from the gateway's output a moment after the response went out.
        let deadline = Date().addingTimeInterval(5)
        while failedCalls().count < 6, Date() < deadline { usleep(20_000) }
        XCTAssertEqual(failedCalls().count, 6, failedCalls().joined(separator: "\n"))
        let keyLines = AppleTestKey.pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }
        XCTAssertFalse(keyLines.isEmpty)
        for line in env.gateway.process.lines {
            XCTAssertFalse(keyLines.contains { line.contains($0) }, "key material in a log line: \(line)")
        }
    }

    /// The risk metric a receipt refresh stored for the key (set here directly in Redis, as the refresher does).
    func storeRiskMetric(_ metric: Int, for app: AppClient) throws {
        let key = "aag:{\(Base64.encodeURLSafe(app.device.keyId))}:development:key"
        let cli = try ChildProcess(executable: "/usr/bin/env", arguments: ["redis-cli", "-p", String(env.redis.port), "HSET", key, "risk_metric", String(metric)])
        XCTAssertEqual(cli.waitForExit(timeout: 5), 0)
    }

    func testRiskMetricReachesTheUpstreamAndCanDeny() throws {
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let unknown = try app.send(app.signed("GET", "/risky/x"))
        XCTAssertEqual(unknown.status, 200, "no metric yet: nothing to judge")
        XCTAssertEqual(unknown.forwarded("X-Attest-Risk-Metric"), [])
        try storeRiskMetric(3, for: app)
        let low = try app.send(app.signed("GET", "/risky/x"))
        XCTAssertEqual(low.status, 200)
        XCTAssertEqual(low.forwarded("X-Attest-Risk-Metric"), ["3"])
        try storeRiskMetric(9, for: app)
        let high = try app.send(app.signed("GET", "/risky/x"))
        XCTAssertEqual(high.status, 403)
        XCTAssertEqual(high.error, "risk_too_high")
        let reported = try app.send(app.signed("GET", "/risk-report/x"))
        XCTAssertEqual(reported.status, 200, "report is the default: Apple calls it a signal, not a verdict")
        XCTAssertEqual(reported.forwarded("X-Attest-Risk-Metric"), ["9"])
        let logged = env.gateway.waitForEvent { $0["path"] as? String == "/risk-report/x" }
        XCTAssertEqual(logged?["reason"] as? String, "risk_above_limit")
        XCTAssertEqual(logged?["risk_metric"] as? Int, 9)
    }

    func testAppleRefusingTheGatewaysKeyIsAServiceErrorNotTheDevicesFault() throws {
        apple.script("/v1/query_two_bits", [.status(401, FakeAppleServer.invalidJWT)])
        let reply = try env.request("GET", "/fallback/x", headers: [HTTPField("X-Apple-Device-Token", token("phone-misconfigured"))])
        XCTAssertEqual(reply.status, 503)
        XCTAssertEqual(reply.error, "apple_misconfigured")
        XCTAssertEqual(apple.requests(to: "/v1/query_two_bits").filter { !$0.jwtVerified }.count, 0, "the gateway's JWT was fine")
    }

    func testVerifyDeviceAnswersTheBits() throws {
        let reply = try env.request("POST", "/verify-device", body: Array("{\"device_token\":\"\(token("phone-v"))\"}".utf8))
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.json["bit0"] as? Bool, false)
        XCTAssertEqual(reply.json["bit1"] as? Bool, false)
        let bad = try env.request("POST", "/verify-device", body: Array("{\"device_token\":\"\(Base64.encode(Array("bad".utf8)))\"}".utf8))
        XCTAssertEqual(bad.error, "device_token_invalid")
        XCTAssertEqual(try env.request("POST", "/verify-device", body: Array("{}".utf8)).error, "bad_request")
    }
}
