import AssertionCheck
import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// The two reference clients iOS teams copy, byte for byte, through the real binary with Redis: neither
/// sends a key id. Then what stateless challenges promise: one use across devices, distinct refusals, no
/// Redis memory for issuing.
final class ReferenceClientTests: XCTestCase, SharedGatewayTests {
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

    /// What Apple-style guides put in the client data, encoded with Foundation's JSONEncoder as the app does.
    struct GuideClientData: Encodable {
        let challenge: String
        let method: String
        let path: String
        let bodySHA256: String
    }

    /// GET /assert/challenge without key_id, sign {"challenge","method","path","bodySHA256"}, send two headers.
    func guideRequest(_ app: AppClient, _ method: String, _ path: String, body: [UInt8], challenge: String? = nil) throws -> UpstreamRequest {
        let text = try challenge ?? {
            let reply = try app.get("/assert/challenge")
            XCTAssertEqual(reply.status, 200, reply.text)
            return reply.text
        }()
        let clientData = Array(try JSONEncoder().encode(GuideClientData(challenge: text, method: method, path: path,
                                                                         bodySHA256: Data(SHA256.hash(body)).base64EncodedString())))
        let assertion = try app.device.assert(clientData: clientData)
        return UpstreamRequest(method: method, pathAndQuery: path, headers: [
            HTTPField("Host", "gateway.test"), HTTPField("Content-Type", "application/json"),
            HTTPField("X-App-Attest-Assertion", Data(assertion).base64EncodedString()),
            HTTPField("X-App-Attest-Client-Data", Data(clientData).base64EncodedString()),
        ], body: body)
    }

    func testStandardClientWithoutKeyIdIsAcceptedOnceAndNamedToTheUpstream() throws {
        let app = try registeredApp()
        let body = Array(#"{"prompt":"hello"}"#.utf8)
        let request = try guideRequest(app, "POST", "/secure/generate", body: body)
        XCTAssertTrue(String(decoding: Base64.decode(request.headers[3].value)!, as: UTF8.self).contains(#"\/secure\/generate"#),
                      "JSONEncoder escapes slashes, as on the device")
        let reply = try app.send(request)
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.forwarded("X-Attest-Status"), ["verified"])
        XCTAssertEqual(reply.forwarded("X-Attest-Key-Id"), [app.device.keyIdBase64], "the key id derived from the signature")
        XCTAssertEqual(reply.forwarded("X-App-Attest-Assertion"), [])
        let logged = env.gateway.waitForEvent { $0["event"] as? String == "request" && $0["path"] as? String == "/secure/generate" }
        XCTAssertEqual(logged?["decision"] as? String, "verified")
        XCTAssertEqual(logged?["key_id"] as? String, app.device.keyIdBase64, "the whole key id: `gateway keys revoke` takes it from the log")

        let replay = try app.send(request)
        XCTAssertEqual(replay.status, 409)
        XCTAssertEqual(replay.error, "challenge_reused")
        XCTAssertEqual(try app.send(guideRequest(app, "POST", "/secure/generate", body: body)).status, 200, "a new challenge works")
    }

    func testVerifyCommandNamesTheRegisteredKeyOfAnAssertionWithoutKeyId() throws {
        let app = try registeredApp()
        let clientData = Array("offline check".utf8)
        let assertion = try app.device.assert(clientData: clientData)
        let verify = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: [
            "verify", "assertion", "--assertion-b64", Base64.encode(assertion), "--client-data-b64", Base64.encode(clientData),
            "--config", env.gateway.configPath, "--app", GatewayEnvironment.app.description, "--previous-counter", "0"])
        XCTAssertEqual(verify.waitForExit(timeout: 10), 0, verify.lines.joined(separator: "\n"))
        let line = try XCTUnwrap(verify.lines.last { $0.hasPrefix("{") })
        let result = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        XCTAssertEqual(result["key_id"] as? String, app.device.keyIdBase64)
        XCTAssertEqual(result["key_id_source"] as? String, "recovered")
    }

    func testLegacyBodySigningClientWithOnlyXAppAssertion() throws {
        let app = try registeredApp()
        let body = Array(#"{"claim":"promo","at":1}"#.utf8)
        let request = UpstreamRequest(method: "POST", pathAndQuery: "/body-signed/claim", headers: [
            HTTPField("Host", "gateway.test"), HTTPField("Content-Type", "application/json"),
            HTTPField("X-App-Assertion", Data(try app.device.assert(clientData: body)).base64EncodedString()),
        ], body: body)
        let reply = try app.send(request)
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(reply.forwarded("X-Attest-Key-Id"), [app.device.keyIdBase64])
        let replay = try app.send(request)
        XCTAssertEqual(replay.status, 409)
        XCTAssertEqual(replay.error, "counter_not_increasing")
    }

    /// The header stays authoritative: a wrong key id is not second-guessed by recovery.
    func testNamedKeyIdIsAuthoritative() throws {
        let app = try registeredApp()
        let other = try registeredApp()
        var request = try guideRequest(app, "POST", "/secure/x", body: [1])
        request.headers.append(HTTPField("X-App-Attest-Key-Id", other.device.keyIdBase64))
        let reply = try app.send(request)
        XCTAssertEqual(reply.status, 401)
        XCTAssertEqual(reply.error, "signature_invalid")
    }

    /// Without a key id the gateway cannot tell a wrong signature from an unregistered key: it says so
    /// (`no_matching_key`), not `key_unknown`, which would send a client with a signing bug re-registering.
    func testUnregisteredKeyAndGarbageSignatureWithoutKeyId() throws {
        let stranger = try env.app()
        let unknown = try stranger.send(guideRequest(stranger, "POST", "/secure/x", body: []))
        XCTAssertEqual(unknown.status, 401)
        XCTAssertEqual(unknown.error, "no_matching_key")
        XCTAssertTrue((unknown.json["message"] as? String ?? "").contains("send X-App-Attest-Key-Id"), unknown.text)
        let app = try registeredApp()
        // A registered key signing other bytes than it sends (a client's signing bug).
        var misSigned = try guideRequest(app, "POST", "/secure/x", body: [])
        let sent = Base64.decode(misSigned.headers[3].value)!
        misSigned.headers[2] = HTTPField("X-App-Attest-Assertion", Base64.encode(try app.device.assert(clientData: sent + Array(" ".utf8))))
        XCTAssertEqual(try app.send(misSigned).error, "no_matching_key")
        misSigned.headers.append(HTTPField("X-App-Attest-Key-Id", app.device.keyIdBase64))
        XCTAssertEqual(try app.send(misSigned).error, "signature_invalid", "with the key id the gateway can tell")
        var tampered = try guideRequest(app, "POST", "/secure/x", body: [])
        var assertion = Base64.decode(tampered.headers[2].value)!
        assertion[20] ^= 0xFF
        tampered.headers[2] = HTTPField("X-App-Attest-Assertion", Base64.encode(assertion))
        XCTAssertTrue(["no_matching_key", "signature_invalid", "bad_assertion"].contains(try app.send(tampered).error ?? ""))
        XCTAssertEqual(try env.request("POST", "/secure/x", body: [1]).error, "assertion_missing")
    }

    /// A challenge fetched without a key id is spent in the slot of the key that uses it (one script on one
    /// Cluster slot): each device can use it once; a device's second use, however concurrent, is refused.
    func testAnUnboundChallengeServesEachDeviceOnce() throws {
        let first = try registeredApp()
        let second = try registeredApp()
        let challenge = try first.get("/assert/challenge").text
        XCTAssertEqual(try second.send(guideRequest(second, "POST", "/secure/pay", body: [1], challenge: challenge)).status, 200)
        let requests = [try guideRequest(first, "POST", "/secure/pay", body: [1], challenge: challenge),
                        try guideRequest(first, "POST", "/secure/pay", body: [2], challenge: challenge)]
        let statuses = Mutex12()
        let errors = Mutex12()
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            let reply = try? first.send(requests[index])
            statuses.append(reply?.status ?? -1)
            if reply?.error == "challenge_reused" { errors.append(index) }
        }
        XCTAssertEqual(statuses.values.sorted(), [200, 409])
        XCTAssertEqual(errors.values.count, 1)
    }

    func testForgedAndWrongKindChallengesAreRefusedForTheirReason() throws {
        let app = try registeredApp()
        var forged = Array(try app.get("/assert/challenge").text)
        forged[60] = forged[60] == "A" ? "B" : "A"
        let forgedReply = try app.send(guideRequest(app, "POST", "/secure/x", body: [], challenge: String(forged)))
        XCTAssertEqual(forgedReply.status, 409)
        XCTAssertEqual(forgedReply.error, "challenge_invalid")

        let attestChallenge = try app.get("/attest/challenge").text
        XCTAssertEqual(try app.send(guideRequest(app, "POST", "/secure/x", body: [], challenge: attestChallenge)).error, "challenge_wrong_kind")
        let newcomer = try env.app()
        let assertChallenge = try app.get("/assert/challenge").body
        let registration = try newcomer.registerRaw(attestation: try newcomer.device.attest(challenge: assertChallenge), challenge: assertChallenge)
        XCTAssertEqual(registration.error, "challenge_wrong_kind")
        XCTAssertEqual(try newcomer.registerRaw(attestation: try newcomer.device.attest(challenge: Array("nope".utf8)),
                                                challenge: Array("nope".utf8)).error, "challenge_invalid")
    }

    func testIssuingChallengesCostsRedisNoMemory() throws {
        XCTAssertEqual(try env.request("GET", "/assert/challenge").status, 200, "the shared secret exists before measuring")
        let before = try usedMemory()
        let issued = Mutex12()
        let client = env.client
        DispatchQueue.concurrentPerform(iterations: 4) { worker in
            for index in 0..<5_000 {
                let path = index % 2 == 0 ? "/assert/challenge" : "/attest/challenge"
                guard let response = try? client.send(UpstreamRequest(method: "GET", pathAndQuery: path, headers: [HTTPField("Host", "g")])),
                      let body = try? response.readAll(limit: 1024) else { continue }
                response.finish()
                if response.status == 200, body.count == 72 { issued.append(worker) }
            }
        }
        XCTAssertEqual(issued.values.count, 20_000)
        let growth = try usedMemory() - before
        XCTAssertLessThan(growth, 1 << 20, "used_memory grew by \(growth) bytes")
    }

    private func usedMemory() throws -> Int {
        let cli = Process()
        cli.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        cli.arguments = ["redis-cli", "-p", String(env.redis.port), "INFO", "memory"]
        let pipe = Pipe()
        cli.standardOutput = pipe
        try cli.run()
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        cli.waitUntilExit()
        guard let line = text.split(whereSeparator: \.isNewline).first(where: { $0.hasPrefix("used_memory:") }),
              let bytes = Int(line.dropFirst("used_memory:".count).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestSupportError("no used_memory in \(text)")
        }
        return bytes
    }
}

/// The challenge secret: shared through Redis by replicas without a file, rotated through the file.
final class ChallengeSecretTests: XCTestCase {
    func testReplicasOnOneRedisAcceptEachOthersChallenges() throws {
        let env = try GatewayEnvironment()
        defer { env.stop() }
        let replica = try GatewayProcess(directory: TestPaths.temporaryDirectory("replica")) { port, admin in
            GatewayEnvironment.config(port: port, admin: admin, redis: env.redisSection, upstreamURL: env.upstream.baseURL,
                                      directory: env.directory, routes: GatewayEnvironment.defaultRoutes, challengeTTL: 300)
        }
        defer { replica.stop() }
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let replicaClient = UpstreamClient(target: try UpstreamTarget(baseURL: replica.baseURL, connectTimeoutMs: 2000, timeoutMs: 10000))
        let challenge = try Reply(replicaClient.send(UpstreamRequest(method: "GET", pathAndQuery: "/assert/challenge",
                                                                     headers: [HTTPField("Host", "g")]))).text
        XCTAssertEqual(try app.send(app.signed("POST", "/secure/x", challenge: challenge)).status, 200)
        XCTAssertEqual(try Reply(replicaClient.send(app.signed("POST", "/secure/x", challenge: challenge))).error, "challenge_reused",
                       "spent for every replica")
    }

    func testRotationThroughTheSecretFile() throws {
        let directory = TestPaths.temporaryDirectory("rotation")
        let secretFile = directory + "/challenge-secret"
        let (old, new) = (String(repeating: "o", count: 40), String(repeating: "n", count: 40))
        try (old + "\n").write(toFile: secretFile, atomically: true, encoding: .utf8)
        let env = try GatewayEnvironment(appAttestExtra: "  challenge_secret_file: \"\(secretFile)\"")
        defer { env.stop() }
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let config = try String(contentsOfFile: env.gateway.configPath, encoding: .utf8)
        func rotate(_ lines: [String]) throws {
            try lines.joined(separator: "\n").write(toFile: secretFile, atomically: true, encoding: .utf8)
            let reloads = env.gateway.events.filter { $0["event"] as? String == "config_reloaded" }.count
            try env.gateway.reload(config)
            let deadline = Date().addingTimeInterval(5)
            while env.gateway.events.filter({ $0["event"] as? String == "config_reloaded" }).count == reloads, Date() < deadline { usleep(20_000) }
        }
        let signedWithOld = try app.assertChallenge()
        let alsoOld = try app.assertChallenge()
        try rotate([new, old])
        XCTAssertEqual(try app.send(app.signed("POST", "/secure/a", challenge: signedWithOld)).status, 200, "the previous secret still counts")
        let signedWithNew = try app.assertChallenge()
        try rotate([new])
        XCTAssertEqual(try app.send(app.signed("POST", "/secure/b", challenge: signedWithNew)).status, 200)
        XCTAssertEqual(try app.send(app.signed("POST", "/secure/c", challenge: alsoOld)).error, "challenge_invalid")
        XCTAssertFalse(env.gateway.process.lines.joined().contains(old), "the secret is never logged")
    }
}

/// `;` paths, underscore headers and case-insensitive routes, with the defaults and with each opt-out.
final class RequestHardeningTests: XCTestCase {
    static let routes = """
          - { path_prefix: "/v1/ai/", upstream: echo, policy: assert }
          - { path_prefix: "/admin-only", policy: deny }
          - { path_prefix: "/", upstream: echo, policy: pass }
    """

    func testDefaultsRefuseSemicolonsAndDropUnderscoreHeaders() throws {
        let env = try GatewayEnvironment(routes: Self.routes)
        defer { env.stop() }
        // A segment ending in a dot or space: Windows and IIS drop them, so /admin-only./secret would be served
        // there as /admin-only/secret after the catch-all routed it here.
        for path in ["/v1/ai;/x", "/admin-only;/secret", "/v1/ai%3B/x", "/public;jsessionid=1", "/admin-only./secret", "/admin-only%20/secret",
                     "/admin-only%2E/secret", "/v1/ai./x", "/public/file.", "/public/file%20"] {
            let reply = try env.request("GET", path)
            XCTAssertEqual(reply.status, 400, path)
            XCTAssertEqual(reply.error, "bad_path", path)
        }
        let reply = try env.request("GET", "/public/page", headers: [
            HTTPField("X_Attest_Status", "verified"), HTTPField("X_Attest_Key_Id", "victim"), HTTPField("X_App_Attest_Key_Id", "victim"),
            HTTPField("X_Custom", "1"), HTTPField("X-Custom", "2"),
        ])
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertFalse(reply.forwardedHeaders.contains { $0.0.contains("_") }, "\(reply.forwardedHeaders)")
        XCTAssertEqual(reply.forwarded("X-Attest-Status"), ["unverified"])
        XCTAssertEqual(reply.forwarded("X-Custom"), ["2"])
        XCTAssertEqual(try env.request("POST", "/V1/AI/x").forwarded("X-Attest-Status"), ["unverified"],
                       "routes are case-sensitive unless told otherwise")
    }

    func testOptOutsRestoreTheOldBehaviourButNeverForwardLookAlikes() throws {
        let env = try GatewayEnvironment(routes: """
              - { path_prefix: "/v1/ai/", upstream: echo, policy: assert, case_insensitive: true }
              - { path_prefix: "/", upstream: echo, policy: pass }
        """, extra: "server: { allow_path_parameters: true, forward_underscore_headers: true, allow_trailing_dot_or_space: true }")
        defer { env.stop() }
        let semicolon = try env.request("GET", "/public;jsessionid=1")
        XCTAssertEqual(semicolon.status, 200, semicolon.text)
        XCTAssertEqual(semicolon.json["path"] as? String, "/echo/public;jsessionid=1")
        let dotted = try env.request("GET", "/public/file.")
        XCTAssertEqual(dotted.status, 200, dotted.text)
        XCTAssertEqual(dotted.json["path"] as? String, "/echo/public/file.")
        let reply = try env.request("GET", "/public/page", headers: [
            HTTPField("X_Attest_Status", "verified"), HTTPField("X_Attest_Key_Id", "victim"), HTTPField("x_app_attest_assertion", "x"),
            HTTPField("X_Forwarded_For", "10.9.9.9"), HTTPField("X_Custom", "1"),
        ])
        XCTAssertEqual(reply.forwardedHeaders.filter { $0.0.contains("_") }.map(\.0), ["x_custom"])
        let caseVariant = try env.request("POST", "/V1/AI/x")
        XCTAssertEqual(caseVariant.status, 401)
        XCTAssertEqual(caseVariant.error, "assertion_missing")
    }

    func testChallengeRateLimitPerClientAddress() throws {
        let env = try GatewayEnvironment(routes: Self.routes, appAttestExtra: "  challenge_rate_limit: { requests: 3, per_seconds: 3600 }")
        defer { env.stop() }
        let statuses = try (0..<4).map { index in try env.request("GET", index % 2 == 0 ? "/assert/challenge" : "/attest/challenge") }
        XCTAssertEqual(statuses.map(\.status), [200, 200, 200, 429])
        XCTAssertEqual(statuses[3].error, "challenge_rate_limited")
        XCTAssertNotNil(statuses[3].headers.values(named: "Retry-After").first.flatMap { Int($0) })
    }
}
