import AssertionCheck
import Foundation

extension SimulatedDevice {
    /// Apple's credCerts are issued about a day before the attestation and live three days.
    static let credentialCertificateBackdate: TimeInterval = 86400
    static let credentialCertificateLifetime: TimeInterval = 3 * 86400
    static let nonceExtensionOID = "1.2.840.113635.100.8.2"

    /// The attestation object `attestKey(keyId, clientDataHash:)` returns, for this exact clientDataHash
    /// (any length: Apple's own samples pass the raw challenge).
    public func attest(clientDataHash: [UInt8], faults: Set<AttestationFault> = []) throws(SimulatorError) -> [UInt8] {
        let certifiedKey = faults.contains(.certifiedKeyNotKeyId) ? try SimKey(curve: .p256) : key
        let credentialKey = faults.contains(.credentialKeyNotCertified) ? try SimKey(curve: .p256) : key
        let authData = attestationAuthData(credentialPoint: credentialKey.publicPoint, faults: faults)
        let certifiedHash = faults.contains(.nonceOverOtherClientData) ? SHA256.hash(clientDataHash) : clientDataHash
        let nonce = SHA256.hash(authData, certifiedHash)

        // A CA of its own, unknown to any trust anchor, for the untrusted-issuer fault.
        let issuer = faults.contains(.untrustedIssuer) ? try TestCA() : ca
        let (notBefore, notAfter) = credentialCertificateValidity(faults: faults)
        var credCert = try issuer.issueCredentialCertificate(
            for: certifiedKey, keyId: keyId, from: notBefore, until: notAfter,
            extensions: nonceExtensions(nonce, faults: faults)).der
        if faults.contains(.tamperedCertificateSignature) { credCert[credCert.count - 1] ^= 0x01 }

        var statement: [(CBORItem, CBORItem)] = [
            (.text("x5c"), faults.contains(.certificatesNotArray)
                ? .bytes(credCert) : .array([.bytes(credCert), .bytes(issuer.intermediateDER)])),
        ]
        if !faults.contains(.missingReceipt) {
            statement.append((.text("receipt"), .bytes(SimulatedDevice.placeholderReceipt)))
        }
        let object: CBORItem = .map([
            (.text("fmt"), .text(faults.contains(.wrongFormat) ? "packed" : "apple-appattest")),
            (.text("attStmt"), .map(statement)),
            (.text("authData"), .bytes(authData)),
        ])
        return object.encoded
    }

    /// rpIdHash | flags | counter | aaguid | credentialId length | credentialId | COSE_Key [| extensions].
    private func attestationAuthData(credentialPoint: [UInt8], faults: Set<AttestationFault>) -> [UInt8] {
        let counter: UInt64 = faults.contains(.nonZeroCounter) ? 1 : 0
        let aaguid = faults.contains(.unknownAAGUID) ? Array("appattestunknown".utf8) : environment.aaguid
        let credentialId = faults.contains(.credentialIdNotKeyId) ? SHA256.hash(keyId) : keyId
        var authData = rpIdHash(wrong: faults.contains(.wrongAppID)) + [SimulatedDevice.flags]
            + bigEndian(counter, bytes: 4) + aaguid
            + bigEndian(UInt64(credentialId.count), bytes: 2) + credentialId
            + SimulatedDevice.coseKey(point: credentialPoint).encoded
        if let extensions { authData += extensions.cbor.encoded }
        if faults.contains(.trailingBytesAfterCredential) { authData += SimulatedDevice.notCBORMap }
        return authData
    }

    /// COSE_Key {1: 2 (EC2), 3: -7 (ES256), -1: 1 (P-256), -2: x, -3: y}, in Apple's order.
    private static func coseKey(point: [UInt8]) -> CBORItem {
        .map([(.unsigned(1), .unsigned(2)), (.unsigned(3), .negative(6)), (.negative(0), .unsigned(1)),
              (.negative(1), .bytes(Array(point[1..<33]))), (.negative(2), .bytes(Array(point[33..<65])))])
    }

    private func credentialCertificateValidity(faults: Set<AttestationFault>) -> (Date, Date) {
        let now = Date()
        let lifetime = SimulatedDevice.credentialCertificateLifetime
        if faults.contains(.expiredCertificate) {
            return (now.addingTimeInterval(-lifetime - 86400), now.addingTimeInterval(-86400))
        }
        if faults.contains(.certificateNotYetValid) {
            return (now.addingTimeInterval(86400), now.addingTimeInterval(86400 + lifetime))
        }
        let notBefore = now.addingTimeInterval(-SimulatedDevice.credentialCertificateBackdate)
        return (notBefore, notBefore.addingTimeInterval(lifetime))
    }

    private func nonceExtensions(_ nonce: [UInt8], faults: Set<AttestationFault>) -> [CertificateExtension] {
        if faults.contains(.missingNonceExtension) { return [] }
        let value = faults.contains(.malformedNonceExtension) ? DER.element(0x04, nonce) : DER.nonceExtension(nonce)
        return [CertificateExtension(oid: SimulatedDevice.nonceExtensionOID, critical: false, value: value)]
    }
}
