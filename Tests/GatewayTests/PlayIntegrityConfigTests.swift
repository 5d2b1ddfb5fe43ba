import AssertionCheck
import DeviceSimulator
import Foundation
@testable import Gateway
import TestSupport
import XCTest

/// `play_integrity:` and the routes' `token_methods`: values, defaults, and every refusal check-config reports.
final class PlayIntegrityConfigTests: XCTestCase {
    nonisolated(unsafe) static var directory: String!

    override class func setUp() {
        super.setUp()
        directory = TestPaths.temporaryDirectory("play-integrity-config")
        _ = try! PlayIntegrityTokenMaker().writeKeys(to: directory)
        let openssl = try! ChildProcess(executable: "/usr/bin/env", arguments: ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt",
                                                                               "ec_paramgen_curve:P-256", "-out", "\(directory!)/token.pem"])
        precondition(openssl.waitForExit(timeout: 10) == 0, "openssl genpkey failed")
        try! "c2hvcnQ=\n".write(toFile: directory + "/short.key", atomically: true, encoding: .utf8)
        try! FileManager.default.copyItem(atPath: GoogleTestAccount.shared.writeFile(tokenURI: "https://oauth2.googleapis.com/token"),
                                          toPath: directory + "/service-account.json")
        try! "{}".write(toFile: directory + "/not-an-account.json", atomically: true, encoding: .utf8)
    }

    static let keys = "decryption_key_file: decryption.key\n  verification_key_file: verification.key"

    private func yaml(_ section: String?, token: Bool = true,
                      route: String = #"- { path_prefix: "/", upstream: api, policy: assert, accept: [token] }"#) -> String {
        """
        app_attest:
          apps: ["ABCDE12345.com.example.app"]
        \(token ? "  token: { signing_key_file: token.pem }" : "")
        \(section.map { "play_integrity:\n  " + $0 } ?? "")
        upstreams: { api: { url: "http://127.0.0.1:9000" } }
        routes:
          \(route)
        """
    }

    private func issues(_ text: String) -> [String] {
        do {
            _ = try GatewayConfig.parse(yaml: text, baseDirectory: Self.directory)
            XCTFail("expected the configuration to be refused:\n\(text)")
            return []
        } catch {
            return error.issues.map(\.description)
        }
    }

    func testValuesAndDefaults() throws {
        let config = try GatewayConfig.parse(yaml: yaml("package_names: [com.example.app]\n  " + Self.keys), baseDirectory: Self.directory)
        let play = try XCTUnwrap(config.playIntegrity)
        XCTAssertEqual(play.packageNames, ["com.example.app"])
        XCTAssertNotNil(play.localKeys)
        XCTAssertEqual(play.decryptionKeyFile, Self.directory + "/decryption.key")
        XCTAssertEqual(play.maxTokenAgeSeconds, 300)
        XCTAssertTrue(play.requireAppRecognized)
        XCTAssertEqual(play.requireDevice, ["MEETS_DEVICE_INTEGRITY"])
        XCTAssertFalse(play.requireLicensed)
        XCTAssertEqual(play.certificateDigests, [])
        XCTAssertEqual(play.apiURL, "https://playintegrity.googleapis.com")
        XCTAssertNil(config.routes[0].tokenMethods, "every configured method")

        let digest = SHA256.hash(Array("cert".utf8))
        let hex = digest.map { String(format: "%02X", $0) }.joined(separator: ":")
        let full = try GatewayConfig.parse(yaml: yaml("""
            package_names: [com.example.app, com.example.app_two]
              certificate_sha256: ["\(Base64.encodeURLSafe(digest))", "\(hex)"]
              \(Self.keys)
              service_account_file: service-account.json
              api_url: "http://127.0.0.1:9999"
              max_token_age_seconds: 60
              require_app_recognized: false
              require_device: [MEETS_STRONG_INTEGRITY, MEETS_VIRTUAL_INTEGRITY]
              require_licensed: true
            """, route: #"- { path_prefix: "/", upstream: api, policy: assert, accept: [token], token_methods: [play_integrity] }"#),
            baseDirectory: Self.directory)
        let play2 = try XCTUnwrap(full.playIntegrity)
        XCTAssertEqual(play2.certificateDigests, [digest, digest], "base64url and the Console's hex read alike")
        XCTAssertEqual(play2.serviceAccountFile, Self.directory + "/service-account.json")
        XCTAssertEqual(play2.serviceAccount?.clientEmail, GoogleTestAccount.shared.clientEmail)
        XCTAssertEqual(play2.apiURL, "http://127.0.0.1:9999")
        XCTAssertEqual(play2.maxTokenAgeSeconds, 60)
        XCTAssertFalse(play2.requireAppRecognized)
        XCTAssertEqual(play2.requireDevice, ["MEETS_STRONG_INTEGRITY", "MEETS_VIRTUAL_INTEGRITY"])
        XCTAssertTrue(play2.requireLicensed)
        XCTAssertEqual(full.routes[0].tokenMethods, [.playIntegrity])
    }

    func testRefusals() {
        let cases: [(String, String)] = [
            (yaml(Self.keys), "play_integrity.package_names: required key is missing"),
            (yaml("package_names: []\n  " + Self.keys), "play_integrity.package_names: at least one package name is required"),
            (yaml("package_names: [nodots]\n  " + Self.keys), "play_integrity.package_names[0]: expected an Android package name"),
            (yaml("package_names: [com.example.app, com.example.app]\n  " + Self.keys), "play_integrity.package_names[1]: com.example.app is listed twice"),
            (yaml("package_names: [com.example.app]"), "play_integrity.decryption_key_file: configure decryption_key_file"),
            (yaml("package_names: [com.example.app]\n  decryption_key_file: decryption.key"), "play_integrity.decryption_key_file: decryption_key_file and verification_key_file go together"),
            (yaml("package_names: [com.example.app]\n  decryption_key_file: short.key\n  verification_key_file: verification.key"),
             "play_integrity.decryption_key_file: must hold base64 of a 32-byte AES key"),
            (yaml("package_names: [com.example.app]\n  decryption_key_file: decryption.key\n  verification_key_file: decryption.key"),
             "play_integrity.verification_key_file: must hold base64 of a DER SubjectPublicKeyInfo"),
            (yaml("package_names: [com.example.app]\n  decryption_key_file: missing.key\n  verification_key_file: verification.key"),
             "play_integrity.decryption_key_file: cannot read"),
            (yaml("package_names: [com.example.app]\n  service_account_file: not-an-account.json"),
             "play_integrity.service_account_file: google_invalid_configuration: service account file"),
            (yaml("package_names: [com.example.app]\n  certificate_sha256: [abc]\n  " + Self.keys), "play_integrity.certificate_sha256[0]: expected a SHA-256 digest"),
            (yaml("package_names: [com.example.app]\n  require_device: [MEETS_NOTHING]\n  " + Self.keys), "play_integrity.require_device[0]: expected one of"),
            (yaml("package_names: [com.example.app]\n  require_device: []\n  " + Self.keys), "play_integrity.require_device: must list at least one"),
            (yaml("package_names: [com.example.app]\n  max_token_age_seconds: 0\n  " + Self.keys), "play_integrity.max_token_age_seconds: expected an integer in 1...86400"),
            (yaml("package_names: [com.example.app]\n  api_url: ftp://x\n  " + Self.keys), "play_integrity.api_url: scheme must be"),
            (yaml("package_names: [com.example.app]\n  require_licenced: true\n  " + Self.keys), "play_integrity.require_licenced: unknown key; did you mean \"require_licensed\"?"),
            (yaml("package_names: [com.example.app]\n  " + Self.keys, token: false, route: #"- { path_prefix: "/", upstream: api, policy: assert }"#),
             "play_integrity: mints gateway tokens, which need an app_attest.token section"),
            (yaml(nil, route: #"- { path_prefix: "/", upstream: api, policy: assert, accept: [token], token_methods: [play_integrity] }"#),
             "routes: routes[0] lists token_methods play_integrity, which needs a play_integrity: section"),
            (yaml(nil, route: #"- { path_prefix: "/", upstream: api, policy: assert, token_methods: [app_attest] }"#),
             "routes[0].token_methods: only valid on routes whose accept lists token"),
            (yaml(nil, route: #"- { path_prefix: "/", upstream: api, policy: assert, accept: [token], token_methods: [] }"#),
             "routes[0].token_methods: must list app_attest, play_integrity or both"),
            (yaml(nil, route: #"- { path_prefix: "/", upstream: api, policy: assert, accept: [token], token_methods: [android] }"#),
             "routes[0].token_methods[0]: expected one of app_attest, play_integrity"),
        ]
        for (text, expected) in cases {
            let found = issues(text)
            XCTAssertTrue(found.contains { $0.hasPrefix(expected) }, "expected \(expected), got \(found)")
        }
    }

    /// operations.md has a row for each code the exchange and token routes can answer, with its status.
    func testEveryReasonCodeIsDocumentedWithItsStatus() throws {
        let operations = try String(contentsOfFile: TestPaths.repository + "/docs/operations.md", encoding: .utf8)
        let rows = operations.split(separator: "\n").filter { $0.hasPrefix("| `") }
        let errors = IntegrityError.Reason.allCases.map { GatewayError.integrity(IntegrityError($0, "")) } + [.tokenMethodRefused(""), .integrityUnavailable("")]
        for error in errors {
            XCTAssertTrue(rows.contains { $0.contains("`\(error.reasonCode)`") && $0.contains("| \(error.status) |") },
                          "docs/operations.md: no row for \(error.reasonCode) with \(error.status)")
        }
    }

    func testKeyFilesAreNeverQuoted() {
        let found = issues(yaml("package_names: [com.example.app]\n  decryption_key_file: verification.key\n  verification_key_file: verification.key"))
        let key = (try? String(contentsOfFile: Self.directory + "/verification.key", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
        XCTAssertFalse(found.joined().contains(key), "\(found)")
    }
}
