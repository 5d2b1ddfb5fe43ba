import AssertionCheck
import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// Redis, the example upstream and the real gateway binary, wired by a config the test writes.
final class GatewayEnvironment: @unchecked Sendable {
    static let app = AppID(teamID: "TEAMID1234", bundleID: "com.example.app")

    let directory = TestPaths.temporaryDirectory("e2e")
    let redis: RedisTestServer
    let upstream: ExampleUpstream
    let ca: TestCA
    let gateway: GatewayProcess
    let client: UpstreamClient
    private(set) var routes: String
    let challengeTTL: Int
    /// YAML lines under `app_attest:` (e.g. a `token:` section), indented by the caller.
    let appAttestExtra: String
    /// The `redis:` section's flow mapping: this environment's own server unless a test names a Cluster,
    /// sentinels or a TLS server.
    let redisSection: String

    /// `routes` is the YAML list under `routes:`; `apple` and `extra` are appended at the top level.
    init(routes: String = GatewayEnvironment.defaultRoutes, challengeTTL: Int = 300, apple: String? = nil,
         appAttestExtra: String = "", extra: String = "", redisSection: String? = nil, serveArguments: [String] = []) throws {
        redis = try RedisTestServer()
        self.redisSection = redisSection ?? "{ url: \"redis://127.0.0.1:\(redis.port)/0\", pool_size: 8, timeout_ms: 300 }"
        upstream = try ExampleUpstream()
        ca = try TestCA()
        try ca.save(to: directory + "/ca")
        self.routes = routes
        self.challengeTTL = challengeTTL
        self.appAttestExtra = appAttestExtra
        let (directory, redis, upstreamURL) = (directory, self.redisSection, upstream.baseURL)
        gateway = try GatewayProcess(directory: directory, arguments: serveArguments) { port, admin in
            GatewayEnvironment.config(port: port, admin: admin, redis: redis, upstreamURL: upstreamURL, directory: directory,
                                      routes: routes, challengeTTL: challengeTTL, appAttestExtra: appAttestExtra)
                + (apple.map { "\n" + $0 } ?? "") + (extra.isEmpty ? "" : "\n" + extra)
        }
        client = UpstreamClient(target: try UpstreamTarget(baseURL: gateway.baseURL, connectTimeoutMs: 2000, timeoutMs: 10000))
    }

    func stop() {
        gateway.stop()
        upstream.stop()
        redis.stop()
    }

    /// Rewrites the config with other routes and sends SIGHUP.
    func reload(routes: String) throws {
        self.routes = routes
        try gateway.reload(GatewayEnvironment.config(port: gateway.port, admin: gateway.adminPort, redis: redisSection,
                                                     upstreamURL: upstream.baseURL, directory: directory, routes: routes,
                                                     challengeTTL: challengeTTL, appAttestExtra: appAttestExtra))
    }

    /// Another gateway process with the same configuration, sharing this one's Redis and upstream.
    func anotherGateway() throws -> GatewayProcess {
        let (directory, redis, upstreamURL, routes, challengeTTL, extra) = (directory, redisSection, upstream.baseURL, routes,
                                                                           challengeTTL, appAttestExtra)
        return try GatewayProcess(directory: TestPaths.temporaryDirectory("e2e-peer")) { port, admin in
            GatewayEnvironment.config(port: port, admin: admin, redis: redis, upstreamURL: upstreamURL, directory: directory,
                                      routes: routes, challengeTTL: challengeTTL, appAttestExtra: extra)
        }
    }

    static func config(port: Int, admin: Int, redis: String, upstreamURL: String, directory: String, routes: String,
                       challengeTTL: Int, appAttestExtra: String = "") -> String {
        """
        listen: "127.0.0.1:\(port)"
        admin_listen: "127.0.0.1:\(admin)"
        redis: \(redis)
        app_attest:
          apps: ["\(GatewayEnvironment.app)"]
          environments: [development, production]
          trust_anchor: "\(directory)/ca/root.pem"
          challenge_ttl_seconds: \(challengeTTL)
        \(appAttestExtra)
        upstreams:
          api: { url: "\(upstreamURL)", connect_timeout_ms: 1000, timeout_ms: 1500 }
          echo: { url: "\(upstreamURL)/echo", connect_timeout_ms: 1000, timeout_ms: 1500 }
          dead: { url: "http://127.0.0.1:\(TestPaths.freePort())", connect_timeout_ms: 500, timeout_ms: 1000 }
        routes:
        \(routes)
        """
    }

    /// A fake Apple and a gateway whose `apple:` section points at it (`appleExtra` appended to the section:
    /// more keys of it, or further top-level sections); the fake is stopped if the gateway cannot start.
    static func withFakeApple(routes: String = defaultRoutes, appleExtra: String = "", appAttestExtra: String = "")
        throws -> (environment: GatewayEnvironment, apple: FakeAppleServer) {
        let apple = try AppleTestKey.fakeApple()
        do {
            return (try GatewayEnvironment(routes: routes, apple: try appleSection(apple) + appleExtra, appAttestExtra: appAttestExtra), apple)
        } catch {
            apple.stop()
            throw error
        }
    }

    /// An `apple:` section for `apple` (the fake), with the test key written to a file of its own.
    static func appleSection(_ apple: FakeAppleServer) throws -> String {
        let keyFile = TestPaths.temporaryDirectory("apple-key") + "/AuthKey.p8"
        try AppleTestKey.pem.write(toFile: keyFile, atomically: true, encoding: .utf8)
        return """
        apple:
          team_id: "\(AppleTestKey.teamID)"
          key_id: "\(AppleTestKey.keyID)"
          private_key_path: "\(keyFile)"
          devicecheck_url: "\(apple.baseURL)"
          attest_data_url: "\(apple.baseURL)"
        """
    }

    static let defaultRoutes = """
          - { path_prefix: "/secure/", upstream: echo, policy: assert, max_body_bytes: 4096 }
          - { path_prefix: "/report/", upstream: echo, policy: assert, mode: report }
          - { path_prefix: "/body-signed/", upstream: echo, policy: assert, client_data: body }
          - { path_prefix: "/window/", upstream: echo, policy: assert, counter_window: 8 }
          - { path_prefix: "/limited/", upstream: echo, policy: assert, rate_limit: { requests: 2, per_seconds: 60 } }
          - { path_prefix: "/v1/ai/", methods: [POST], upstream: api, policy: assert }
          - { path_prefix: "/closed/", policy: deny }
          - { path: "/slow", upstream: api, policy: pass }
          - { path: "/v1/public/stream", upstream: api, policy: pass }
          - { path_prefix: "/down/", upstream: dead, policy: pass }
          - { path_prefix: "/", upstream: echo, policy: pass }
    """

    /// A new simulated iPhone, its key attested and registered with this gateway.
    func registeredApp() throws -> AppClient {
        let app = try app()
        let reply = try app.register()
        guard reply.status == 200 else { throw TestSupportError("registration refused: \(reply.status) \(reply.text)") }
        return app
    }

    /// A new simulated iPhone talking to this gateway.
    func app(environment: AppAttestEnvironment = .development) throws -> AppClient {
        AppClient(device: try SimulatedDevice(ca: ca, appID: GatewayEnvironment.app, environment: environment), client: client)
    }

    func request(_ method: String, _ path: String, headers: [HTTPField] = [], body: [UInt8] = []) throws -> Reply {
        try Reply(client.send(UpstreamRequest(method: method, pathAndQuery: path, headers: headers + [HTTPField("Host", "gateway.test")], body: body)))
    }

    func admin(_ path: String) throws -> Reply {
        let adminClient = UpstreamClient(target: try UpstreamTarget(baseURL: gateway.adminURL, connectTimeoutMs: 1000, timeoutMs: 3000))
        return try Reply(adminClient.send(UpstreamRequest(method: "GET", pathAndQuery: path, headers: [HTTPField("Host", "admin")])))
    }

    /// /metrics once it shows every one of `lines`, or the last scrape after `seconds`: a request is counted just
    /// after its response went out, so a scrape sent the moment the client has it may come first (another loop).
    func metrics(showing lines: [String], within seconds: TimeInterval = 5) throws -> String {
        try metrics(within: seconds) { text in lines.allSatisfy { text.contains($0) } }
    }

    /// Waits until the gateway holds at least `count` requests it received and has not answered
    /// (`gateway_in_flight_requests`): the state a drain test needs, rather than a sleep.
    func waitForInFlightRequests(atLeast count: Int, within seconds: TimeInterval = 10) throws -> Bool {
        let inFlight = { (text: String) in (MetricsText.sample("gateway_in_flight_requests", in: text) ?? 0) >= Double(count) }
        return inFlight(try metrics(within: seconds, until: inFlight))
    }

    /// /metrics once `done` holds for it, or the last scrape after `seconds`.
    func metrics(within seconds: TimeInterval = 5, until done: (String) -> Bool) throws -> String {
        let deadline = Date().addingTimeInterval(seconds)
        var text = try admin("/metrics").text
        while !done(text), Date() < deadline {
            usleep(20_000)
            text = try admin("/metrics").text
        }
        return text
    }
}

/// Test classes that share one gateway (`env`, a SharedFixture): `registeredApp()` on it, or on another one.
protocol SharedGatewayTests {
    var env: GatewayEnvironment { get }
}

extension SharedGatewayTests {
    func registeredApp(_ other: GatewayEnvironment? = nil) throws -> AppClient { try (other ?? env).registeredApp() }
}

/// A whole response, with the gateway's JSON error or the echo upstream's view of the request decoded.
struct Reply {
    let status: Int
    let headers: [HTTPField]
    let body: [UInt8]

    init(status: Int, headers: [HTTPField], body: [UInt8]) { (self.status, self.headers, self.body) = (status, headers, body) }

    init(_ response: UpstreamResponse) throws {
        status = response.status
        headers = response.headers
        body = try response.readAll(limit: 4 << 20)
        response.finish()
    }

    var json: [String: Any] { ((try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]) ?? [:] }
    var text: String { String(decoding: body, as: UTF8.self) }
    var error: String? { json["error"] as? String }

    /// The request headers the echo upstream received, lower-cased names.
    var forwardedHeaders: [(String, String)] {
        ((json["headers"] as? [[String]]) ?? []).map { ($0[0].lowercased(), $0[1]) }
    }

    func forwarded(_ name: String) -> [String] { forwardedHeaders.filter { $0.0 == name.lowercased() }.map(\.1) }
}

/// The iOS app's side of the protocol, byte for byte as docs/client.md describes it.
final class AppClient: @unchecked Sendable {
    let device: SimulatedDevice
    /// How a request reaches the gateway: plain HTTP through `UpstreamClient`, or another client (TLS).
    let transport: (UpstreamRequest) throws -> Reply

    init(device: SimulatedDevice, client: UpstreamClient) {
        self.device = device
        transport = { try Reply(client.send($0)) }
    }

    init(device: SimulatedDevice, transport: @escaping (UpstreamRequest) throws -> Reply) {
        self.device = device
        self.transport = transport
    }

    func get(_ path: String) throws -> Reply {
        try transport(UpstreamRequest(method: "GET", pathAndQuery: path, headers: [HTTPField("Host", "gateway.test")]))
    }

    /// GET /attest/challenge, attestKey(SHA256(challenge)), POST /attest/verify.
    @discardableResult
    func register(faults: Set<AttestationFault> = []) throws -> Reply {
        let challenge = try get("/attest/challenge")
        XCTAssertEqual(challenge.status, 200)
        let attestation = try device.attest(challenge: challenge.body, faults: faults)
        return try registerRaw(attestation: attestation, challenge: challenge.body)
    }

    func registerRaw(attestation: [UInt8], challenge: [UInt8]) throws -> Reply {
        let body = SimulatedDevice.registrationBody(keyId: device.keyIdBase64, attestation: attestation, challenge: challenge)
        return try transport(UpstreamRequest(method: "POST", pathAndQuery: "/attest/verify",
                                             headers: [HTTPField("Host", "gateway.test"), HTTPField("Content-Type", "application/json")],
                                             body: body))
    }

    func assertChallenge() throws -> String {
        let reply = try get("/assert/challenge?" + device.assertChallengeQuery)
        XCTAssertEqual(reply.status, 200, reply.text)
        return reply.text
    }

    /// A request signed as the app would: fresh challenge, client data for exactly this request.
    func signed(_ method: String, _ path: String, query: String? = nil, body: [UInt8] = [], challenge: String? = nil,
                counter: UInt32? = nil, extraHeaders: [HTTPField] = []) throws -> UpstreamRequest {
        let clientData = SimulatedDevice.requestClientData(challenge: try challenge ?? assertChallenge(), method: method,
                                                           path: path, query: query, body: body)
        let headers = try device.assertionHeaders(clientData: clientData, counter: counter).map { HTTPField($0.name, $0.value) }
        return UpstreamRequest(method: method, pathAndQuery: path + (query.map { "?" + $0 } ?? ""),
                               headers: [HTTPField("Host", "gateway.test")] + headers + extraHeaders, body: body)
    }

    func send(_ request: UpstreamRequest) throws -> Reply { try transport(request) }

    /// A signed GET /secure/feed, asked until the answer is 200 (at most `seconds`): recovery without a restart.
    func eventuallyAccepted(within seconds: TimeInterval) throws -> Reply {
        let deadline = Date().addingTimeInterval(seconds)
        var reply = try send(signed("GET", "/secure/feed"))
        while reply.status != 200, Date() < deadline {
            usleep(200_000)
            reply = try send(signed("GET", "/secure/feed"))
        }
        return reply
    }
}

extension GatewayEnvironment {
    /// Crashes the sentinels' primary under this gateway and checks what its users see, over plain TCP or
    /// TLS alike: `503 store_unavailable` meanwhile, the promoted replica used without a restart,
    /// `redis_primary_changed` naming the old primary as `previous`, every app's registration still there.
    /// Returns the crashed primary, the promoted one and the event.
    func crashPrimaryAndFollow(_ setup: RedisTestSentinel, apps: [AppClient], file: StaticString = #filePath, line: UInt = #line)
        throws -> (old: RedisNode, promoted: RedisNode, changed: [String: Any]?) {
        // Replication is asynchronous: a crash may lose what the replica has not acknowledged, which is Redis', not the gateway's.
        do {
            try setup.primary().waitForReplicas()
        } catch {
            throw TestSupportError("\(error)\n\(setup.diagnostics())")
        }
        let old = try setup.crashPrimary()
        let during = try apps[0].send(apps[0].signed("GET", "/secure/feed"))
        XCTAssertEqual(during.status, 503, during.text, file: file, line: line)
        XCTAssertEqual(during.error, "store_unavailable", file: file, line: line)

        let promoted = try setup.waitForFailover(from: old)
        let accepted = try apps[0].eventuallyAccepted(within: 10).status
        XCTAssertEqual(accepted, 200, "the new primary is found without a restart", file: file, line: line)
        if accepted != 200 { print("after the failover:\n\(setup.diagnostics())") }
        let changed = gateway.waitForEvent { $0["event"] as? String == "redis_primary_changed" && $0["primary"] as? String == promoted.address }
        XCTAssertEqual(changed?["previous"] as? String, old.address, "the operator sees the failover: \(String(describing: changed))",
                       file: file, line: line)
        for app in apps {
            XCTAssertEqual(try app.send(app.signed("GET", "/secure/feed")).status, 200, "no registration lost", file: file, line: line)
        }
        return (old, promoted, changed)
    }
}
