import Foundation
@testable import Gateway
import XCTest

/// `app_attest.debug_tokens` and `allow_debug`: read, validated, and the production warning.
final class DebugTokenConfigTests: XCTestCase {
    static let hash = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  // SHA-256 of "abc"

    private func yaml(environments: String = "[development]", tokens: String, route: String = "") -> String {
        """
        app_attest:
          apps: ["ABCDE12345.com.example.app"]
          environments: \(environments)
          debug_tokens: \(tokens)
        upstreams: { api: { url: "http://127.0.0.1:9000" } }
        routes:
          - { path_prefix: "/v1/", upstream: api, policy: assert }
          - { path_prefix: "/", upstream: api, policy: pass\(route) }
        """
    }

    private func issues(_ text: String) -> [String] {
        do {
            _ = try GatewayConfig.parse(yaml: text)
            XCTFail("expected the configuration to be refused")
            return []
        } catch {
            return error.issues.map(\.description)
        }
    }

    func testTokensAreReadByNameAndHash() throws {
        let config = try GatewayConfig.parse(yaml: yaml(tokens: "[{ name: ci, sha256: \"\(Self.hash.uppercased())\" }, { name: sim-1.x, sha256: \"\(String(repeating: "0", count: 64))\" }]"))
        XCTAssertEqual(config.appAttest.debugTokens.map(\.name), ["ci", "sim-1.x"])
        XCTAssertEqual(config.appAttest.debugTokens.first?.sha256, Array(SHA256Test.abc))
        XCTAssertTrue(config.routes.allSatisfy(\.allowDebug), "allowed unless a route says otherwise")
        XCTAssertNil(config.debugTokenWarning)
        XCTAssertTrue(try GatewayConfig.parse(yaml: yaml(tokens: "[]")).appAttest.debugTokens.isEmpty)
    }

    func testBadTokensAreRefusedWithTheirPath() {
        XCTAssertEqual(issues(yaml(tokens: "[{ name: ci, sha256: \"abc\" }]")),
                       ["app_attest.debug_tokens[0].sha256: expected the SHA-256 of the token as 64 hex digits (`printf %s TOKEN | sha256sum`) (line 4)"])
        XCTAssertEqual(issues(yaml(tokens: "[{ name: \"c i\", sha256: \"\(Self.hash)\" }]")),
                       ["app_attest.debug_tokens[0].name: expected 1-64 characters of A-Z a-z 0-9 _ . -, got \"c i\" (line 4)"])
        XCTAssertEqual(issues(yaml(tokens: "[{ name: ci, sha256: \"\(Self.hash)\" }, { name: ci, sha256: \"\(String(repeating: "1", count: 64))\" }]")),
                       ["app_attest.debug_tokens[1].name: ci is listed twice (line 4)"])
        XCTAssertEqual(issues(yaml(tokens: "[{ name: a, sha256: \"\(Self.hash)\" }, { name: b, sha256: \"\(Self.hash)\" }]")),
                       ["app_attest.debug_tokens[1].sha256: this hash is already listed under another name (line 4)"])
        XCTAssertEqual(issues(yaml(tokens: "[{ name: ci }]")), ["app_attest.debug_tokens[0].sha256: required key is missing (line 4)"])
        XCTAssertEqual(issues(yaml(tokens: "[{ name: ci, sha256: \"\(Self.hash)\", secret: abc }]")),
                       ["app_attest.debug_tokens[0].secret: unknown key (line 4)"])
    }

    func testAllowDebugIsAnAssertRouteKey() throws {
        XCTAssertEqual(issues(yaml(tokens: "[]", route: ", allow_debug: false")),
                       ["routes[1].allow_debug: only valid with policy assert (line 8)"])
        let config = try GatewayConfig.parse(yaml: yaml(tokens: "[]").replacingOccurrences(of: "policy: assert }", with: "policy: assert, allow_debug: false }"))
        XCTAssertEqual(config.routes.map(\.allowDebug), [false, true])
    }

    func testDebugTokensOnAProductionOnlyGatewayAreWarnedAbout() throws {
        let token = "[{ name: ci, sha256: \"\(Self.hash)\" }]"
        XCTAssertNotNil(try GatewayConfig.parse(yaml: yaml(environments: "[production]", tokens: token)).debugTokenWarning)
        XCTAssertNil(try GatewayConfig.parse(yaml: yaml(environments: "[production, development]", tokens: token)).debugTokenWarning)
        XCTAssertNil(try GatewayConfig.parse(yaml: yaml(environments: "[production]", tokens: "[]")).debugTokenWarning)
    }
}

private enum SHA256Test {
    static let abc: [UInt8] = [0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
                               0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad]
}
