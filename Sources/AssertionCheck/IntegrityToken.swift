import Foundation

/// Local decryption and verification of a *classic* Play Integrity token (the keys from the Play Console):
///
///     BASE64URL(header) . BASE64URL(wrapped key) . BASE64URL(iv) . BASE64URL(ciphertext) . BASE64URL(tag)
///
/// a compact JWE (RFC 7516) with header `alg` A256KW and `enc` A256GCM whose plaintext is a compact JWS
/// (RFC 7515) signed ES256, whose payload is the verdict JSON. Every size is fixed by the algorithms and
/// checked before any cryptography; the AAD is the header segment's ASCII as sent.
public struct IntegrityKeys: Sendable {
    /// The raw 32-byte AES key (the Console's "decryption key", base64).
    public let decryptionKey: [UInt8]
    /// The EC P-256 key (the Console's "verification key", base64 of a DER SubjectPublicKeyInfo).
    public let verificationKey: P256PublicKey

    public init(decryptionKey: [UInt8], verificationKey: P256PublicKey) throws(IntegrityError) {
        guard decryptionKey.count == AES256.keyBytes else {
            throw IntegrityError(.undecryptable, "the decryption key must be 32 bytes, got \(decryptionKey.count)")
        }
        self.decryptionKey = decryptionKey
        self.verificationKey = verificationKey
    }
}

public enum IntegrityToken {
    /// Play's tokens are a few KiB; anything much larger is not one (and is never decrypted).
    public static let maxBytes = 16 * 1024
    static let wrappedKeyBytes = AES256.keyBytes + 8

    /// Five dot-separated segments: a compact JWE (classic request). Anything else is a standard token.
    public static func isCompactJWE(_ token: String) -> Bool {
        token.utf8.count <= maxBytes && token.utf8.lazy.filter { $0 == UInt8(ascii: ".") }.count == 4
    }

    /// The verdict JSON of a classic token, after the JWE is decrypted and the inner JWS verified.
    public static func decrypt(_ token: String, keys: IntegrityKeys) throws(IntegrityError) -> [UInt8] {
        let bytes = Array(token.utf8)
        guard bytes.count <= maxBytes else { throw IntegrityError(.tokenMalformed, "longer than \(maxBytes) bytes") }
        let segments = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).map(Array.init)
        guard segments.count == 5 else { throw IntegrityError(.tokenMalformed, "not a compact JWE (five base64url segments)") }
        guard let header = base64URL(segments[0]), let wrapped = base64URL(segments[1]), let iv = base64URL(segments[2]),
              let ciphertext = base64URL(segments[3]), let tag = base64URL(segments[4]) else {
            throw IntegrityError(.tokenMalformed, "a JWE segment is not unpadded base64url")
        }
        guard let fields = jsonObject(header), fields["alg"] as? String == "A256KW", fields["enc"] as? String == "A256GCM" else {
            throw IntegrityError(.tokenMalformed, "the JWE header is not {\"alg\":\"A256KW\",\"enc\":\"A256GCM\"}")
        }
        // A compressed or critical-extension token asks for processing this verifier does not do.
        guard fields["zip"] == nil, fields["crit"] == nil else { throw IntegrityError(.tokenMalformed, "the JWE header has zip or crit") }
        guard wrapped.count == wrappedKeyBytes, iv.count == AES256.gcmIVBytes, tag.count == AES256.gcmTagBytes, !ciphertext.isEmpty else {
            throw IntegrityError(.tokenMalformed, "wrong JWE sizes (wrapped key \(wrapped.count), iv \(iv.count), tag \(tag.count) bytes)")
        }
        guard let contentKey = AES256.unwrapKey(wrapped, kek: keys.decryptionKey) else {
            throw IntegrityError(.undecryptable, "the content key does not unwrap with the decryption key (another key, or altered)")
        }
        guard let plaintext = AES256.gcmDecrypt(ciphertext, key: contentKey, iv: iv, aad: segments[0], tag: tag) else {
            throw IntegrityError(.undecryptable, "the GCM tag does not verify (altered ciphertext, iv, header or tag)")
        }
        return try verifiedPayload(plaintext, key: keys.verificationKey)
    }

    /// The payload of a compact JWS signed ES256 by `key`.
    static func verifiedPayload(_ jws: [UInt8], key: P256PublicKey) throws(IntegrityError) -> [UInt8] {
        let segments = jws.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false).map(Array.init)
        guard segments.count == 3, let header = base64URL(segments[0]), let payload = base64URL(segments[1]),
              let signature = base64URL(segments[2]) else {
            throw IntegrityError(.signatureInvalid, "the decrypted content is not a compact JWS")
        }
        guard let fields = jsonObject(header), fields["alg"] as? String == "ES256", fields["crit"] == nil else {
            throw IntegrityError(.signatureInvalid, "the JWS header is not {\"alg\":\"ES256\"}")
        }
        let signingInput = segments[0] + [UInt8(ascii: ".")] + segments[1]
        guard signature.count == 64, let der = ECDSASignature.der(fromRaw: signature), key.isValidSignature(der, for: signingInput) else {
            throw IntegrityError(.signatureInvalid, "the JWS signature does not verify with the verification key")
        }
        return payload
    }

    /// Unpadded base64url only (RFC 7515 §2): the other alphabet or padding would give a second spelling of one token.
    static func base64URL(_ segment: [UInt8]) -> [UInt8]? {
        let allowed = segment.allSatisfy { byte in
            (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
        return allowed ? Base64.decode(utf8: segment) : nil
    }

    static func jsonObject(_ bytes: [UInt8]) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }
}
