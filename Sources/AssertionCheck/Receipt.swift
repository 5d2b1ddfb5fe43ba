import Foundation

/// The payload of an App Attest receipt: the one in the attestation object (type ATTEST) or one that Apple's
/// attestationData endpoint returned in exchange (type RECEIPT, which adds the risk metric).
public struct AttestationReceipt: Sendable {
    public enum Kind: String, Sendable {
        case attest = "ATTEST"
        case receipt = "RECEIPT"
    }

    /// Field 2: "<team id>.<bundle id>".
    public let appID: String
    /// Field 3 as Apple sends it: in every real receipt, the DER credCert of the attested key.
    public let attestedKeyField: [UInt8]
    /// The P-256 key of field 3.
    public let publicKey: P256PublicKey
    /// Field 4: the clientDataHash the app passed to attestKey. Meaningful in ATTEST receipts only: in a real
    /// RECEIPT it is that hash mangled into UTF-8 replacement characters, so nothing should compare it.
    public let clientHash: [UInt8]
    /// Field 5: Apple's opaque token (base64 text).
    public let token: String
    /// Field 6.
    public let kind: Kind
    /// Field 7, undocumented: "sandbox" or "production" in real receipts.
    public let environment: String?
    /// Field 12.
    public let creationTime: Date
    /// Field 17 (RECEIPT only): Apple's count of recent attestations by this device for the app (about 30 days).
    public let riskMetric: Int?
    /// Field 19: the earliest time Apple will exchange this receipt for a new one (RECEIPT only).
    public let notBefore: Date?
    /// Field 21: after this time the receipt is no longer valid.
    public let expirationTime: Date
}

/// Apple's receipt validation ("Assessing fraud risk"): signature, chain to Apple Root CA - G3, App ID and
/// attested key, then the validity times. Pure: the time is injected and nothing is fetched.
public enum ReceiptVerifier {
    /// Real receipts are about 4 KB.
    public static let maxReceiptBytes = 64 * 1024
    /// The extension Apple puts on its receipt-signing certificate. Apple Root CA - G3 also anchors
    /// certificates whose keys third parties hold (Apple Pay), so the chain alone does not suffice.
    static let receiptSigningOID = "1.2.840.113635.100.12.15"

    /// - Parameters:
    ///   - appID, publicKey: from the key record the receipt must belong to.
    ///   - maxAge: if set, a receipt created longer ago than this is `receipt_too_old` (Apple suggests
    ///     five minutes for receipts a client hands in; leave nil for receipts fetched from Apple).
    public static func verify(receipt: [UInt8], appID: AppID, publicKey: P256PublicKey, at time: Date = Date(),
                              trustAnchor: ReceiptTrustAnchor = .apple,
                              maxAge: TimeInterval? = nil) throws(VerificationError) -> AttestationReceipt {
        guard !receipt.isEmpty, receipt.count <= maxReceiptBytes else {
            throw VerificationError(.receiptInvalid, "receipt is \(receipt.count) bytes, expected 1 to \(maxReceiptBytes)")
        }
        let signed = try verifiedContent(receipt, anchor: trustAnchor, at: time)
        guard signed.signer.extensionValue(oid: receiptSigningOID) != nil else {
            throw VerificationError(.receiptChainInvalid, "the signing certificate is not an App Attest receipt-signing certificate (no \(receiptSigningOID))")
        }
        let parsed = try AttestationReceipt(payload: signed.content)
        guard parsed.appID == appID.description else {
            throw VerificationError(.receiptAppIdMismatch, "receipt is for App ID \"\(parsed.appID)\", not \(appID)")
        }
        guard Bytes.constantTimeEqual(parsed.publicKey.point, publicKey.point) else {
            throw VerificationError(.receiptKeyMismatch, "receipt attests a different public key than the key record's")
        }
        guard time <= parsed.expirationTime else {
            throw VerificationError(.receiptExpired, "receipt expired at \(parsed.expirationTime)")
        }
        if let maxAge, time.timeIntervalSince(parsed.creationTime) > maxAge {
            throw VerificationError(.receiptTooOld, "receipt was created at \(parsed.creationTime), more than \(Int(maxAge)) s before \(time)")
        }
        return parsed
    }

    private static func verifiedContent(_ receipt: [UInt8], anchor: ReceiptTrustAnchor, at time: Date) throws(VerificationError) -> SignedContent {
        do throws(VerificationError) {
            return try PKCS7SignedData(der: receipt).verify(anchor: anchor.certificate, at: time)
        } catch {
            switch error.reason {
            case .signatureInvalid: throw VerificationError(.receiptSignatureInvalid, "receipt \(error.message)")
            case .chainInvalid: throw VerificationError(.receiptChainInvalid, "receipt \(error.message)")
            case .certExpired: throw VerificationError(.receiptExpired, "receipt \(error.message)")
            case .certNotYetValid: throw VerificationError(.receiptNotYetValid, "receipt \(error.message)")
            default: throw VerificationError(.receiptInvalid, "receipt: \(error.message)")
            }
        }
    }
}

extension AttestationReceipt {
    /// Payload ::= SET OF SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }.
    init(payload: [UInt8]) throws(VerificationError) {
        let fields = try Self.fields(payload)
        func required(_ type: Int, _ name: String) throws(VerificationError) -> [UInt8] {
            guard let value = fields[type] else { throw VerificationError(.receiptInvalid, "receipt has no field \(type) (\(name))") }
            return value
        }
        appID = try Self.text(required(2, "App ID"), 2)
        attestedKeyField = try required(3, "attested public key")
        publicKey = try Self.publicKey(attestedKeyField)
        clientHash = try required(4, "client hash")
        token = try Self.text(required(5, "token"), 5)
        let kindText = try Self.text(required(6, "receipt type"), 6)
        guard let kind = Kind(rawValue: kindText) else {
            throw VerificationError(.receiptInvalid, "receipt type (field 6) is \"\(kindText)\", expected ATTEST or RECEIPT")
        }
        self.kind = kind
        environment = try fields[7].map { (value) throws(VerificationError) in try Self.text(value, 7) }
        creationTime = try Self.time(required(12, "creation time"), 12)
        riskMetric = try Self.optionalText(fields[17], 17).map { (text) throws(VerificationError) in
            guard let metric = Int(text), metric >= 0 else {
                throw VerificationError(.receiptInvalid, "risk metric (field 17) \"\(text)\" is not a non-negative integer")
            }
            return metric
        }
        notBefore = try Self.optionalText(fields[19], 19).map { (text) throws(VerificationError) in try Self.time(Array(text.utf8), 19) }
        expirationTime = try Self.time(required(21, "expiration time"), 21)
    }

    private static func fields(_ payload: [UInt8]) throws(VerificationError) -> [Int: [UInt8]] {
        var outer = DERReader(payload[...])
        guard let set = outer.read(tag: 0x31), outer.isAtEnd else {
            throw VerificationError(.receiptInvalid, "receipt payload is not one DER SET")
        }
        var entries = DERReader(set)
        var fields: [Int: [UInt8]] = [:]
        while !entries.isAtEnd {
            guard let sequence = entries.read(tag: 0x30) else {
                throw VerificationError(.receiptInvalid, "receipt payload entry is not a DER SEQUENCE")
            }
            var entry = DERReader(sequence)
            guard let type = entry.read(tag: 0x02).flatMap(DERReader.smallInteger), entry.read(tag: 0x02) != nil,
                  let value = entry.read(tag: 0x04), entry.isAtEnd else {
                throw VerificationError(.receiptInvalid, "receipt payload entry is not SEQUENCE { INTEGER, INTEGER, OCTET STRING }")
            }
            guard fields.updateValue(Array(value), forKey: type) == nil else {
                throw VerificationError(.receiptInvalid, "receipt payload has field \(type) twice")
            }
        }
        return fields
    }

    private static func text(_ value: [UInt8], _ type: Int) throws(VerificationError) -> String {
        guard let text = String(validating: value, as: UTF8.self) else {
            throw VerificationError(.receiptInvalid, "receipt field \(type) is not UTF-8 text")
        }
        return text
    }

    /// Absent or blank is nil (ATTEST receipts may leave RECEIPT-only fields empty).
    private static func optionalText(_ value: [UInt8]?, _ type: Int) throws(VerificationError) -> String? {
        guard let value else { return nil }
        let text = try self.text(value, type).trimmingCharacters(in: .whitespaces)
        return text.isEmpty ? nil : text
    }

    /// RFC 3339 in UTC, with or without fractional seconds ("2021-01-23T12:13:35.801Z").
    private static func time(_ value: [UInt8], _ type: Int) throws(VerificationError) -> Date {
        let text = try self.text(value, type)
        let styles = [Date.ISO8601FormatStyle(includingFractionalSeconds: true), Date.ISO8601FormatStyle()]
        for style in styles {
            if let date = try? style.parse(text) { return date }
        }
        throw VerificationError(.receiptInvalid, "receipt field \(type) \"\(text)\" is not an RFC 3339 time")
    }

    /// Real receipts carry the credCert; a bare SubjectPublicKeyInfo or point is accepted too.
    private static func publicKey(_ value: [UInt8]) throws(VerificationError) -> P256PublicKey {
        if let certificate = try? X509Certificate(der: value) {
            guard let key = try? certificate.publicKey() else {
                throw VerificationError(.receiptInvalid, "the certificate in receipt field 3 has no P-256 key")
            }
            return key
        }
        guard let key = try? P256PublicKey(bytes: value) else {
            throw VerificationError(.receiptInvalid, "receipt field 3 is neither a certificate nor a P-256 public key")
        }
        return key
    }
}


/// The root a receipt's signing chain must end at. Apple Root CA - G3 is built in (not the App Attest
/// root, which anchors attestations); a PEM can replace it in tests.
public final class ReceiptTrustAnchor: @unchecked Sendable {
    let certificate: X509Certificate
    /// True only for the built-in Apple root.
    public let isApple: Bool

    /// Apple Root CA - G3 (SHA-256 fingerprint 63:34:3A:BF:…:91:79), valid 2014-04-30 – 2039-04-30.
    public static let apple: ReceiptTrustAnchor = {
        // A constant that is known to parse; a failure here is a build defect.
        try! ReceiptTrustAnchor(pem: appleRootG3PEM, isApple: true)
    }()

    public convenience init(pem: String) throws(VerificationError) {
        try self.init(pem: pem, isApple: false)
    }

    public convenience init(pemFile path: String) throws(VerificationError) {
        guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw VerificationError(.badCertificate, "cannot read receipt trust anchor file \(path)")
        }
        try self.init(pem: pem)
    }

    private init(pem: String, isApple: Bool) throws(VerificationError) {
        certificate = try X509Certificate(pem: pem)
        self.isApple = isApple
    }

    /// SHA-256 of the certificate's DER, for logs that say which root is in use.
    public var sha256Fingerprint: [UInt8] { SHA256.hash(certificate.derBytes) }

    private static let appleRootG3PEM = """
-----BEGIN CERTIFICATE-----
MIICQzCCAcmgAwIBAgIILcX8iNLFS5UwCgYIKoZIzj0EAwMwZzEbMBkGA1UEAwwS
QXBwbGUgUm9vdCBDQSAtIEczMSYwJAYDVQQLDB1BcHBsZSBDZXJ0aWZpY2F0aW9u
IEF1dGhvcml0eTETMBEGA1UECgwKQXBwbGUgSW5jLjELMAkGA1UEBhMCVVMwHhcN
MTQwNDMwMTgxOTA2WhcNMzkwNDMwMTgxOTA2WjBnMRswGQYDVQQDDBJBcHBsZSBS
b290IENBIC0gRzMxJjAkBgNVBAsMHUFwcGxlIENlcnRpZmljYXRpb24gQXV0aG9y
aXR5MRMwEQYDVQQKDApBcHBsZSBJbmMuMQswCQYDVQQGEwJVUzB2MBAGByqGSM49
AgEGBSuBBAAiA2IABJjpLz1AcqTtkyJygRMc3RCV8cWjTnHcFBbZDuWmBSp3ZHtf
TjjTuxxEtX/1H7YyYl3J6YRbTzBPEVoA/VhYDKX1DyxNB0cTddqXl5dvMVztK517
IDvYuVTZXpmkOlEKMaNCMEAwHQYDVR0OBBYEFLuw3qFYM4iapIqZ3r6966/ayySr
MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49BAMDA2gA
MGUCMQCD6cHEFl4aXTQY2e3v9GwOAEZLuN+yRhHFD/3meoyhpmvOwgPUnPWTxnS4
at+qIxUCMG1mihDK1A3UT82NQz60imOlM27jbdoXt2QfyFMm+YhidDkLF1vLUagM
6BgD56KyKA==
-----END CERTIFICATE-----
"""
}
