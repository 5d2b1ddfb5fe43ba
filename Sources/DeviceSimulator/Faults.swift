/// One way to spoil an attestation object while keeping it structurally plausible. Each case names the
/// `VerificationError.Reason` AttestationVerifier must answer when it is the only fault (and the policy
/// accepts the device's App ID and environment).
public enum AttestationFault: Hashable, Sendable, CaseIterable {
    /// fmt is "packed" instead of "apple-appattest" → bad_format.
    case wrongFormat
    /// attStmt has no receipt → bad_format.
    case missingReceipt
    /// attStmt.x5c is the credCert byte string instead of an array → bad_format.
    case certificatesNotArray
    /// Bytes that are not a CBOR map follow the authData credential key → bad_format.
    case trailingBytesAfterCredential
    /// The credCert comes from a freshly made CA that is not under the trust anchor → chain_invalid.
    case untrustedIssuer
    /// The last byte of the credCert signature is flipped → chain_invalid.
    case tamperedCertificateSignature
    /// The credCert expired a day ago → cert_expired.
    case expiredCertificate
    /// The credCert becomes valid tomorrow → cert_not_yet_valid.
    case certificateNotYetValid
    /// The certified nonce covers a different clientDataHash → nonce_mismatch.
    case nonceOverOtherClientData
    /// The credCert lacks extension 1.2.840.113635.100.8.2 → bad_certificate.
    case missingNonceExtension
    /// The nonce extension is a bare OCTET STRING, not SEQUENCE { [1] { OCTET STRING } } → bad_certificate.
    case malformedNonceExtension
    /// The credCert certifies another key than the one the key id names → key_id_mismatch.
    case certifiedKeyNotKeyId
    /// rpIdHash is SHA256 of another App ID (same team, bundle id + ".other") → app_id_mismatch.
    case wrongAppID
    /// authData counter is 1 → counter_not_zero.
    case nonZeroCounter
    /// aaguid is neither appattestdevelop nor appattest → environment_mismatch.
    case unknownAAGUID
    /// credentialId is not the key id → credential_id_mismatch.
    case credentialIdNotKeyId
    /// The COSE key in authData is another key than the certified one → credential_key_mismatch.
    case credentialKeyNotCertified
}

/// One way to spoil an assertion. Each case names the `VerificationError.Reason` AssertionVerifier
/// must answer when it is the only fault.
public enum AssertionFault: Hashable, Sendable, CaseIterable {
    /// Signed by a fresh key instead of the attested one → signature_invalid.
    case signedByOtherKey
    /// The last byte of the DER signature is flipped → signature_invalid.
    case corruptedSignature
    /// rpIdHash is SHA256 of another App ID (same team, bundle id + ".other") → app_id_mismatch.
    case wrongAppID
    /// Bytes that are not a CBOR map follow the 37 fixed authenticatorData bytes → bad_assertion.
    case trailingBytesAfterAuthenticatorData
    /// The assertion is a CBOR array [signature, authenticatorData] instead of a map → bad_assertion.
    case notAMap
    /// The map has no signature entry → bad_assertion.
    case missingSignature
}
