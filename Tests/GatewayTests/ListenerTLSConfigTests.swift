import Foundation
@testable import Gateway
import TestSupport
import TLS
import XCTest

/// `server.tls`: the certificates are loaded while the file is read, so `check-config` and a reload see what a
/// handshake would; TLS 1.0 and 1.1 are refused; SNI names are checked.
final class ListenerTLSConfigTests: XCTestCase {
    private var certificates: TestCertificates!

    override func setUpWithError() throws { certificates = try TestCertificates() }

    private func yaml(_ tls: String) -> String {
        """
        server:
          tls: \(tls)
        app_attest: { apps: ["ABCDE12345.com.example.app"] }
        upstreams: { api: { url: "http://127.0.0.1:9000" } }
        routes: [{ path_prefix: "/", upstream: api, policy: pass }]
        """
    }

    private func issues(_ tls: String) -> [String] {
        do {
            _ = try GatewayConfig.parse(yaml: yaml(tls), baseDirectory: certificates.directory)
            XCTFail("expected the configuration to be refused")
            return []
        } catch {
            return error.issues.map(\.description)
        }
    }

    func testDefaultsAndSNICertificatesAreRead() throws {
        let api = try certificates.issueServerCertificate("api", dnsNames: ["api.example.test"])
        let config = try GatewayConfig.parse(yaml: yaml("""
            { cert_file: server.crt, key_file: server.key, min_version: "1.3", handshake_timeout_ms: 2500,
                certificates: [{ server_names: [API.example.test, "*.example.org"], cert_file: api.crt, key_file: api.key }] }
            """), baseDirectory: certificates.directory)
        let tls = try XCTUnwrap(config.tls)
        XCTAssertEqual(tls.settings.minVersion, .tls13)
        XCTAssertEqual(tls.handshakeTimeoutMs, 2500)
        XCTAssertEqual(tls.settings.defaultCertificate.certFile, certificates.serverCertFile)
        XCTAssertEqual(tls.settings.certificates, [TLSServerCertificate(serverNames: ["api.example.test", "*.example.org"],
                                                                        certFile: api.cert, keyFile: api.key)])
        let spelled = try GatewayConfig.parse(yaml: yaml("{ cert_file: server.crt, key_file: server.key, min_version: TLSv1.3 }"),
                                              baseDirectory: certificates.directory)
        XCTAssertEqual(spelled.tls?.settings.minVersion, .tls13, "OpenSSL's spelling is read too")
        let plain = try GatewayConfig.parse(yaml: yaml("{ cert_file: server.crt, key_file: server.key }"), baseDirectory: certificates.directory)
        XCTAssertEqual(plain.tls?.settings.minVersion, .tls12, "TLS 1.2 by default")
        XCTAssertEqual(plain.tls?.handshakeTimeoutMs, 10_000)
    }

    func testOldVersionsMismatchedKeysAndBadNamesAreRefused() {
        for (old, shown) in [("1.0", "1.0"), ("1.1", "1.1"), ("TLSv1.1", "1.1"), ("TLSv1", "1")] {
            let refused = issues("{ cert_file: server.crt, key_file: server.key, min_version: \"\(old)\" }")
            XCTAssertTrue(refused.contains { $0.contains("server.tls.min_version") && $0.contains("TLS \(shown) is refused") }, "\(refused)")
        }
        XCTAssertTrue(issues("{ cert_file: server.crt, key_file: server.key, min_version: \"2.0\" }").contains { $0.contains("got \"2.0\"") })
        let mismatch = issues("{ cert_file: server.crt, key_file: client.key }")
        XCTAssertTrue(mismatch.contains { $0.contains("server.tls") && $0.contains("does not match") }, "\(mismatch)")
        let missing = issues("{ cert_file: nowhere.crt, key_file: server.key }")
        XCTAssertTrue(missing.contains { $0.contains("server.tls.cert_file") && $0.contains("cannot read") }, "\(missing)")
        XCTAssertTrue(issues("{ key_file: server.key }").contains { $0.contains("server.tls.cert_file") }, "cert_file is required")
        let names = issues("""
            { cert_file: server.crt, key_file: server.key, certificates: [
                { server_names: ["bad name", "a..b"], cert_file: server.crt, key_file: server.key },
                { server_names: [x.test], cert_file: server.crt, key_file: server.key },
                { server_names: [X.test], cert_file: server.crt, key_file: server.key }] }
            """)
        XCTAssertTrue(names.contains { $0.contains("\"bad name\"") }, "\(names)")
        XCTAssertTrue(names.contains { $0.contains("\"a..b\"") }, "\(names)")
        XCTAssertTrue(names.contains { $0.contains("\"x.test\" is listed for two certificates") }, "\(names)")
        let staple = issues("{ cert_file: server.crt, key_file: server.key, ocsp_staple_file: server.crt }")
        XCTAssertTrue(staple.contains { $0.contains("not a DER OCSP response") }, "a PEM file is no staple: \(staple)")
        XCTAssertTrue(issues("{ cert_file: server.crt, key_file: server.key, ciphers: ALL }").contains { $0.contains("server.tls.ciphers: unknown key") })
    }
}
