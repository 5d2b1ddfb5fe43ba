import Foundation
import TestSupport
import Upstream
import XCTest

/// `https://` upstreams over the real binary against real TLS servers (`openssl s_server`) with a private CA:
/// `upstreams.<name>.tls` trusts that CA, checks the name, and shows a client certificate; every handshake
/// failure is `502 upstream_tls_failed` with curl's reason in the log line, never a fallback to plain trust.
final class HTTPSUpstreamTests: XCTestCase {
    /// Two TLS servers with the same certificate: one requires a client certificate.
    struct Servers {
        let certificates: TestCertificates
        let server: HTTPSTestUpstream
        let mutualServer: HTTPSTestUpstream
        let redis: RedisTestServer
        let gateway: GatewayProcess
    }

    static let shared = SharedFixture<Servers>()
    private var gateway: GatewayProcess { Self.shared.value.gateway }

    override class func setUp() {
        super.setUp()
        shared.make {
            let certificates = try TestCertificates()
            let server = try HTTPSTestUpstream(certificates: certificates)
            let mutualServer = try HTTPSTestUpstream(certificates: certificates, requireClientCertificate: true)
            let redis = try RedisTestServer()
            let gateway = try GatewayProcess(directory: certificates.directory) { port, admin in
                config(port: port, admin: admin, redisPort: redis.port, certificates: certificates, plain: server.baseURL,
                       mutual: mutualServer.baseURL)
            }
            return Servers(certificates: certificates, server: server, mutualServer: mutualServer, redis: redis, gateway: gateway)
        }
    }

    override class func tearDown() {
        shared.tearDown {
            $0.gateway.stop()
            $0.server.stop()
            $0.mutualServer.stop()
            $0.redis.stop()
            try? FileManager.default.removeItem(atPath: $0.certificates.directory)
        }
        super.tearDown()
    }

    override func setUpWithError() throws { try Self.shared.check() }

    private static func config(port: Int, admin: Int, redisPort: Int, certificates: TestCertificates, plain: String, mutual: String) -> String {
        let (ca, wrongCA) = (certificates.caFile, certificates.wrongCAFile)
        let (cert, key) = (certificates.clientCertFile, certificates.clientKeyFile)
        return """
        listen: "127.0.0.1:\(port)"
        admin_listen: "127.0.0.1:\(admin)"
        redis: { url: "redis://127.0.0.1:\(redisPort)/0" }
        app_attest: { apps: ["TEAMID1234.com.example.app"], environments: [development] }
        upstreams:
          trusted: { url: "\(plain)", tls: { ca_file: "\(ca)" } }
          named: { url: "\(plain)", tls: { ca_file: "\(ca)", server_name: localhost } }
          system_cas: { url: "\(plain)" }
          untrusted: { url: "\(plain)", tls: { ca_file: "\(wrongCA)" } }
          wrong_name: { url: "\(plain)", tls: { ca_file: "\(ca)", server_name: wrong.example } }
          mtls: { url: "\(mutual)", tls: { ca_file: "\(ca)", cert_file: "\(cert)", key_file: "\(key)" } }
          mtls_without_cert: { url: "\(mutual)", tls: { ca_file: "\(ca)" } }
        routes:
          - { path_prefix: "/trusted/", upstream: trusted, policy: pass }
          - { path_prefix: "/named/", upstream: named, policy: pass }
          - { path_prefix: "/system-cas/", upstream: system_cas, policy: pass }
          - { path_prefix: "/untrusted/", upstream: untrusted, policy: pass }
          - { path_prefix: "/wrong-name/", upstream: wrong_name, policy: pass }
          - { path_prefix: "/mtls/", upstream: mtls, policy: pass }
          - { path_prefix: "/mtls-without-cert/", upstream: mtls_without_cert, policy: pass }
        """
    }

    private func get(_ path: String) throws -> Reply {
        let client = UpstreamClient(target: try UpstreamTarget(baseURL: gateway.baseURL, connectTimeoutMs: 2000, timeoutMs: 10_000))
        return try Reply(client.send(UpstreamRequest(method: "GET", pathAndQuery: path, headers: [HTTPField("Host", "gateway.test")])))
    }

    /// The refusal and its request line: status, reason, and curl's words in `detail`.
    private func assertTLSRefusal(_ path: String, detailContains expected: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let reply = try get(path)
        XCTAssertEqual(reply.status, 502, reply.text, file: file, line: line)
        XCTAssertEqual(reply.error, "upstream_tls_failed", reply.text, file: file, line: line)
        let requestId = try XCTUnwrap(reply.headers.values(named: "X-Request-Id").first, file: file, line: line)
        let logged = try XCTUnwrap(gateway.waitForEvent { $0["request_id"] as? String == requestId }, file: file, line: line)
        XCTAssertEqual(logged["reason"] as? String, "upstream_tls_failed", file: file, line: line)
        let detail = logged["detail"] as? String ?? ""
        XCTAssertTrue(detail.contains(expected), "detail: \(detail)", file: file, line: line)
    }

    func testAnUpstreamSignedByTheConfiguredCAAnswers() throws {
        let reply = try get("/trusted/page")
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertTrue(reply.text.contains("Ciphers"), "s_server's status page came through TLS: \(reply.text.prefix(200))")
    }

    func testServerNameIsTheNameVerifiedWhileTheConfiguredAddressIsDialled() throws {
        // The certificate names localhost and 127.0.0.1; the URL dials 127.0.0.1 and server_name asks for localhost.
        XCTAssertEqual(try get("/named/page").status, 200)
        try assertTLSRefusal("/wrong-name/page", detailContains: "wrong.example")
    }

    func testACertificateFromAnotherCAIsRefused() throws {
        try assertTLSRefusal("/untrusted/page", detailContains: "certificate")
        // Without tls, the system's CAs: the private CA is not among them.
        try assertTLSRefusal("/system-cas/page", detailContains: "certificate")
    }

    func testAClientCertificateIsShownWhenConfigured() throws {
        let reply = try get("/mtls/page")
        XCTAssertEqual(reply.status, 200, reply.text)
    }

    func testAnUpstreamThatRequiresAClientCertificateRefusesOneWithout() throws {
        try assertTLSRefusal("/mtls-without-cert/page", detailContains: "certificate required")
    }

    /// A loop's curl handles serve every https upstream in turn: one upstream's CA or client certificate never
    /// lingers into the next one's exchange (trusted after untrusted, the system's CAs after a private one).
    func testUpstreamsWithDifferentTLSSettingsTakeTurnsWithoutSharingThem() throws {
        for _ in 0..<3 {
            for (path, status) in [("/trusted/", 200), ("/system-cas/", 502), ("/mtls/", 200), ("/mtls-without-cert/", 502),
                                   ("/named/", 200), ("/untrusted/", 502)] {
                let reply = try get(path + "turns")
                XCTAssertEqual(reply.status, status, "\(path): \(reply.text)")
            }
        }
    }

    func testTLSFailuresAreCountedUnderTheirReason() throws {
        _ = try get("/untrusted/counted")
        let client = UpstreamClient(target: try UpstreamTarget(baseURL: gateway.adminURL, connectTimeoutMs: 1000, timeoutMs: 3000))
        let metrics = try Reply(client.send(UpstreamRequest(method: "GET", pathAndQuery: "/metrics", headers: [HTTPField("Host", "admin")]))).text
        XCTAssertTrue(metrics.contains("gateway_upstream_errors_total{upstream=\"untrusted\",reason=\"upstream_tls_failed\"}"), metrics)
    }
}
