import Foundation
import TestSupport
import Upstream
import XCTest

/// `upstreams.<name>.host_header`: by default the upstream gets its own host:port as `Host` (the client's is
/// replaced, as a reverse proxy does), with `preserve` the client's `Host` unchanged. Over the real binary to
/// the example upstream's echo, which reports the headers it received.
final class HostHeaderTests: XCTestCase {
    struct Parts {
        let redis: RedisTestServer
        let upstream: ExampleUpstream
        let gateway: GatewayProcess
    }

    static let shared = SharedFixture<Parts>()
    private var parts: Parts { Self.shared.value }

    override class func setUp() {
        super.setUp()
        shared.make {
            let redis = try RedisTestServer()
            let upstream = try ExampleUpstream()
            let gateway = try GatewayProcess(directory: TestPaths.temporaryDirectory("host-header")) { port, admin in
                """
                listen: "127.0.0.1:\(port)"
                admin_listen: "127.0.0.1:\(admin)"
                redis: { url: "redis://127.0.0.1:\(redis.port)/0" }
                app_attest: { apps: ["TEAMID1234.com.example.app"], environments: [development] }
                upstreams:
                  rewritten: { url: "\(upstream.baseURL)/echo" }
                  preserved: { url: "\(upstream.baseURL)/echo", host_header: preserve }
                routes:
                  - { path_prefix: "/preserved/", upstream: preserved, policy: pass }
                  - { path_prefix: "/", upstream: rewritten, policy: pass }
                """
            }
            return Parts(redis: redis, upstream: upstream, gateway: gateway)
        }
    }

    override class func tearDown() {
        shared.tearDown {
            $0.gateway.stop()
            $0.upstream.stop()
            $0.redis.stop()
        }
        super.tearDown()
    }

    override func setUpWithError() throws { try Self.shared.check() }

    private func forwardedHost(_ path: String, host: String) throws -> [String] {
        let client = UpstreamClient(target: try UpstreamTarget(baseURL: parts.gateway.baseURL, connectTimeoutMs: 2000, timeoutMs: 10_000))
        let reply = try Reply(client.send(UpstreamRequest(method: "GET", pathAndQuery: path, headers: [HTTPField("Host", host)])))
        XCTAssertEqual(reply.status, 200, reply.text)
        return reply.forwarded("Host")
    }

    func testTheClientsHostIsReplacedByTheUpstreamsOwn() throws {
        XCTAssertEqual(try forwardedHost("/page", host: "api.example.com"), ["127.0.0.1:\(parts.upstream.port)"])
    }

    func testHostHeaderPreserveForwardsTheClientsHostUnchanged() throws {
        XCTAssertEqual(try forwardedHost("/preserved/page", host: "api.example.com:8443"), ["api.example.com:8443"])
    }
}
