import RedisClient
import EventLoop
import AttestStore
import Upstream
import HTTPServer
import AssertionCheck
import Foundation
import Gateway
import TestSupport
import XCTest

final class ConfigTests: XCTestCase {
    /// The smallest valid file: the three required parts.
    private let minimal = """
        app_attest:
          apps: ["ABCDE12345.com.example.app"]
        upstreams:
          api: { url: "http://127.0.0.1:9000" }
        routes:
          - { path_prefix: "/", upstream: api, policy: pass }
        """

    private func issues(_ yaml: String) -> [String] {
        do {
            _ = try GatewayConfig.parse(yaml: yaml)
            XCTFail("expected the configuration to be refused")
            return []
        } catch {
            return error.issues.map(\.description)
        }
    }

    private func issue(_ yaml: String) -> ConfigIssue? {
        do {
            _ = try GatewayConfig.parse(yaml: yaml)
            return nil
        } catch {
            XCTAssertEqual(error.issues.count, 1, error.description)
            return error.issues.first
        }
    }

    /// `minimal` with `routes:` replaced.
    private func withRoutes(_ routes: String) -> String {
        """
        app_attest: { apps: ["ABCDE12345.com.example.app"] }
        upstreams: { api: { url: "http://127.0.0.1:9000" } }
        routes:
        \(routes)
        """
    }

    // MARK: - Valid files

    func testFullFileReadsEveryValue() throws {
        let config = try GatewayConfig.parse(yaml: """
            listen: "127.0.0.1:8080"
            admin_listen: "[::1]:9901"
            prefix: "/gw"
            redis: { url: "redis://:s3cret@127.0.0.1:6380/2", pool_size: 8, timeout_ms: 100, key_prefix: "test:aag" }
            app_attest:
              apps: ["TEAMID1234.com.example.app", "ABCDE12345.com.example.other"]
              environments: [production, development]
              trust_anchor: apple
              challenge_ttl_seconds: 120
              key_cache_size: 500
            server: { connection_limit: 200, per_ip_connection_limit: 20, connection_timeout_seconds: 10,
                      connection_memory_limit_bytes: 32768, max_body_bytes: 4096 }
            log: { level: debug }
            upstreams:
              api: { url: "https://api.internal:8443/base/", connect_timeout_ms: 500, timeout_ms: 30000,
                     host_header: preserve, max_idle_connections: 8, keepalive_timeout_ms: 1500 }
              plain: { url: "http://127.0.0.1" }
            routes:
              - { path_prefix: "/v1/ai/", methods: [POST], upstream: api, policy: assert, mode: report,
                  max_body_bytes: 65536, client_data: body, counter_window: 16, rate_limit: { requests: 30, per_seconds: 60 } }
              - { path: "/exact", upstream: plain, policy: pass }
              - { path_prefix: "/admin/", policy: deny }
              - { path_prefix: "/", upstream: api, policy: pass }
            """)
        XCTAssertEqual(config.listen.description, "127.0.0.1:8080")
        XCTAssertEqual(config.adminListen.family, .ipv6)
        XCTAssertEqual(config.prefix, "/gw")
        XCTAssertEqual([config.redis.host, "\(config.redis.port)", "\(config.redis.database)"], ["127.0.0.1", "6380", "2"])
        XCTAssertNil(config.redis.username)
        XCTAssertEqual(config.redis.password, "s3cret")
        XCTAssertEqual([config.redis.poolSize, config.redis.timeoutMs], [8, 100])
        XCTAssertEqual(config.redis.keyPrefix, "test:aag")
        XCTAssertEqual(config.appAttest.apps.map(\.description), ["TEAMID1234.com.example.app", "ABCDE12345.com.example.other"])
        XCTAssertEqual(config.appAttest.apps[0].teamID, "TEAMID1234")
        XCTAssertEqual(config.appAttest.environments, [.production, .development])
        XCTAssertTrue(config.appAttest.trustAnchor.isApple)
        XCTAssertEqual([config.appAttest.challengeTTLSeconds, config.appAttest.keyCacheSize], [120, 500])
        XCTAssertEqual(config.server, ServerLimits(connectionLimit: 200, perIPConnectionLimit: 20, keepaliveTimeoutMs: 10_000,
                                                   maxHeaderBytes: 32768, maxBodyBytes: 4096))
        XCTAssertEqual(config.log, LogConfig(level: .debug))

        let api = try XCTUnwrap(config.upstream(named: "api"))
        XCTAssertEqual([api.scheme, api.host, "\(api.port)", api.basePath], ["https", "api.internal", "8443", "/base"])
        XCTAssertEqual([api.connectTimeoutMs, api.timeoutMs, api.maxIdleConnections, api.keepAliveTimeoutMs], [500, 30000, 8, 1500])
        XCTAssertEqual(api.hostHeader, .preserve)
        let plain = try XCTUnwrap(config.upstream(named: "plain"))
        XCTAssertEqual([plain.host, "\(plain.port)", plain.basePath], ["127.0.0.1", "80", ""])
        XCTAssertEqual(plain.keepAliveTimeoutMs, 4000, "the default, below common servers' 5 s")
        XCTAssertEqual(config.upstreams.map(\.name), ["api", "plain"])

        XCTAssertEqual(config.routes, [
            RouteConfig(match: .prefix("/v1/ai/"), methods: ["POST"], upstream: "api", policy: .assert, mode: .report,
                        clientData: .body, counterWindow: 16, maxBodyBytes: 65536,
                        rateLimit: RateLimit(requests: 30, perSeconds: 60), index: 0),
            RouteConfig(match: .exact("/exact"), upstream: "plain", policy: .pass, maxBodyBytes: 4096, index: 1),
            RouteConfig(match: .prefix("/admin/"), upstream: nil, policy: .deny, maxBodyBytes: 4096, index: 2),
            RouteConfig(match: .prefix("/"), upstream: "api", policy: .pass, maxBodyBytes: 4096, index: 3),
        ])
        XCTAssertEqual(config.listenerLimits.maxBodyBytes, 256 * 1024 * 1024, "routes' limits apply per request")
    }

    func testDefaultsFillEverythingOptional() throws {
        let config = try GatewayConfig.parse(yaml: minimal)
        XCTAssertEqual(config.listen.description, "127.0.0.1:8080")
        XCTAssertEqual(config.adminListen.description, "127.0.0.1:9901")
        XCTAssertEqual(config.prefix, "")
        XCTAssertEqual(config.redis.url, "redis://127.0.0.1:6379/0")
        XCTAssertEqual([config.redis.port, config.redis.database, config.redis.poolSize, config.redis.timeoutMs],
                       [6379, 0, 32, 500])
        XCTAssertEqual(config.redis.keyPrefix, "aag")
        XCTAssertEqual(config.appAttest.environments, [.production])
        XCTAssertTrue(config.appAttest.trustAnchor.isApple)
        XCTAssertNil(config.appAttest.trustAnchorFile)
        XCTAssertEqual([config.appAttest.challengeTTLSeconds, config.appAttest.keyCacheSize], [300, 20_000])
        XCTAssertEqual(config.server, ServerLimits(perIPConnectionLimit: ServerLimits.defaultPerIPConnectionLimit))
        XCTAssertEqual(config.log, LogConfig(level: .info))
        let api = try XCTUnwrap(config.upstream(named: "api"))
        XCTAssertEqual([api.connectTimeoutMs, api.firstByteTimeoutMs, api.idleTimeoutMs, api.timeoutMs, api.maxIdleConnections],
                       [2000, 60000, 60000, 0, 64], "no total limit by default: streams run on the idle timeout")
        XCTAssertEqual(api.hostHeader, .upstream)
        let route = try XCTUnwrap(config.routes.first)
        XCTAssertEqual(route, RouteConfig(match: .prefix("/"), methods: nil, upstream: "api", policy: .pass, mode: .enforce,
                                          clientData: .json, counterWindow: 0, maxBodyBytes: 1_048_576, index: 0))
    }

    func testLoadsFromFileWithRelativeTrustAnchor() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.copyItem(atPath: TestPaths.vectors + "/apple_app_attest_root_ca.pem", toPath: folder.appendingPathComponent("root.pem").path)
        try "not a certificate".write(to: folder.appendingPathComponent("bad.pem"), atomically: true, encoding: .utf8)
        let file = folder.appendingPathComponent("gateway.yaml")

        try minimal.replacingOccurrences(of: "apps:", with: "trust_anchor: root.pem\n  apps:")
            .write(to: file, atomically: true, encoding: .utf8)
        let config = try GatewayConfig.load(path: file.path)
        XCTAssertFalse(config.appAttest.trustAnchor.isApple)
        XCTAssertEqual(config.appAttest.trustAnchorFile, folder.appendingPathComponent("root.pem").path)

        try minimal.replacingOccurrences(of: "apps:", with: "trust_anchor: bad.pem\n  apps:")
            .write(to: file, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try GatewayConfig.load(path: file.path)) { error in
            let issue = (error as? ConfigError)?.issues.first
            XCTAssertEqual(issue?.path, "app_attest.trust_anchor")
            XCTAssertEqual(issue?.line, 2)
        }
        XCTAssertThrowsError(try GatewayConfig.load(path: folder.appendingPathComponent("missing.yaml").path)) { error in
            XCTAssertEqual((error as? ConfigError)?.issues.first?.reason, .unreadableFile)
        }
    }

    // MARK: - Errors name their path

    func testEveryProblemIsReportedWithPathAndLine() {
        let found = issues("""
            listen: "localhost:80"
            redis: { url: "http://127.0.0.1", pool_size: 0 }
            app_attest:
              apps: ["nodot"]
              environments: [staging]
            server: { max_body_bytes: lots }
            log: { level: loud }
            upstreams:
              api: { url: "ftp://x" }
            routes:
              - { path_prefix: "/", upstream: api, policy: pass }
              - { path: "/x", upstream: api, policy: asert }
            """)
        XCTAssertEqual(found, [
            #"listen: expected host:port like 127.0.0.1:8080, [::1]:8080 or :8080 (host must be an IPv4 address or a bracketed IPv6 address), got "localhost:80" (line 1)"#,
            #"redis.url: scheme must be redis:// or rediss://, got "http://127.0.0.1" (line 2)"#,
            "redis.pool_size: expected an integer in 1...1024, got 0 (line 2)",
            #"app_attest.apps[0]: expected TEAMID.bundle.id with a 10-character team ID, got "nodot" (line 4)"#,
            #"app_attest.environments[0]: expected one of development, production, got "staging" (line 5)"#,
            #"server.max_body_bytes: expected an integer, got "lots" (line 6)"#,
            #"log.level: expected one of debug, info, warn, error, got "loud" (line 7)"#,
            #"upstreams.api.url: scheme must be http:// or https://, got "ftp://x" (line 9)"#,
            #"routes[1].policy: expected one of assert, pass, deny, got "asert" (line 12)"#,
        ])
    }

    func testUnknownKeysAreErrorsWithHints() {
        let found = issues("""
            listen: "127.0.0.1:8080"
            app_attest: { apps: ["ABCDE12345.com.example.app"], challenge_ttl: 10 }
            upstreams: { api: { url: "http://127.0.0.1:9000", timeout: 5 } }
            routes:
              - { path_prefix: "/", upstream: api, polcy: assert }
            extra: true
            """)
        XCTAssertEqual(found, [
            "app_attest.challenge_ttl: unknown key (line 2)",
            #"upstreams.api.timeout: unknown key (line 3)"#,
            "routes[0].policy: required key is missing (line 5)",
            #"routes[0].polcy: unknown key; did you mean "policy"? (line 5)"#,
            "extra: unknown key (line 6)",
        ])
    }

    func testDuplicateKeyIsAnError() {
        let found = issue("""
            app_attest: { apps: ["ABCDE12345.com.example.app"] }
            upstreams: { api: { url: "http://127.0.0.1:9000" } }
            routes:
              - { path_prefix: "/", upstream: api, policy: pass, policy: deny }
            """)
        XCTAssertEqual(found?.reason, .duplicateKey)
        XCTAssertEqual(found?.path, "routes[0].policy")
        XCTAssertEqual(found?.line, 4)
    }

    /// Both on one port, serve would stop at "address already in use": the config says which two keys clash.
    func testListenAndAdminListenOnOnePortClash() throws {
        XCTAssertEqual(issues("listen: \"127.0.0.1:9901\"\nadmin_listen: \"127.0.0.1:9901\"\n" + minimal),
                       ["admin_listen: listen 127.0.0.1:9901 and admin_listen 127.0.0.1:9901 clash (one port): give the admin endpoints their own (line 2)"])
        XCTAssertEqual(issues("listen: \":9901\"\n" + minimal),
                       ["listen: listen 0.0.0.0:9901 and admin_listen 127.0.0.1:9901 clash (one port): give the admin endpoints their own (line 1)"])
        XCTAssertNoThrow(try GatewayConfig.parse(yaml: "listen: \"127.0.0.1:9901\"\nadmin_listen: \"127.0.0.2:9901\"\n" + minimal))
        XCTAssertNoThrow(try GatewayConfig.parse(yaml: "listen: \"127.0.0.1:0\"\nadmin_listen: \"127.0.0.1:0\"\n" + minimal))
    }

    func testWrongTypesSayWhatWasFound() {
        let found = issues("""
            listen: [1, 2]
            prefix: { a: 1 }
            redis: { pool_size: "16", timeout_ms: 2.5 }
            app_attest: { apps: "ABCDE12345.com.example.app" }
            server: 5
            upstreams: { api: { url: "http://127.0.0.1:9000", timeout_ms: } }
            routes: { path_prefix: "/" }
            """)
        XCTAssertEqual(found, [
            "listen: expected a string, got a list (line 1)",
            "prefix: expected a string, got a mapping (line 2)",
            #"redis.pool_size: expected an integer, got quoted text "16" (line 3)"#,
            #"redis.timeout_ms: expected an integer, got "2.5" (line 3)"#,
            #"app_attest.apps: expected a list, got quoted text "ABCDE12345.com.example.app" (line 4)"#,
            #"server: expected a mapping, got "5" (line 5)"#,
            "upstreams.api.timeout_ms: expected an integer, got null (line 6)",
            "routes: expected a list, got a mapping (line 7)",
        ])
    }

    func testMissingRequiredParts() {
        XCTAssertEqual(issues("log: { level: info }\n"), [
            "app_attest.apps: required key is missing (line 1)",
            "upstreams: required key is missing (line 1)",
            "routes: required key is missing (line 1)",
        ])
        XCTAssertEqual(issues("app_attest: { apps: [] }\nupstreams: {}\nroutes: []\n"), [
            "app_attest.apps: at least one app is required (line 1)",
            "upstreams: at least one upstream is required (line 2)",
            "routes: at least one route is required (line 3)",
        ])
        XCTAssertEqual(issues("- a\n- b\n"), ["expected a mapping, got a list (line 1)"])
    }

    // MARK: - Routes

    func testRouteRules() {
        XCTAssertEqual(issues(withRoutes("""
              - { path: "/a", path_prefix: "/a", upstream: api, policy: pass }
              - { upstream: api, policy: pass }
              - { path_prefix: "v1/", upstream: api, policy: pass }
              - { path_prefix: "/v1/../x", upstream: api, policy: pass }
              - { path: "/b%20c", upstream: api, policy: pass }
              - { path: "/m", methods: [post, GET, GET], upstream: api, policy: pass }
              - { path: "/u", upstream: nowhere, policy: pass }
              - { path: "/n", policy: pass }
              - { path: "/p", upstream: api, policy: pass, mode: enforce, counter_window: 2 }
              - { path: "/w", upstream: api, policy: assert, counter_window: 2000 }
              - { path: "/m", upstream: api, policy: pass }
              - { path: "/r", upstream: api, policy: pass, rate_limit: { requests: 1, per_seconds: 1 } }
              - { path: "/s", upstream: api, policy: assert, rate_limit: { requests: 0, per_second: 1 } }
            """)), [
            "routes[0].path_prefix: give either path or path_prefix, not both (line 4)",
            "routes[1]: one of path or path_prefix is required (line 5)",
            #"routes[2].path_prefix: must start with "/", got "v1/" (line 6)"#,
            #"routes[3].path_prefix: must be a plain decoded path without %, ?, #, spaces, "//", "." or ".." segments, got "/v1/../x" (line 7)"#,
            #"routes[4].path: must be a plain decoded path without %, ?, #, spaces, "//", "." or ".." segments, got "/b%20c" (line 8)"#,
            #"routes[5].methods[0]: expected an uppercase method name like GET or POST, got "post" (line 9)"#,
            "routes[5].methods[2]: GET is listed twice (line 9)",
            #"routes[6].upstream: no upstream named "nowhere" (defined: api) (line 10)"#,
            "routes[7].upstream: required key is missing (line 11)",
            "routes[8].mode: only valid with policy assert (line 12)",
            "routes[8].counter_window: only valid with policy assert (line 12)",
            "routes[9].counter_window: expected an integer in 0...1024, got 2000 (line 13)",
            "routes[11].rate_limit: only valid with policy assert (line 15)",
            "routes[12].rate_limit.requests: expected an integer in 1...1000000, got 0 (line 16)",
            "routes[12].rate_limit.per_seconds: required key is missing (line 16)",
            #"routes[12].rate_limit.per_second: unknown key; did you mean "per_seconds"? (line 16)"#,
            #"routes[10].path: the same path "/m" as routes[5] (line 14)"#,
        ])
    }

    func testDenyRouteNeedsNoUpstreamAndExactAndPrefixMayShareAPath() throws {
        let config = try GatewayConfig.parse(yaml: withRoutes("""
              - { path: "/x", policy: deny }
              - { path_prefix: "/x", upstream: api, policy: pass }
            """))
        XCTAssertEqual(config.routes.map(\.policy), [.deny, .pass])
        XCTAssertNil(config.routes[0].upstream)
    }

    /// check-config's near-miss warnings: a spelling an upstream may serve as an assert or deny route's path
    /// that the gateway would route to a weaker one. A trailing slash no longer is one (the router covers it).
    func testNearMissSpellingsOfStrictRoutesThatReachAWeakerRouteAreWarnedAbout() throws {
        let config = try GatewayConfig.parse(yaml: withRoutes("""
              - { path: "/v1/chat", upstream: api, policy: assert }
              - { path_prefix: "/internal/", policy: deny }
              - { path_prefix: "/", upstream: api, policy: pass }
            """))
        let warned = config.nearMissWarnings.map { $0.components(separatedBy: ": ")[1].components(separatedBy: " would")[0] }
        XCTAssertTrue(warned.contains("/V1/CHAT"), "\(warned)")
        XCTAssertTrue(warned.contains("/INTERNAL/x"), "\(warned)")
        XCTAssertFalse(warned.contains("/v1/chat/"), "the exact route covers its trailing-slash twin")
        XCTAssertFalse(warned.contains("/internal"), "the prefix covers the path without its slash")
        XCTAssertFalse(warned.contains("/v1%2Fchat"), "an encoded slash is refused, never routed")
        XCTAssertFalse(warned.contains("/v1/chat.") || warned.contains("/internal./x"), "a trailing dot is refused: \(warned)")
        let dotsAllowed = try GatewayConfig.parse(yaml: withRoutes("""
              - { path: "/v1/chat", upstream: api, policy: assert, case_insensitive: true }
              - { path_prefix: "/", upstream: api, policy: pass }
            """) + "\nserver: { allow_trailing_dot_or_space: true }")
        XCTAssertTrue(dotsAllowed.nearMissWarnings.contains { $0.contains(": /v1/chat. would") }, "\(dotsAllowed.nearMissWarnings)")
        XCTAssertTrue(config.nearMissWarnings.allSatisfy { $0.contains("(pass /)") }, "\(config.nearMissWarnings)")
        let folded = try GatewayConfig.parse(yaml: withRoutes("""
              - { path: "/v1/chat", upstream: api, policy: assert, case_insensitive: true }
              - { path_prefix: "/", upstream: api, policy: pass }
            """))
        XCTAssertFalse(folded.nearMissWarnings.contains { $0.contains("/V1/CHAT") })
    }

    // MARK: - URLs and addresses

    func testUpstreamAndRedisURLRules() {
        let found = issues("""
            redis: { url: "redis://user@127.0.0.1/x" }
            app_attest: { apps: ["ABCDE12345.com.example.app"] }
            upstreams:
              a: { url: "http://user:pw@host" }
              b: { url: "http://host/path?q=1" }
              c: { url: "http://:80" }
              d: { url: "http://host:99999" }
              "e f": { url: "http://[::1]:9000" }
            routes: [{ path_prefix: "/", upstream: a, policy: pass }]
            """)
        XCTAssertEqual(found, [
            #"redis.url: the path must be a database number like /0, got "/x" (line 1)"#,
            "upstreams.a.url: must not carry credentials (line 4)",
            "upstreams.b.url: must not have a query or fragment (line 5)",
            "upstreams.c.url: missing or invalid host (line 6)",
            "upstreams.d.url: port must be a number 1-65535 (line 7)",
            "upstreams.e f: upstream names use A-Z a-z 0-9 _ - (line 8)",
        ], "a route naming a declared but broken upstream is not reported twice")
    }

    func testIPv6UpstreamAndPrefixRules() throws {
        let config = try GatewayConfig.parse(yaml: minimal.replacingOccurrences(of: "http://127.0.0.1:9000",
                                                                                with: "http://[::1]:9000/"))
        XCTAssertEqual(config.upstream(named: "api")?.host, "::1")
        XCTAssertEqual(config.upstream(named: "api")?.basePath, "")
        XCTAssertEqual(issues("prefix: \"/gw/\"\n" + minimal), [
            #"prefix: expected "" or a path like /gateway (letters, digits, - . _ ~; no trailing /), got "/gw/" (line 1)"#,
        ])
    }
}

extension ConfigTests {
    func testARouteSetsItsOwnUpstreamTimeouts() throws {
        let config = try GatewayConfig.parse(yaml: """
        app_attest: { apps: ["ABCDE12345.com.example.app"] }
        upstreams: { api: { url: "http://127.0.0.1:9", first_byte_timeout_ms: 5000, timeout_ms: 9000 } }
        routes:
          - { path: "/chat", upstream: api, policy: pass, idle_timeout_ms: 120000, timeout_ms: 0 }
          - { path_prefix: "/", upstream: api, policy: pass }
        """)
        let base = try XCTUnwrap(config.upstream(named: "api")).timeouts
        XCTAssertEqual(config.routes[0].timeouts.applied(to: base),
                       UpstreamTimeouts(connectMs: 2000, firstByteMs: 5000, idleMs: 120_000, totalMs: 0))
        XCTAssertNil(config.routes[1].timeouts.applied(to: base), "a route without its own uses the upstream's")
        XCTAssertThrowsError(try GatewayConfig.parse(yaml: """
        app_attest: { apps: ["ABCDE12345.com.example.app"] }
        upstreams: { api: { url: "http://127.0.0.1:9" } }
        routes: [{ path: "/x", upstream: api, policy: pass, idle_timeout_ms: 0 }]
        """))
    }

    func testAnUpstreamKeepaliveTimeoutOfZeroIsRefusedWithItsPath() {
        XCTAssertThrowsError(try GatewayConfig.parse(yaml: """
        app_attest: { apps: ["ABCDE12345.com.example.app"] }
        upstreams: { api: { url: "http://127.0.0.1:9", keepalive_timeout_ms: 0 } }
        routes: [{ path_prefix: "/", upstream: api, policy: pass }]
        """)) { error in
            XCTAssertTrue("\(error)".contains("upstreams.api.keepalive_timeout_ms: expected an integer in 1...3600000, got 0"), "\(error)")
        }
    }
}
