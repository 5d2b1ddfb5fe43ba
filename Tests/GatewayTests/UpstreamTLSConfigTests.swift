import Foundation
@testable import Gateway
import TestSupport
@testable import Upstream
import XCTest

/// `upstreams.<name>.tls`: the files checked at load (readable PEM, certificate and key together and matching),
/// only on https:// upstreams; and how curl is pointed at a `server_name` that differs from the host dialled.
final class UpstreamTLSConfigTests: XCTestCase {
    private var directory = ""

    override func setUp() { directory = TestPaths.temporaryDirectory("upstream-tls-config") }

    private func yaml(_ upstream: String) -> String {
        """
        app_attest: { apps: ["ABCDE12345.com.example.app"] }
        upstreams:
          api: \(upstream)
        routes: [{ path_prefix: "/", upstream: api, policy: pass }]
        """
    }

    private func issues(_ upstream: String) -> [String] {
        do {
            _ = try GatewayConfig.parse(yaml: yaml(upstream), baseDirectory: directory)
            XCTFail("expected the configuration to be refused")
            return []
        } catch {
            return error.issues.map(\.description)
        }
    }

    func testTLSFilesAreResolvedAndLoadedForHTTPSUpstreams() throws {
        let certificates = try TestCertificates(directory: directory)
        let config = try GatewayConfig.parse(yaml: yaml("""
            { url: "https://10.0.0.7:8443", tls: { ca_file: ca.crt, cert_file: client.crt, key_file: client.key, server_name: api.internal } }
            """), baseDirectory: directory)
        XCTAssertEqual(config.upstreams.first?.tls, UpstreamTLSSettings(caFile: certificates.caFile, certFile: certificates.clientCertFile,
                                                                        keyFile: certificates.clientKeyFile, serverName: "api.internal"))
        XCTAssertNil(try GatewayConfig.parse(yaml: yaml("{ url: \"https://api.example.com\" }"), baseDirectory: directory).upstreams.first?.tls)
    }

    func testTLSSettingsThatCannotWorkAreRefusedWithTheKeyPath() throws {
        _ = try TestCertificates(directory: directory)
        XCTAssertEqual(issues("{ url: \"http://127.0.0.1:9000\", tls: { ca_file: ca.crt } }"), [
            "upstreams.api.tls: tls applies to https:// upstreams only (this url is http://) (line 3)",
        ])
        XCTAssertEqual(issues("{ url: \"https://127.0.0.1:9000\", tls: { ca_file: missing.crt, cert_file: client.crt, verify: false } }"), [
            "upstreams.api.tls.ca_file: cannot read \(directory)/missing.crt (line 3)",
            "upstreams.api.tls.cert_file: cert_file and key_file go together (the client certificate and its key) (line 3)",
            "upstreams.api.tls.verify: unknown key (line 3)",
        ])
        // Both files are PEM, but the key is the server's: OpenSSL refuses the pair at load, not at the first request.
        let mismatch = issues("{ url: \"https://127.0.0.1:9000\", tls: { cert_file: client.crt, key_file: server.key } }")
        XCTAssertEqual(mismatch.count, 1, "\(mismatch)")
        XCTAssertTrue(mismatch.first?.hasPrefix("upstreams.api.tls: ") == true && mismatch.first?.contains("does not match") == true, "\(mismatch)")
        XCTAssertFalse(mismatch.joined().contains("PRIVATE KEY-----"), "the key's content is never printed")
    }

    func testServerNameReplacesTheHostCurlVerifiesButNotTheAddressDialledOrTheHostHeader() throws {
        let ipv4 = try XCTUnwrap(CurlAddressing(baseURL: "https://127.0.0.1:8443/api", serverName: "api.internal"))
        XCTAssertEqual(ipv4, CurlAddressing(baseURL: "https://api.internal:8443/api", connectTo: "api.internal:8443:127.0.0.1:8443",
                                            hostHeader: "127.0.0.1:8443"))
        let ipv6 = try XCTUnwrap(CurlAddressing(baseURL: "https://[::1]", serverName: "api.internal"))
        XCTAssertEqual(ipv6, CurlAddressing(baseURL: "https://api.internal:443", connectTo: "api.internal:443:[::1]:443", hostHeader: "[::1]"))
        XCTAssertNil(CurlAddressing(baseURL: "https://api.example.com", serverName: nil))
        XCTAssertThrowsError(try UpstreamTarget(baseURL: "http://127.0.0.1:9000", timeouts: UpstreamTimeouts(connectMs: 1, firstByteMs: 1, idleMs: 1, totalMs: 0),
                                                tls: UpstreamTLSSettings(caFile: "/ca.crt")), "TLS settings on a plain http:// target")
    }
}
