import Foundation

/// What the app hashed into `attestKey(keyId, clientDataHash:)`.
public enum AttestationClientData: Sendable {
    /// The server's challenge bytes; the app passed SHA256(challenge) (what Apple's guide text says).
    case challenge([UInt8])
    /// The exact clientDataHash the app passed (Apple's own documentation samples pass the raw challenge).
    case clientDataHash([UInt8])

    var hash: [UInt8] {
        switch self {
        case .challenge(let bytes): return SHA256.hash(bytes)
        case .clientDataHash(let bytes): return bytes
        }
    }
}

/// Which environments the server accepts.
public struct AttestationPolicy: Sendable {
    public var apps: [AppID]
    public var environments: Set<AppAttestEnvironment>
    public var trustAnchor: TrustAnchor

    public init(apps: [AppID], environments: Set<AppAttestEnvironment>, trustAnchor: TrustAnchor = .apple) {
        self.apps = apps
        self.environments = environments
        self.trustAnchor = trustAnchor
    }
}

/// A key that passed attestation: what the server stores for later assertions.
public struct AttestedKey: Sendable {
    public let keyId: [UInt8]
    public let publicKey: P256PublicKey
    public let environment: AppAttestEnvironment
    public let appID: AppID
    public let receipt: [UInt8]
    public let counter: UInt32
    public let verifiedAt: Date
    public let extensions: AuthenticatorExtensions?
}

/// Apple's attestation-object validation, every numbered step, in order.
public enum AttestationVerifier {
    static let nonceExtensionOID = "1.2.840.113635.100.8.2"
    /// Real attestations are 5–10 KB; anything far larger is not one.
    public static let maxAttestationBytes = 64 * 1024

    public static func verify(attestation: [UInt8], keyId: [UInt8], clientData: AttestationClientData,
                              policy: AttestationPolicy, at time: Date = Date(),
                              trace: ((String) -> Void)? = nil) throws(VerificationError) -> AttestedKey {
        let note = trace ?? { _ in }
        guard attestation.count <= maxAttestationBytes else {
            throw VerificationError(.badCBOR, "attestation object is \(attestation.count) bytes, limit \(maxAttestationBytes)")
        }
        let object = try AttestationObject(CBORDecoder.decode(attestation, maxDepth: 8))
        note("format is apple-appattest with \(object.certificates.count) certificates, a receipt of \(object.receipt.count) bytes")

        // 1. Verify that the x5c array contains the intermediate and leaf certificates, and the chain
        //    validates to Apple's App Attestation root at the verification time.
        let leaf = try X509Certificate(der: object.certificates[0])
        let intermediates = try object.certificates.dropFirst().map { (der) throws(VerificationError) in try X509Certificate(der: der) }
        try X509Chain.verify(leaf: leaf, intermediates: intermediates, anchor: policy.trustAnchor.certificate, at: time)
        note("step 1: certificate chain verifies to the \(policy.trustAnchor.isApple ? "Apple App Attestation root" : "configured trust anchor") at \(time)")

        // 2–3. clientDataHash appended to authData, hashed: the nonce.
        let nonce = SHA256.hash(object.authData, clientData.hash)
        // 4. The nonce equals the single OCTET STRING of credCert extension 1.2.840.113635.100.8.2.
        guard let extensionValue = leaf.extensionValue(oid: nonceExtensionOID) else {
            throw VerificationError(.badCertificate, "credCert has no nonce extension \(nonceExtensionOID)")
        }
        guard let certifiedNonce = NonceExtension.nonce(fromExtensionValue: extensionValue) else {
            throw VerificationError(.badCertificate, "credCert nonce extension is not SEQUENCE { [1] OCTET STRING }")
        }
        guard Bytes.constantTimeEqual(nonce, certifiedNonce) else {
            throw VerificationError(.nonceMismatch, "SHA256(authData || clientDataHash) differs from the certified nonce (wrong challenge, or challenge hashed differently)")
        }
        note("steps 2-4: nonce SHA256(authData || clientDataHash) matches the credCert extension")

        // 5. SHA256 of the credCert public key (uncompressed point) equals the key id.
        let publicKey = try leaf.publicKey()
        guard Bytes.constantTimeEqual(SHA256.hash(publicKey.point), keyId) else {
            throw VerificationError(.keyIdMismatch, "SHA256 of the credCert public key is not the key id")
        }
        note("step 5: key id is SHA256 of the credCert public key")

        let authData = try AuthenticatorData.parseAttestation(object.authData)
        // 6. rpIdHash equals SHA256 of one configured App ID.
        guard let appID = AppID.matching(authData.rpIdHash, in: policy.apps) else {
            throw VerificationError(.appIdMismatch, "authData rpIdHash matches none of the configured App IDs (\(policy.apps.map(\.description).joined(separator: ", ")))")
        }
        note("step 6: rpIdHash is SHA256(\"\(appID)\")")

        // 7. The counter is 0.
        guard authData.counter == 0 else {
            throw VerificationError(.counterNotZero, "authData counter is \(authData.counter), a fresh attestation has 0")
        }
        note("step 7: counter is 0")

        // 8. aaguid names an environment the configuration accepts.
        guard let credential = authData.attestedCredential,
              let environment = AppAttestEnvironment(aaguid: credential.aaguid) else {
            throw VerificationError(.environmentMismatch, "aaguid is neither appattestdevelop nor appattest")
        }
        guard policy.environments.contains(environment) else {
            throw VerificationError(.environmentMismatch, "key was attested in \(environment.rawValue), which the configuration does not accept")
        }
        note("step 8: aaguid says \(environment.rawValue), which is accepted")

        // 9. credentialId equals the key id.
        guard Bytes.constantTimeEqual(credential.credentialId, keyId) else {
            throw VerificationError(.credentialIdMismatch, "authData credentialId is not the key id")
        }
        note("step 9: credentialId is the key id")

        // Beyond Apple's list: the COSE key in authData is the certified key (both are covered by the nonce).
        guard credential.uncompressedPoint == publicKey.point else {
            throw VerificationError(.credentialKeyMismatch, "authData COSE key differs from the credCert public key")
        }
        note("extra: authData COSE key equals the credCert public key")
        if let extensions = authData.extensions {
            note("authenticator extensions: bundle version \(extensions.bundleVersion ?? "-"), validation category \(extensions.validationCategory.map(Bytes.hex) ?? "-")")
        }
        return AttestedKey(keyId: keyId, publicKey: publicKey, environment: environment, appID: appID,
                           receipt: object.receipt, counter: 0, verifiedAt: time, extensions: authData.extensions)
    }
}

/// The CBOR attestation object: {fmt: "apple-appattest", attStmt: {x5c: [credCert, CA…], receipt}, authData}.
struct AttestationObject {
    let certificates: [[UInt8]]
    let receipt: [UInt8]
    let authData: [UInt8]

    init(_ value: CBORValue) throws(VerificationError) {
        guard case .map = value else { throw VerificationError(.badFormat, "attestation object is not a CBOR map") }
        guard value["fmt"]?.text == "apple-appattest" else {
            throw VerificationError(.badFormat, "fmt is not \"apple-appattest\"")
        }
        guard let statement = value["attStmt"], case .map = statement else {
            throw VerificationError(.badFormat, "attStmt is missing or not a map")
        }
        guard case .array(let chain)? = statement["x5c"], (2...4).contains(chain.count) else {
            throw VerificationError(.badFormat, "attStmt.x5c must hold the credCert and its intermediate")
        }
        var certificates = [[UInt8]]()
        for entry in chain {
            guard let der = entry.bytes, !der.isEmpty else {
                throw VerificationError(.badFormat, "attStmt.x5c entries must be byte strings")
            }
            certificates.append(der)
        }
        guard let receipt = statement["receipt"]?.bytes else {
            throw VerificationError(.badFormat, "attStmt.receipt is missing or not a byte string")
        }
        guard let authData = value["authData"]?.bytes else {
            throw VerificationError(.badFormat, "authData is missing or not a byte string")
        }
        self.certificates = certificates
        self.receipt = receipt
        self.authData = authData
    }
}
