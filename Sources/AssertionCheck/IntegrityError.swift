/// Why a Play Integrity token or its verdict was refused. `reason` is a stable snake_case code that logs,
/// HTTP error bodies and metrics reuse; `message` is for humans and may change.
public struct IntegrityError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Reason: String, CaseIterable, Sendable {
        /// The challenge sent with the token is not one this gateway issued (malformed, another secret).
        case challengeInvalid = "integrity_challenge_invalid"
        /// An App Attest challenge (attestation or assertion) sent to the Play Integrity exchange.
        case challengeWrongKind = "integrity_challenge_wrong_kind"
        case challengeExpired = "integrity_challenge_expired"
        /// The challenge was already exchanged for a token (spent once, in Redis).
        case challengeReused = "integrity_challenge_reused"
        /// Not a compact JWE as Play makes them: segments, base64url, header (`alg` A256KW, `enc` A256GCM), sizes.
        case tokenMalformed = "integrity_token_malformed"
        /// Google's decodeIntegrityToken refused the token (HTTP 400: malformed, expired, or another app's).
        case tokenRejected = "integrity_token_rejected"
        /// The content key does not unwrap with the decryption key, or the GCM tag does not verify.
        case undecryptable = "integrity_token_undecryptable"
        /// The decrypted JWS is not ES256, or its signature does not verify with the verification key.
        case signatureInvalid = "integrity_signature_invalid"
        /// The verdict JSON lacks a field the checks need, or has one of the wrong type.
        case payloadInvalid = "integrity_payload_invalid"
        /// `requestDetails.nonce` (classic) or `requestHash` (standard) is not the challenge sent with it.
        case nonceMismatch = "integrity_nonce_mismatch"
        /// `requestPackageName` or `appIntegrity.packageName` is not in `play_integrity.package_names`.
        case packageNotAllowed = "integrity_package_not_allowed"
        /// No `certificateSha256Digest` is in `play_integrity.certificate_sha256`.
        case certificateNotAllowed = "integrity_certificate_not_allowed"
        /// `timestampMillis` is older than `max_token_age_seconds`.
        case tokenTooOld = "integrity_token_too_old"
        /// `timestampMillis` is ahead of the gateway's clock by more than the skew.
        case tokenFromFuture = "integrity_token_from_future"
        /// `appRecognitionVerdict` is not PLAY_RECOGNIZED (with `require_app_recognized`).
        case appNotRecognized = "integrity_app_not_recognized"
        /// No label of `deviceRecognitionVerdict` is one `require_device` lists.
        case deviceNotTrusted = "integrity_device_not_trusted"
        /// `appLicensingVerdict` is not LICENSED (with `require_licensed`).
        case unlicensed = "integrity_unlicensed"
    }

    public let reason: Reason
    public let message: String

    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    public var reasonCode: String { reason.rawValue }
    public var description: String { "\(reason.rawValue): \(message)" }

    /// Proof failures (the token is not what it claims) are 401; a genuine verdict that says no is 403.
    public var status: Int {
        switch reason {
        case .challengeInvalid, .challengeWrongKind, .challengeExpired, .challengeReused,
             .tokenMalformed, .tokenRejected, .undecryptable, .signatureInvalid, .payloadInvalid, .nonceMismatch, .tokenTooOld, .tokenFromFuture: return 401
        case .packageNotAllowed, .certificateNotAllowed, .appNotRecognized, .deviceNotTrusted, .unlicensed: return 403
        }
    }
}
