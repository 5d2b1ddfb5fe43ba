import AssertionCheck
import Foundation

/// A Play Integrity verdict as Google writes it (`tokenPayloadExternal`), every field settable so a test
/// can make any verdict. `json` is what a classic token signs and what a fake decodeIntegrityToken answers.
public struct PlayIntegrityVerdict: Sendable {
    public var requestPackageName: String
    /// The challenge, echoed: `nonce` for classic requests, `requestHash` for standard ones (nil leaves it out).
    public var nonce: String?
    public var requestHash: String?
    public var timestamp: Date
    public var appRecognitionVerdict: String? = "PLAY_RECOGNIZED"
    /// nil: the same as `requestPackageName`.
    public var packageName: String?
    /// base64url SHA-256 digests of the signing certificates.
    public var certificateDigests: [String]
    public var versionCode: Int64 = 42
    public var deviceRecognitionVerdict: [String] = ["MEETS_DEVICE_INTEGRITY"]
    public var appLicensingVerdict: String? = "LICENSED"

    public init(packageName: String, nonce: String?, certificateDigests: [String], timestamp: Date = Date()) {
        requestPackageName = packageName
        self.nonce = nonce
        self.certificateDigests = certificateDigests
        self.timestamp = timestamp
    }

    /// int64 fields as JSON strings, as proto3 JSON (and so Google) writes them.
    public var json: [UInt8] {
        var request: [String: Any] = ["requestPackageName": requestPackageName,
                                      "timestampMillis": String(Int64((timestamp.timeIntervalSince1970 * 1000).rounded(.down)))]
        request["nonce"] = nonce
        request["requestHash"] = requestHash
        var app: [String: Any] = ["packageName": packageName ?? requestPackageName, "certificateSha256Digest": certificateDigests,
                                  "versionCode": String(versionCode)]
        app["appRecognitionVerdict"] = appRecognitionVerdict
        var account: [String: Any] = [:]
        account["appLicensingVerdict"] = appLicensingVerdict
        let root: [String: Any] = ["requestDetails": request, "appIntegrity": app,
                                   "deviceIntegrity": ["deviceRecognitionVerdict": deviceRecognitionVerdict], "accountDetails": account]
        return Array(try! JSONSerialization.data(withJSONObject: root, options: [.sortedKeys]))
    }
}

/// One way to spoil a classic token. Each names the `IntegrityError.Reason` the gateway must answer.
public enum IntegrityTokenFault: String, Sendable, CaseIterable {
    /// JWE header `alg` is A128KW → integrity_token_malformed.
    case wrongKeyAlgorithm
    /// JWE header `enc` is A256CBC-HS512 → integrity_token_malformed.
    case wrongContentAlgorithm
    /// Four segments (the tag left out) → integrity_token_malformed.
    case missingSegment
    /// The wrapped key is 32 bytes instead of 40 → integrity_token_malformed.
    case shortWrappedKey
    /// The key is wrapped with another AES key → integrity_token_undecryptable.
    case otherDecryptionKey
    /// The last byte of the GCM tag flipped → integrity_token_undecryptable.
    case badTag
    /// A ciphertext byte flipped → integrity_token_undecryptable.
    case tamperedCiphertext
    /// The header segment re-encoded (same JSON, whitespace added): the AAD changes → integrity_token_undecryptable.
    case alteredHeader
    /// The JWS is signed by another P-256 key → integrity_signature_invalid.
    case otherSigningKey
    /// The JWS header says `alg` none and carries no signature → integrity_signature_invalid.
    case unsignedJWS
    /// The JWS signature is DER, not the 64-byte r||s of JWS → integrity_signature_invalid.
    case derSignature

    public var expectedReason: IntegrityError.Reason {
        switch self {
        case .wrongKeyAlgorithm, .wrongContentAlgorithm, .missingSegment, .shortWrappedKey: return .tokenMalformed
        case .otherDecryptionKey, .badTag, .tamperedCiphertext, .alteredHeader: return .undecryptable
        case .otherSigningKey, .unsignedJWS, .derSignature: return .signatureInvalid
        }
    }
}

/// Google's side of classic Play Integrity tokens, from test keys: the two keys the Play Console would
/// give (written as the gateway reads them) and tokens for any verdict, well-formed or spoilt.
public final class PlayIntegrityTokenMaker: @unchecked Sendable {
    /// The raw AES-256 key ("decryption key").
    public let decryptionKey: [UInt8]
    let signingKey: SimKey

    public init() throws(SimulatorError) {
        decryptionKey = try SimAES.randomBytes(32)
        signingKey = try SimKey(curve: .p256)
    }

    /// The keys kept in `directory` (`gateway demo play-integrity`, `make run`): read when a previous run wrote
    /// them, else made and written, so the demo app and the gateway share them across restarts.
    public convenience init(directory: String) throws {
        let (aesFile, pemFile) = (directory + "/decryption.key", directory + "/signing-key.pem")
        if let text = try? String(contentsOfFile: aesFile, encoding: .utf8), let pem = try? String(contentsOfFile: pemFile, encoding: .utf8),
           let key = Base64.decode(text.trimmingCharacters(in: .whitespacesAndNewlines)), key.count == 32 {
            self.init(decryptionKey: key, signingKey: try SimKey(pem: pem))
        } else {
            try self.init()
            _ = try writeKeys(to: directory)
        }
    }

    private init(decryptionKey: [UInt8], signingKey: SimKey) {
        self.decryptionKey = decryptionKey
        self.signingKey = signingKey
    }

    /// The verification key as the Console shows it: base64 of the DER SubjectPublicKeyInfo.
    public var verificationKeyBase64: String {
        get throws { Base64.encode(try P256PublicKey(point: signingKey.publicPoint).spki) }
    }

    public var decryptionKeyBase64: String { Base64.encode(decryptionKey) }

    /// Writes `decryption.key` and `verification.key` (base64 text, what the gateway reads) and this maker's
    /// own `signing-key.pem` (Google's side) into `directory`; returns the gateway's two paths.
    public func writeKeys(to directory: String) throws -> (decryption: String, verification: String) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let paths = (directory + "/decryption.key", directory + "/verification.key")
        try (decryptionKeyBase64 + "\n").write(toFile: paths.0, atomically: true, encoding: .utf8)
        try (verificationKeyBase64 + "\n").write(toFile: paths.1, atomically: true, encoding: .utf8)
        try signingKey.pem().write(toFile: directory + "/signing-key.pem", atomically: true, encoding: .utf8)
        return paths
    }

    /// A classic token: JWS (ES256) over the verdict, in a JWE (A256KW, A256GCM).
    public func classicToken(_ verdict: PlayIntegrityVerdict, fault: IntegrityTokenFault? = nil) throws(SimulatorError) -> String {
        try classicToken(payload: verdict.json, fault: fault)
    }

    public func classicToken(payload: [UInt8], fault: IntegrityTokenFault? = nil) throws(SimulatorError) -> String {
        let jws = try sign(payload, fault: fault)
        let header = Base64.encodeURLSafe(Array(headerJSON(fault).utf8))
        let contentKey = try SimAES.randomBytes(32)
        let iv = try SimAES.randomBytes(12)
        var (ciphertext, tag) = try SimAES.gcmSeal(Array(jws.utf8), key: contentKey, iv: iv, aad: Array(header.utf8))
        let kek = fault == .otherDecryptionKey ? try SimAES.randomBytes(32) : decryptionKey
        var wrapped = try SimAES.wrap(contentKey, kek: kek)
        if fault == .shortWrappedKey { wrapped = Array(wrapped.prefix(32)) }
        if fault == .badTag { tag[15] ^= 0x01 }
        if fault == .tamperedCiphertext { ciphertext[0] ^= 0x01 }
        // Same JSON, another spelling: the receiver must authenticate the segment as sent.
        let sentHeader = fault == .alteredHeader ? Base64.encodeURLSafe(Array(headerJSON(nil).replacing(",", with: ", ").utf8)) : header
        let segments = [sentHeader, Base64.encodeURLSafe(wrapped), Base64.encodeURLSafe(iv), Base64.encodeURLSafe(ciphertext),
                        Base64.encodeURLSafe(tag)]
        return (fault == .missingSegment ? Array(segments.prefix(4)) : segments).joined(separator: ".")
    }

    private func headerJSON(_ fault: IntegrityTokenFault?) -> String {
        let alg = fault == .wrongKeyAlgorithm ? "A128KW" : "A256KW"
        let enc = fault == .wrongContentAlgorithm ? "A256CBC-HS512" : "A256GCM"
        return #"{"alg":"\#(alg)","enc":"\#(enc)"}"#
    }

    private func sign(_ payload: [UInt8], fault: IntegrityTokenFault?) throws(SimulatorError) -> String {
        let alg = fault == .unsignedJWS ? "none" : "ES256"
        let input = Base64.encodeURLSafe(Array(#"{"alg":"\#(alg)"}"#.utf8)) + "." + Base64.encodeURLSafe(payload)
        if fault == .unsignedJWS { return input + "." }
        let key = fault == .otherSigningKey ? try SimKey(curve: .p256) : signingKey
        let der = try key.signature(over: Array(input.utf8))
        guard let raw = ECDSASignature.raw(fromDER: der) else { throw .cryptoFailure("ES256 signature is not a P-256 ECDSA signature") }
        return input + "." + Base64.encodeURLSafe(fault == .derSignature ? der : raw)
    }
}
