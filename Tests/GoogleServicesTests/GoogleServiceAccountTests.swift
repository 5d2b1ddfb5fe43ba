import AssertionCheck
import Foundation
import GoogleServices
import TestSupport
import XCTest

/// The key file, the RSA key and the assertion: what Google's token endpoint sees of this client.
final class GoogleServiceAccountTests: XCTestCase {
    private let account = GoogleTestAccount.shared
    private let tokenURI = "https://oauth2.googleapis.com/token"

    private func loadError(_ changes: [String: Any?]) throws -> String {
        let path = try account.writeFile(tokenURI: tokenURI, changes: changes)
        return loadError(path: path)
    }

    private func loadError(path: String) -> String {
        do {
            _ = try GoogleServiceAccount.load(path: path)
            return "loaded"
        } catch {
            XCTAssertEqual(error.reasonCode, "google_invalid_configuration")
            XCTAssertTrue("\(error)".contains(path), "names the file: \(error)")
            return "\(error)"
        }
    }

    func testLoadsGooglesKeyFileAndNeverPrintsTheKey() throws {
        let loaded = try GoogleServiceAccount.load(path: account.writeFile(tokenURI: tokenURI))
        XCTAssertEqual(loaded.clientEmail, account.clientEmail)
        XCTAssertEqual(loaded.privateKeyID, account.keyID)
        XCTAssertEqual(loaded.tokenURI, tokenURI)
        XCTAssertEqual(loaded.privateKey.publicKey.spki, account.publicKey.spki)
        var printed = "\(loaded) \(loaded.privateKey)"
        dump(loaded, to: &printed)
        let keyLine = account.privateKeyPEM.split(separator: "\n")[1]
        XCTAssertFalse(printed.contains(keyLine))
        XCTAssertTrue(printed.contains(account.clientEmail))
    }

    func testEachMissingOrBadFieldIsNamed() throws {
        for field in ["type", "client_email", "private_key", "private_key_id", "token_uri"] {
            XCTAssertTrue(try loadError([field: nil]).contains("`\(field)` is missing"), field)
            XCTAssertTrue(try loadError([field: 42]).contains("`\(field)` must be a non-empty string"), field)
            XCTAssertTrue(try loadError([field: ""]).contains("`\(field)` must be a non-empty string"), field)
        }
        let cases: [(String, Any, String)] = [
            ("type", "authorized_user", "`type` must be \"service_account\""),
            ("client_email", "no-at-sign", "`client_email` must be an email address"),
            ("client_email", "a\"b@example.com", "`client_email` must be an email address"),
            ("private_key_id", "has space", "`private_key_id` must be"),
            ("private_key", "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n", "`private_key`: not an unencrypted PEM private key"),
            ("private_key", AppleTestKey.pem, "`private_key`: private key is not an RSA key of at least 2048 bits"),
            ("private_key", try GoogleTestAccount.generateKey(bits: 1024), "`private_key`: private key is not an RSA key of at least 2048 bits"),
            ("token_uri", "ftp://oauth2.googleapis.com/token", "`token_uri` must be an http(s) URL"),
            ("token_uri", "https:///token", "`token_uri` must be an http(s) URL"),
        ]
        for (field, value, expected) in cases {
            let message = try loadError([field: value])
            XCTAssertTrue(message.contains(expected), "\(field): \(message)")
            XCTAssertFalse(message.contains("MII"), "no key material in \(message)")
        }
    }

    func testUnreadableOrNonJSONFilesAreRefused() throws {
        XCTAssertTrue(loadError(path: "/nonexistent/service-account.json").contains("cannot read"))
        let directory = TestPaths.temporaryDirectory("google-account")
        for (name, content) in [("array.json", "[1, 2]"), ("text.json", "client_email=x"), ("big.json", String(repeating: " ", count: 70_000) + "{}")] {
            let path = directory + "/" + name
            try content.write(toFile: path, atomically: true, encoding: .utf8)
            let message = loadError(path: path)
            XCTAssertTrue(message.contains("not a JSON object") || message.contains("larger than"), message)
        }
    }

    func testGoogleRefusesAnAssertionSignedByAnotherKeyOrAccount() async throws {
        let google = try FakeGooglePlayServer()
        defer { google.stop() }
        let other = try GoogleTestAccount.generateKey(bits: 2048)
        for (changes, refusal) in [(["private_key": other], "Invalid JWT Signature."),
                                   (["client_email": "someone-else@test-project.iam.gserviceaccount.com"], "The OAuth client was not found.")] {
            let api = try PlayIntegrityAPI(serviceAccount: GoogleServiceAccount.load(path: google.serviceAccountFile(changes: changes)),
                                           apiURL: google.baseURL, options: GoogleServiceOptions(retry: .standard))
            let error = await serviceError { _ = try await api.decodeIntegrityToken(packageName: Verdicts.packageName, token: "t") }
            XCTAssertEqual(error?.reasonCode, "google_credentials_refused")
            XCTAssertTrue(String(describing: error).contains(refusal), String(describing: error))
            XCTAssertTrue(google.requests.last?.refusal?.contains(refusal) == true)
        }
        XCTAssertEqual(google.requests.map(\.endpoint), [.token, .token], "refusals are not retried")
    }

    func testRSAKeysSignAndVerifyRS256() throws {
        let key = try RSAPrivateKey(pem: account.privateKeyPEM)
        let message = Array("header.claims".utf8)
        let signature = try key.rs256Signature(for: message)
        XCTAssertEqual(signature.count, 256)
        XCTAssertEqual(try key.rs256Signature(for: message), signature, "PKCS#1 v1.5 is deterministic")
        XCTAssertTrue(key.publicKey.isValidRS256Signature(signature, for: message))
        XCTAssertFalse(key.publicKey.isValidRS256Signature(signature, for: message + [0]))
        var flipped = signature
        flipped[100] ^= 1
        XCTAssertFalse(key.publicKey.isValidRS256Signature(flipped, for: message))
        XCTAssertFalse(account.publicKey.isValidRS256Signature(try RSAPrivateKey(pem: GoogleTestAccount.generateKey(bits: 2048)).rs256Signature(for: message), for: message))
        XCTAssertEqual("\(key)", "RSAPrivateKey(<redacted>)")
        XCTAssertThrowsError(try RSAPublicKey(spki: P256PrivateKey(pem: AppleTestKey.pem).publicKey.spki))
        XCTAssertThrowsError(try RSAPublicKey(spki: account.publicKey.spki + [0]), "trailing bytes")
    }

    /// Python's `cryptography` (not this project's code) verifies the assertion the client sent: the JWT is
    /// standard RS256, not merely consistent with our own verifier.
    func testAssertionVerifiesWithPythonCryptography() async throws {
        let google = try FakeGooglePlayServer()
        defer { google.stop() }
        let api = try PlayIntegrityAPI(serviceAccount: GoogleServiceAccount.load(path: google.serviceAccountFile()), apiURL: google.baseURL)
        _ = try await api.decodeIntegrityToken(packageName: Verdicts.packageName, token: google.standardToken(for: Verdicts.genuine))
        let assertion = try XCTUnwrap(google.requests(to: .token).first?.form["assertion"])
        let spki = Data(account.publicKey.spki).base64EncodedString()
        let verdict = try PythonRS256.verify(token: assertion, spki: spki)
        guard let verdict else {
            throw Prerequisite.missing("Python's cryptography package is not installed and could not be (pip install cryptography)")
        }
        XCTAssertEqual(verdict, "valid")
        let parts = assertion.split(separator: ".").map(String.init)
        let forged = parts[0] + "." + Base64.encodeURLSafe(Array(#"{"iss":"someone-else"}"#.utf8)) + "." + parts[2]
        XCTAssertEqual(try PythonRS256.verify(token: forged, spki: spki), "invalid")
    }
}

/// RS256 verification by Python's `cryptography` package.
enum PythonRS256 {
    static let script = """
    import base64, json, sys
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding
    except ImportError:
        print("missing"); sys.exit(0)
    def b64(text): return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    token, spki = sys.argv[1], base64.b64decode(sys.argv[2])
    head, body, signature = token.split(".")
    assert json.loads(b64(head))["alg"] == "RS256"
    key = serialization.load_der_public_key(spki)
    try:
        key.verify(b64(signature), (head + "." + body).encode(), padding.PKCS1v15(), hashes.SHA256())
        print("valid")
    except InvalidSignature:
        print("invalid")
    """

    /// "valid" or "invalid"; nil when `cryptography` is not importable.
    static func verify(token: String, spki: String) throws -> String? {
        let result = try Command.run("python3", ["-c", script, token, spki], timeout: 20)
        XCTAssertEqual(result.status, 0, result.output)
        let answer = result.output.split(separator: "\n").last.map(String.init) ?? ""
        return answer == "missing" ? nil : answer
    }
}
