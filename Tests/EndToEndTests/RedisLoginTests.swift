import AssertionCheck
import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// The Redis password outside the YAML (a file, an environment variable) against a real redis-server with
/// requirepass and an ACL user, and the scale-out modes refused at start until the client supports them.
final class RedisLoginTests: XCTestCase {
    private let directory = TestPaths.temporaryDirectory("redis-login")

    private func config(port: Int, admin: Int, redis: String) -> String {
        """
        listen: "127.0.0.1:\(port)"
        admin_listen: "127.0.0.1:\(admin)"
        redis:
        \(redis)
          pool_size: 4
          timeout_ms: 500
        app_attest:
          apps: ["\(GatewayEnvironment.app)"]
          environments: [development]
          trust_anchor: "\(directory)/ca/root.pem"
        upstreams: { api: { url: "http://127.0.0.1:\(TestPaths.freePort())" } }
        routes:
          - { path_prefix: "/secure/", upstream: api, policy: assert }
          - { path_prefix: "/", upstream: api, policy: pass }
        """
    }

    private func register(through gateway: GatewayProcess, ca: TestCA) throws -> Reply {
        try app(of: gateway, ca: ca).register()
    }

    private func app(of gateway: GatewayProcess, ca: TestCA) throws -> AppClient {
        let client = UpstreamClient(target: try UpstreamTarget(baseURL: gateway.baseURL, connectTimeoutMs: 2000, timeoutMs: 10000))
        return AppClient(device: try SimulatedDevice(ca: ca, appID: GatewayEnvironment.app, environment: .development), client: client)
    }

    /// The ACL docs/operations and deploy/kubernetes/README.md give the gateway's user: every command it sends,
    /// directly or from its scripts, on its key prefix and channels.
    static let documentedACL = ["~aag:*", "&aag:*", "-@all", "+ping", "+select", "+role", "+asking", "+cluster|slots", "+evalsha",
                                "+eval", "+script|load", "+set", "+get", "+del", "+exists", "+incr", "+pttl", "+pexpire", "+hset",
                                "+hdel", "+hmget", "+hgetall", "+zadd", "+zrem", "+zscore", "+zcount", "+zrangebyscore",
                                "+zremrangebyscore", "+publish", "+subscribe"]

    func testTheGatewayLogsInAsAnACLUserFromAPasswordFileOrWithAPasswordFromTheEnvironment() throws {
        let ca = try TestCA()
        try ca.save(to: directory + "/ca")
        let requirepass = "default-\(UUID().uuidString)"
        let redis = try RedisTestServer(password: requirepass)
        let userPassword = "acl:pass/\(UUID().uuidString)@#"
        let cli = ["-h", "127.0.0.1", "-p", String(redis.port), "-a", requirepass, "--no-auth-warning"]
        let setUser = try Command.run("redis-cli", cli + ["ACL", "SETUSER", "gateway", "on", ">" + userPassword] + Self.documentedACL)
        XCTAssertEqual(setUser.output.trimmingCharacters(in: .whitespacesAndNewlines), "OK")
        try (userPassword + "\n").write(toFile: directory + "/redis-password", atomically: true, encoding: .utf8)

        let viaFile = try GatewayProcess(directory: directory) { port, admin in
            config(port: port, admin: admin, redis: "  url: \"redis://127.0.0.1:\(redis.port)/0\"\n  username: gateway\n  password_file: redis-password")
        }
        let app = try app(of: viaFile, ca: ca)
        XCTAssertEqual(try app.register().status, 200)
        // The upstream is not there: a 502 after the assertion was committed proves the ACL let every step through.
        let asserted = try app.send(app.signed("GET", "/secure/feed"))
        XCTAssertEqual(asserted.status, 502, asserted.text)
        let clients = try Command.run("redis-cli", cli + ["CLIENT", "LIST"]).output
        XCTAssertTrue(clients.contains("user=gateway"), "the gateway is logged in as the ACL user: \(clients)")
        XCTAssertFalse(try Command.run("redis-cli", cli + ["KEYS", "aag:*"]).output.isEmpty)
        viaFile.stop()

        let viaEnvironment = try GatewayProcess(directory: TestPaths.temporaryDirectory("redis-login-env"),
                                                environment: ["GATEWAY_REDIS_PASSWORD": requirepass]) { port, admin in
            config(port: port, admin: admin, redis: "  url: \"redis://127.0.0.1:\(redis.port)/0\"\n  password: ${GATEWAY_REDIS_PASSWORD}")
        }
        defer { viaEnvironment.stop() }
        XCTAssertEqual(try register(through: viaEnvironment, ca: ca).status, 200)
        XCTAssertFalse(viaEnvironment.process.lines.joined().contains(requirepass), "the password is never logged")
    }

    func testAWrongPasswordIsAClearErrorThatNeverShowsThePassword() throws {
        let ca = try TestCA()
        try ca.save(to: directory + "/ca")
        let redis = try RedisTestServer(password: "the-right-one")
        let wrong = "wrong-\(UUID().uuidString)"
        try wrong.write(toFile: directory + "/redis-password", atomically: true, encoding: .utf8)
        let gateway = try GatewayProcess(directory: directory) { port, admin in
            config(port: port, admin: admin, redis: "  url: \"redis://127.0.0.1:\(redis.port)/0\"\n  password_file: redis-password")
        }
        defer { gateway.stop() }
        let warning = try XCTUnwrap(gateway.waitForEvent { $0["event"] as? String == "store_unreachable" })
        XCTAssertEqual(warning["redis"] as? String, "redis://:***@127.0.0.1:\(redis.port)/0")
        XCTAssertTrue((warning["message"] as? String ?? "").contains("WRONGPASS"), "the start-up warning names the refused login")
        let client = UpstreamClient(target: try UpstreamTarget(baseURL: gateway.baseURL, connectTimeoutMs: 2000, timeoutMs: 10000))
        let challenge = try Reply(client.send(UpstreamRequest(method: "GET", pathAndQuery: "/attest/challenge", headers: [HTTPField("Host", "g")])))
        XCTAssertEqual(challenge.status, 503)
        XCTAssertEqual(challenge.error, "store_unavailable")

        // The CLI names the refused login.
        let keys = try Command.run(TestPaths.gatewayBinary, ["keys", "show", Base64.encode([UInt8](repeating: 7, count: 32)),
                                                             "--config", gateway.configPath])
        XCTAssertNotEqual(keys.status, 0)
        XCTAssertTrue(keys.output.contains("AUTH on Redis at 127.0.0.1:\(redis.port) failed"), keys.output)
        XCTAssertTrue(keys.output.contains("WRONGPASS"), keys.output)
        XCTAssertFalse((gateway.process.lines + [keys.output]).joined().contains(wrong), "the password is never printed")
    }
}
