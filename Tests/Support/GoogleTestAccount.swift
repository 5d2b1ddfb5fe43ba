import AssertionCheck
import Foundation

/// A Google service account for tests: a fresh RSA-2048 key made with the openssl command line (nothing secret
/// is committed), and the JSON key file Google would hand out for it, pointing at a fake token endpoint.
public struct GoogleTestAccount: Sendable {
    public let clientEmail: String
    /// 40 hex digits, like Google's.
    public let keyID: String
    public let privateKeyPEM: String
    public let publicKey: RSAPublicKey

    /// One key per test process: RSA key generation costs a fraction of a second.
    public static let shared: GoogleTestAccount = {
        do { return try make() } catch { fatalError("cannot make the test service account: \(error)") }
    }()

    public static func make(clientEmail: String = "attest-gateway@test-project.iam.gserviceaccount.com") throws -> GoogleTestAccount {
        let pem = try generateKey(bits: 2048)
        let keyID = (0..<20).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        return GoogleTestAccount(clientEmail: clientEmail, keyID: keyID, privateKeyPEM: pem, publicKey: try RSAPrivateKey(pem: pem).publicKey)
    }

    /// An unencrypted PKCS#8 PEM RSA key of `bits` (`openssl genpkey`).
    public static func generateKey(bits: Int) throws -> String {
        let path = TestPaths.temporaryDirectory("google-key") + "/key.pem"
        let result = try Command.run("openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:\(bits)", "-out", path])
        guard result.status == 0 else { throw TestSupportError("openssl genpkey failed: \(result.output)") }
        return try String(contentsOfFile: path, encoding: .utf8)
    }

    /// The key file's members as Google writes them; `changes` replaces members (nil removes one).
    public func fileMembers(tokenURI: String, changes: [String: Any?] = [:]) -> [String: Any] {
        var members: [String: Any] = [
            "type": "service_account", "project_id": "test-project", "private_key_id": keyID, "private_key": privateKeyPEM,
            "client_email": clientEmail, "client_id": "100000000000000000001", "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": tokenURI, "universe_domain": "googleapis.com",
        ]
        for (name, value) in changes { members[name] = value }
        return members
    }

    /// Writes the key file (with `changes`) and answers its path.
    public func writeFile(tokenURI: String, changes: [String: Any?] = [:]) throws -> String {
        let path = TestPaths.temporaryDirectory("google-account") + "/service-account.json"
        let data = try JSONSerialization.data(withJSONObject: fileMembers(tokenURI: tokenURI, changes: changes), options: [.prettyPrinted])
        try data.write(to: URL(fileURLWithPath: path))
        return path
    }
}
