/// Why a verification failed. `reason` is a stable snake_case code that logs, HTTP error bodies and
/// metrics reuse; `message` is for humans and may change.
public struct VerificationError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Reason: String, CaseIterable, Sendable {
        // Decoding, shared by attestations and assertions.
        case badBase64 = "bad_base64"
        case badCBOR = "bad_cbor"
        // Attestation (Apple's attestation-object validation steps).
        case badFormat = "bad_format"
        case badCertificate = "bad_certificate"
        case chainInvalid = "chain_invalid"
        case certExpired = "cert_expired"
        case certNotYetValid = "cert_not_yet_valid"
        case nonceMismatch = "nonce_mismatch"
        case keyIdMismatch = "key_id_mismatch"
        case appIdMismatch = "app_id_mismatch"
        case counterNotZero = "counter_not_zero"
        case environmentMismatch = "environment_mismatch"
        case credentialIdMismatch = "credential_id_mismatch"
        case credentialKeyMismatch = "credential_key_mismatch"
        // Assertion.
        case badAssertion = "bad_assertion"
        case badPublicKey = "bad_public_key"
        case signatureInvalid = "signature_invalid"
        case counterNotIncreasing = "counter_not_increasing"
        // Request binding (client data against the HTTP request).
        case clientDataInvalid = "client_data_invalid"
        case methodMismatch = "method_mismatch"
        case pathMismatch = "path_mismatch"
        case queryMismatch = "query_mismatch"
        case bodyHashMismatch = "body_hash_mismatch"
        // App Attest receipts (Apple's "Assessing fraud risk" validation).
        case receiptInvalid = "receipt_invalid"
        case receiptSignatureInvalid = "receipt_signature_invalid"
        case receiptChainInvalid = "receipt_chain_invalid"
        case receiptExpired = "receipt_expired"
        case receiptNotYetValid = "receipt_not_yet_valid"
        case receiptTooOld = "receipt_too_old"
        case receiptAppIdMismatch = "receipt_app_id_mismatch"
        case receiptKeyMismatch = "receipt_key_mismatch"
        // Signing keys (the .p8 key for Apple's server APIs).
        case badPrivateKey = "bad_private_key"
    }

    public let reason: Reason
    public let message: String

    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    public var reasonCode: String { reason.rawValue }
    public var description: String { "\(reason.rawValue): \(message)" }
}
