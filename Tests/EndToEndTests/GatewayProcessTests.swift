import Foundation
import Glibc
import TestSupport
import XCTest

/// The harness' gateway start: a free port another process takes before the gateway binds it (tests run beside
/// other suites, and loopback clients take ephemeral ports) is retried on other ports, not a failed test.
final class GatewayProcessTests: XCTestCase {
    func testAListenPortTakenBeforeTheGatewayBindsItIsRetriedElsewhere() throws {
        let (taken, takenPort) = TestPaths.listeningSocket(backlog: 1)
        defer { close(taken) }
        var picks = 0
        let directory = TestPaths.temporaryDirectory("gateway-process")
        let redis = ProcessInfo.processInfo.environment["TEST_REDIS_URL"] ?? "redis://127.0.0.1:1/0"
        let gateway = try GatewayProcess(directory: directory, ports: {
            picks += 1
            return (picks == 1 ? takenPort : TestPaths.freePort(), TestPaths.freePort())
        }, config: { port, admin in
            """
            listen: "127.0.0.1:\(port)"
            admin_listen: "127.0.0.1:\(admin)"
            redis: { url: "\(redis)" }
            app_attest: { apps: ["\(GatewayEnvironment.app)"], environments: [development] }
            upstreams: { api: { url: "http://127.0.0.1:\(TestPaths.freePort())" } }
            routes: [ { path_prefix: "/", upstream: api, policy: pass } ]
            """
        })
        defer { gateway.stop() }
        XCTAssertEqual(picks, 2, "the first start failed on the taken port and the second one listened")
        XCTAssertNotEqual(gateway.port, takenPort)
    }
}
