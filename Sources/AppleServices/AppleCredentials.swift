import AssertionCheck
import Foundation
import Synchronization

/// Who signs the JWTs for Apple's server APIs: the team, the key id Apple assigned and its `.p8` key.
/// Printing it shows the ids only.
public struct AppleCredentials: Sendable, CustomStringConvertible {
    public let teamID: String
    public let keyID: String
    public let privateKey: P256PrivateKey

    /// Ids are Apple's alphanumeric identifiers (10 characters today); they go into the JWT verbatim.
    public init(teamID: String, keyID: String, privateKey: P256PrivateKey) throws(AppleServiceError) {
        for (name, value) in [("team id", teamID), ("key id", keyID)] {
            guard !value.isEmpty, value.count <= 64, value.utf8.allSatisfy(Self.isIdentifierByte) else {
                throw .invalidConfiguration("\(name) \"\(value.prefix(64))\" must be 1 to 64 letters or digits")
            }
        }
        self.teamID = teamID
        self.keyID = keyID
        self.privateKey = privateKey
    }

    /// `pem` is the content of the `.p8` file (PKCS#8 PEM of a P-256 key).
    public init(teamID: String, keyID: String, privateKeyPEM pem: String) throws(AppleServiceError) {
        let key: P256PrivateKey
        do throws(VerificationError) {
            key = try P256PrivateKey(pem: pem)
        } catch {
            throw .invalidConfiguration("private key for key id \(keyID): \(error.message)")
        }
        try self.init(teamID: teamID, keyID: keyID, privateKey: key)
    }

    public init(teamID: String, keyID: String, privateKeyFile path: String) throws(AppleServiceError) {
        guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw .invalidConfiguration("cannot read the private key file \(path)")
        }
        try self.init(teamID: teamID, keyID: keyID, privateKeyPEM: pem)
    }

    public var description: String { "AppleCredentials(team: \(teamID), key: \(keyID))" }

    private static func isIdentifierByte(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}

/// The ES256 JWT Apple's server APIs authenticate with, made once and reused: Apple accepts a token for an
/// hour, so it is replaced after `refreshAfter` (20 minutes by default), well before that. Thread-safe.
public final class AppleJWT: Sendable {
    public let credentials: AppleCredentials
    public let refreshAfter: TimeInterval
    private let clock: @Sendable () -> Date
    private let cached = Mutex<(token: String, issuedAt: Date)?>(nil)

    /// `refreshAfter` must be between 1 second and 50 minutes. `clock` is injectable for tests.
    public init(credentials: AppleCredentials, refreshAfter: TimeInterval = 20 * 60,
                clock: @escaping @Sendable () -> Date = { Date() }) throws(AppleServiceError) {
        guard refreshAfter >= 1, refreshAfter <= 50 * 60 else {
            throw .invalidConfiguration("JWT refresh interval must be 1 s to 50 min, Apple accepts a token for one hour")
        }
        self.credentials = credentials
        self.refreshAfter = refreshAfter
        self.clock = clock
    }

    /// The cached token while it is younger than `refreshAfter`, otherwise a new one. Signing happens under
    /// the lock, so concurrent callers at expiry wait for one new token instead of each making one.
    public func token() throws(AppleServiceError) -> String {
        let now = clock()
        return try cached.withLock { (cached) throws(AppleServiceError) -> String in
            if let current = cached {
                let age = now.timeIntervalSince(current.issuedAt)
                if age >= 0, age < refreshAfter { return current.token }
            }
            let token = try sign(issuedAt: now)
            cached = (token, now)
            return token
        }
    }

    /// Forgets the cached token (after Apple refused it), so the next call signs a new one.
    public func invalidate() {
        cached.withLock { $0 = nil }
    }

    private func sign(issuedAt: Date) throws(AppleServiceError) -> String {
        // Ids are letters and digits only (checked by AppleCredentials), so they need no JSON escaping.
        let header = #"{"alg":"ES256","kid":"\#(credentials.keyID)"}"#
        let claims = #"{"iss":"\#(credentials.teamID)","iat":\#(Int64(issuedAt.timeIntervalSince1970.rounded(.down)))}"#
        let signingInput = Base64.encodeURLSafe(Array(header.utf8)) + "." + Base64.encodeURLSafe(Array(claims.utf8))
        do throws(VerificationError) {
            let signature = try credentials.privateKey.es256Signature(for: Array(signingInput.utf8))
            return signingInput + "." + Base64.encodeURLSafe(signature)
        } catch {
            throw .invalidConfiguration("cannot sign the JWT for key id \(credentials.keyID): \(error.message)")
        }
    }
}
