import Foundation
import TestSupport
import XCTest

/// examples/reference_client.py, the "Testing without a device" client of docs/client.md, as a developer runs
/// it: a CA from `gateway bench ca`, a gateway told to trust it with `serve --trust-anchor`, one registration
/// and one signed request forwarded to the upstream.
final class PythonReferenceClientTests: XCTestCase {
    func testTheReferenceClientRegistersAndMakesASignedRequest() throws {
        let redis = try RedisTestServer()
        let upstream = try ExampleUpstream()
        defer { upstream.stop(); redis.stop() }
        let directory = TestPaths.temporaryDirectory("python-client")
        try benchCA(directory + "/ca")

        // The config trusts Apple's root (the default): only --trust-anchor lets the simulated device in.
        let gateway = try GatewayProcess(directory: directory, arguments: ["--trust-anchor", directory + "/ca/root.pem"]) { port, admin in
            """
            listen: "127.0.0.1:\(port)"
            admin_listen: "127.0.0.1:\(admin)"
            redis: { url: "redis://127.0.0.1:\(redis.port)/0" }
            app_attest: { apps: ["TEAMID1234.com.example.app"], environments: [production] }
            upstreams: { api: { url: "\(upstream.baseURL)" } }
            routes:
              - { path_prefix: "/v1/ai/", methods: [POST], upstream: api, policy: assert }
              - { path_prefix: "/", upstream: api, policy: pass }
            """
        }
        defer { gateway.stop() }

        let (status, steps) = try runClient(gateway: gateway.baseURL, ca: directory + "/ca")
        XCTAssertEqual(status, 0, "\(steps)")
        XCTAssertEqual(steps.map { $0["step"] as? String }, ["attest_challenge", "attest_verify", "assert_challenge", "signed_request"])
        XCTAssertEqual(steps.map { $0["status"] as? Int }, [200, 200, 200, 200])
        let verified = gateway.waitForEvent { $0["path"] as? String == "/v1/ai/generate" }
        XCTAssertEqual(verified?["decision"] as? String, "verified", "\(verified ?? [:])")
        XCTAssertEqual(verified?["counter"] as? Int, 1)
    }

    /// The same client against a gateway that trusts Apple alone: the attestation is refused, exit 1.
    func testWithoutTheTrustAnchorTheRegistrationIsRefused() throws {
        let redis = try RedisTestServer()
        defer { redis.stop() }
        let directory = TestPaths.temporaryDirectory("python-client-apple")
        try benchCA(directory + "/ca")
        let gateway = try GatewayProcess(directory: directory) { port, admin in
            """
            listen: "127.0.0.1:\(port)"
            admin_listen: "127.0.0.1:\(admin)"
            redis: { url: "redis://127.0.0.1:\(redis.port)/0" }
            app_attest: { apps: ["TEAMID1234.com.example.app"] }
            upstreams: { api: { url: "http://127.0.0.1:9" } }
            routes: [{ path_prefix: "/", upstream: api, policy: assert }]
            """
        }
        defer { gateway.stop() }
        let (status, steps) = try runClient(gateway: gateway.baseURL, ca: directory + "/ca")
        XCTAssertEqual(status, 1, "\(steps)")
        XCTAssertEqual(steps.last?["step"] as? String, "attest_verify")
        XCTAssertTrue((steps.last?["body"] as? String ?? "").contains("chain_invalid"), "\(steps)")
    }

    /// `gateway bench ca --out DIR`: the CA the client certifies its key with.
    func benchCA(_ directory: String) throws {
        let ca = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: ["bench", "ca", "--out", directory])
        XCTAssertEqual(ca.waitForExit(timeout: 30), 0)
    }

    /// Runs the example as docs/client.md shows it; answers its exit status and its JSON lines.
    func runClient(gateway: String, ca: String) throws -> (Int32?, [[String: Any]]) {
        let client = try ChildProcess(executable: "/usr/bin/env", arguments: [
            "python3", TestPaths.repository + "/examples/reference_client.py", "--gateway", gateway, "--ca", ca,
            "--app", "TEAMID1234.com.example.app", "--path", "/v1/ai/generate", "--body", #"{"prompt":"hi"}"#,
        ])
        let status = client.waitForExit(timeout: 60)
        usleep(50_000)
        let steps = client.lines.compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
        return (status, steps)
    }
}
