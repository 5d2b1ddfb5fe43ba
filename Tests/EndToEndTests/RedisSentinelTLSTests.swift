import AssertionCheck
import Foundation
import TestSupport
import XCTest

/// The gateway binary behind sentinels that speak only TLS, watching a primary and a replica that speak only
/// TLS and require a client certificate: one `redis.tls` reaches the sentinels and the data servers alike
/// (docs/configuration.md#redistls), a failover is followed over TLS, and a wrong CA fails closed.
final class RedisSentinelTLSTests: XCTestCase {
    private var setup: RedisTestSentinel!

    override func setUpWithError() throws { setup = try RedisTestSentinel(tls: true) }

    override func tearDown() {
        setup?.stop()
        setup = nil
    }

    /// `redis:` with the sentinels, the client certificate and `caFile` as the CA to trust.
    private func redisSection(trusting caFile: String) throws -> String {
        let certificates = try XCTUnwrap(setup.certificates)
        let sentinels = setup.sentinelAddresses.map { "\"\($0)\"" }.joined(separator: ", ")
        return """
            { sentinels: [\(sentinels)], master_name: \(RedisTestSentinel.masterName), timeout_ms: 1000,
                     tls: { ca_file: "\(caFile)", cert_file: "\(certificates.clientCertFile)", key_file: "\(certificates.clientKeyFile)" } }
            """
    }

    func testAGatewayFindsThePrimaryThroughTLSSentinelsAndFollowsAFailover() throws {
        let env = try GatewayEnvironment(redisSection: redisSection(trusting: XCTUnwrap(setup.certificates).caFile))
        defer { env.stop() }
        let first = try setup.primary()
        let apps = try (0..<3).map { _ in try env.app() }
        for app in apps {
            XCTAssertEqual(try app.register().status, 200)
            let request = try app.signed("GET", "/secure/feed")
            XCTAssertEqual(try app.send(request).status, 200)
            XCTAssertEqual(try app.send(request).status, 409, "a replay is refused behind TLS sentinels as on one server")
        }
        XCTAssertEqual(try env.admin("/readyz").status, 200)
        let stored = try first.query("KEYS", "aag:*")
        for app in apps {
            XCTAssertTrue(stored.contains(Base64.encodeURLSafe(app.device.keyId)), "the records are on the primary the TLS sentinels named")
        }
        let found = env.gateway.waitForEvent { $0["event"] as? String == "redis_primary_changed" }
        XCTAssertEqual(found?["primary"] as? String, first.address, "\(String(describing: found))")

        let (_, promoted, _) = try env.crashPrimaryAndFollow(setup, apps: apps)  // over TLS, to the sentinels and the promoted replica
        let late = try env.app()
        XCTAssertEqual(try late.register().status, 200)
        XCTAssertEqual(try late.send(late.signed("GET", "/secure/feed")).status, 200)
        XCTAssertTrue(try promoted.query("KEYS", "aag:*").contains(Base64.encodeURLSafe(late.device.keyId)), "written to the promoted replica")
    }

    /// Trusting a CA that signed neither the sentinels' nor the servers' certificates: nothing is asked of the
    /// sentinels, so every store operation fails at once with the TLS reason for the operator, never a hang.
    func testAWrongCAFailsClosedWithATLSError() throws {
        let env = try GatewayEnvironment(redisSection: redisSection(trusting: XCTUnwrap(setup.certificates).wrongCAFile))
        defer { env.stop() }
        XCTAssertEqual(try env.admin("/readyz").status, 503)
        let began = Date()
        let refused = try env.app().get("/attest/challenge")  // the shared challenge secret is in Redis
        XCTAssertLessThan(Date().timeIntervalSince(began), 5, "a refused handshake fails the request at once")
        XCTAssertEqual(refused.status, 503, refused.text)
        XCTAssertEqual(refused.error, "store_unavailable")
        XCTAssertFalse(refused.text.contains("certificate"), "the TLS failure is the operator's: \(refused.text)")

        let line = env.gateway.waitForEvent { $0["event"] as? String == "request" && $0["reason"] as? String == "store_unavailable" }
        let detail = line?["detail"] as? String ?? ""
        for sentinel in setup.sentinelAddresses {
            XCTAssertTrue(detail.contains("TLS handshake with \(sentinel) failed"), "every sentinel was tried over TLS: \(detail)")
        }
        XCTAssertTrue(detail.contains("certificate verify failed"), detail)
        let keys = try Command.run(TestPaths.gatewayBinary, ["keys", "show", Base64.encode([UInt8](repeating: 7, count: 32)), "--config", env.gateway.configPath])
        XCTAssertNotEqual(keys.status, 0)
        XCTAssertTrue(keys.output.contains("TLS handshake") && keys.output.contains("certificate verify failed"), keys.output)
        XCTAssertEqual(try setup.primary().query("DBSIZE"), "0", "nothing was written")
    }
}
