import AppAttestClient
import AssertionCheck
import DeviceSimulator
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SimulatedAppAttest
import TestSupport
import XCTest

/// Redis, the example upstream, a fake Apple and the real `gateway serve`, configured for the client's tests:
/// a debug token, a DeviceCheck fallback route, a route that needs device tokens, a rate-limited one.
final class ClientEnvironment: @unchecked Sendable {
    static let app = AppID(teamID: "TEAMID1234", bundleID: "com.example.app")
    static let debugSecret = "ci-debug-secret-4f1c9a"
    /// Short, so that a slow assertion outlives its challenge.
    static let challengeTTL = 2

    let directory = TestPaths.temporaryDirectory("client")
    let redis: RedisTestServer
    let upstream: ExampleUpstream
    let apple: FakeAppleServer
    let ca: TestCA
    let gateway: GatewayProcess
    /// Ephemeral: no cache, no cookies between tests.
    let session = URLSession(configuration: .ephemeral)

    init() throws {
        redis = try RedisTestServer()
        upstream = try ExampleUpstream()
        apple = try AppleTestKey.fakeApple()
        ca = try TestCA()
        try ca.save(to: directory + "/ca")
        let keyFile = directory + "/AuthKey.p8"
        try AppleTestKey.pem.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let (directory, redisPort, upstreamURL, appleURL) = (directory, redis.port, upstream.baseURL, apple.baseURL)
        let debugHash = DebugProvider(token: ClientEnvironment.debugSecret).sha256Hex
        gateway = try GatewayProcess(directory: directory) { port, admin in
            """
            listen: "127.0.0.1:\(port)"
            admin_listen: "127.0.0.1:\(admin)"
            redis: { url: "redis://127.0.0.1:\(redisPort)/0", pool_size: 8, timeout_ms: 300 }
            app_attest:
              apps: ["\(ClientEnvironment.app)"]
              environments: [development, production]
              trust_anchor: "\(directory)/ca/root.pem"
              challenge_ttl_seconds: \(ClientEnvironment.challengeTTL)
              debug_tokens:
                - { name: ci, sha256: "\(debugHash)" }
            apple:
              team_id: "\(AppleTestKey.teamID)"
              key_id: "\(AppleTestKey.keyID)"
              private_key_path: "\(keyFile)"
              devicecheck_url: "\(appleURL)"
              attest_data_url: "\(appleURL)"
              timeout_ms: 1000
            upstreams:
              echo: { url: "\(upstreamURL)/echo", connect_timeout_ms: 1000, timeout_ms: 5000 }
            routes:
              - { path_prefix: "/secure/", upstream: echo, policy: assert }
              - { path_prefix: "/no-debug/", upstream: echo, policy: assert, allow_debug: false }
              - { path_prefix: "/report/", upstream: echo, policy: assert, mode: report }
              - { path_prefix: "/fallback/", upstream: echo, policy: assert, fallback: devicecheck }
              - { path_prefix: "/flagged/", upstream: echo, policy: assert, deny_if_bits: { bit1: true } }
              - { path_prefix: "/limited/", upstream: echo, policy: assert, rate_limit: { requests: 1, per_seconds: 60 } }
              - { path_prefix: "/closed/", policy: deny }
              - { path_prefix: "/", upstream: echo, policy: pass }
            """
        }
    }

    func stop() {
        gateway.stop()
        upstream.stop()
        apple.stop()
        redis.stop()
    }

    var url: URL { URL(string: gateway.baseURL)! }

    /// A new simulated iPhone with its own key store.
    func service() -> SimulatedAppAttestService {
        SimulatedAppAttestService(ca: ca, appID: ClientEnvironment.app)
    }

    func client(service: SimulatedAppAttestService? = nil, keyStore: InMemoryKeyIdStore = InMemoryKeyIdStore(),
                deviceCheck: (any DeviceCheckTokenProvider)? = nil, debug: DebugProvider? = nil,
                backoff: Backoff = Backoff(maxAttempts: 6, initialDelay: 0.2, maxDelay: 1)) -> AttestClient {
        AttestClient(gateway: url, service: service ?? self.service(), keyStore: keyStore, deviceCheck: deviceCheck, debug: debug,
                     session: session, backoff: backoff)
    }

    /// The gateway's request log lines (`event: request`) for paths starting with `prefix` that match
    /// `predicate`, once there are `count` of them (the log reaches the test a few milliseconds late), or
    /// as many as there are after 5 s.
    func requestLines(_ prefix: String, count: Int, where predicate: ([String: Any]) -> Bool = { _ in true }) -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(5)
        while true {
            let lines = gateway.events.filter {
                ($0["event"] as? String) == "request" && (($0["path"] as? String)?.hasPrefix(prefix) ?? false) && predicate($0)
            }
            if lines.count >= count || Date() > deadline { return lines }
            usleep(20_000)
        }
    }

    /// `gateway keys revoke KEY`, as an operator would.
    func revoke(_ keyId: String) throws {
        let process = try ChildProcess(executable: TestPaths.gatewayBinary,
                                       arguments: ["keys", "revoke", keyId, "--config", gateway.configPath, "--reason", "test"])
        XCTAssertEqual(process.waitForExit(timeout: 30), 0, process.lines.joined(separator: "\n"))
    }

    /// Empties the gateway's Redis: every registered key becomes `key_unknown`.
    func flushRedis() throws {
        let process = try ChildProcess(executable: "/usr/bin/env", arguments: ["redis-cli", "-p", String(redis.port), "FLUSHALL"])
        XCTAssertEqual(process.waitForExit(timeout: 10), 0)
    }

    func metrics() async throws -> String {
        let (data, _) = try await session.data(from: URL(string: gateway.adminURL + "/metrics")!)
        return String(decoding: data, as: UTF8.self)
    }
}

/// What the echo upstream saw of a forwarded request.
struct Echo {
    let object: [String: Any]

    init(_ data: Data) throws {
        object = try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any], String(decoding: data, as: UTF8.self))
    }

    var path: String? { object["path"] as? String }
    var query: String? { object["query"] as? String }
    var body: Data? { (object["body_base64"] as? String).flatMap { Data(base64Encoded: $0) } }

    func header(_ name: String) -> [String] {
        ((object["headers"] as? [[String]]) ?? []).filter { $0[0].lowercased() == name.lowercased() }.map { $0[1] }
    }
}

/// DCDevice as the fake Apple server knows it: tokens of one device (its bytes up to ":"), a new one per call.
struct FakeDeviceTokens: DeviceCheckTokenProvider {
    let device: String
    var isSupported = true

    func generateToken() async throws -> Data { Data("\(device):\(UUID().uuidString)".utf8) }
}

extension URLRequest {
    init(_ method: String, _ url: URL, body: String? = nil) {
        self.init(url: url)
        httpMethod = method
        if let body {
            httpBody = Data(body.utf8)
            setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
    }
}

extension URLResponse {
    var status: Int { (self as? HTTPURLResponse)?.statusCode ?? 0 }
}
