import COpenSSL

/// A public key that could have made a signature, as SEC 1 public key recovery yields it.
public struct RecoveredKey: Sendable, Equatable {
    /// The uncompressed point (0x04 || X || Y), 65 bytes.
    public let point: [UInt8]
    /// SHA-256 of the point: the App Attest key id.
    public let keyId: [UInt8]
}

/// ECDSA P-256 public key recovery (SEC 1 v2 §4.1.6), so an app may leave out its key id: the gateway
/// derives the candidates from the signature and takes the one that is registered.
///
/// For x = r (and, when r + n < p, which happens with probability about 2⁻¹²⁸, x = r + n), R is the curve
/// point with that x and either y parity, and Q = r⁻¹(sR − eG). With u1 = −e·r⁻¹ and u2 = s·r⁻¹ (mod n),
/// the two parities give Q = u1·G ± u2·R, so both cost one fixed-base and one variable-base multiplication:
/// about one signature verification. All arithmetic is OpenSSL's (EC_POINT, BN); nothing here is secret.
public enum KeyRecovery {
    /// The candidate keys for a DER ECDSA signature over `message` (ECDSA-SHA256: e = SHA-256(message)),
    /// at most two in practice. Empty when the signature cannot be valid for any key (r or s out of
    /// range, no curve point with x = r, trailing bytes).
    public static func candidates(signature der: [UInt8], message: [UInt8]) -> [RecoveredKey] {
        guard let (r, s) = ECDSASignature.raw(fromDER: der).map({ (Array($0[..<32]), Array($0[32...])) }) else { return [] }
        return recover(r: r, s: s, digest: SHA256.hash(message))
    }

    private static func recover(r rBytes: [UInt8], s sBytes: [UInt8], digest: [UInt8]) -> [RecoveredKey] {
        let group = P256PublicKey.group.pointer
        guard let context = BN_CTX_new() else { return [] }
        defer { BN_CTX_free(context) }
        BN_CTX_start(context)
        defer { BN_CTX_end(context) }
        // Temporaries live in the context and are freed with it.
        guard let r = BN_CTX_get(context), let s = BN_CTX_get(context), let e = BN_CTX_get(context),
              let x = BN_CTX_get(context), let p = BN_CTX_get(context), let rInverse = BN_CTX_get(context),
              let product = BN_CTX_get(context), let u1 = BN_CTX_get(context), let u2 = BN_CTX_get(context), let order = EC_GROUP_get0_order(group),
              BN_bin2bn(rBytes, 32, r) != nil, BN_bin2bn(sBytes, 32, s) != nil, BN_bin2bn(digest, 32, e) != nil,
              EC_GROUP_get_curve(group, p, nil, nil, context) == 1 else {
            ERR_clear_error()
            return []
        }
        // 1 ≤ r, s < n (a P-256 digest is as long as n, so e needs no truncation).
        guard BN_is_zero(r) == 0, BN_is_zero(s) == 0, BN_cmp(r, order) < 0, BN_cmp(s, order) < 0 else { return [] }
        guard BN_mod_inverse(rInverse, r, order, context) != nil,
              BN_mod_mul(u2, s, rInverse, order, context) == 1,
              BN_mod_mul(product, e, rInverse, order, context) == 1,
              BN_mod_sub(u1, order, product, order, context) == 1 else {
            ERR_clear_error()
            return []
        }
        let fixed = OwnedPoint(group), shift = OwnedPoint(group), sum = OwnedPoint(group), rPoint = OwnedPoint(group)
        guard let fixed, let shift, let sum, let rPoint,
              EC_POINT_mul(group, fixed.pointer, u1, nil, nil, context) == 1 else {
            ERR_clear_error()
            return []
        }
        var keys: [RecoveredKey] = []
        var candidateX: [OpaquePointer] = [r]
        if BN_add(x, r, order) == 1, BN_cmp(x, p) < 0 { candidateX.append(x) }
        for xValue in candidateX {
            // y parity 0 gives R; −R (the other parity) gives u1·G − u2·R.
            guard EC_POINT_set_compressed_coordinates(group, rPoint.pointer, xValue, 0, context) == 1,
                  EC_POINT_mul(group, shift.pointer, nil, rPoint.pointer, u2, context) == 1 else {
                ERR_clear_error()
                continue
            }
            for _ in 0..<2 {
                if EC_POINT_add(group, sum.pointer, fixed.pointer, shift.pointer, context) == 1,
                   EC_POINT_is_at_infinity(group, sum.pointer) == 0, let point = sum.uncompressed(group, context) {
                    keys.append(RecoveredKey(point: point, keyId: SHA256.hash(point)))
                }
                guard EC_POINT_invert(group, shift.pointer, context) == 1 else { break }
            }
            ERR_clear_error()
        }
        return keys
    }

    /// An EC_POINT freed when it goes out of scope.
    private final class OwnedPoint {
        let pointer: OpaquePointer

        init?(_ group: OpaquePointer) {
            guard let point = EC_POINT_new(group) else { return nil }
            pointer = point
        }

        deinit { EC_POINT_free(pointer) }

        func uncompressed(_ group: OpaquePointer, _ context: OpaquePointer) -> [UInt8]? {
            var bytes = [UInt8](repeating: 0, count: 65)
            let written = EC_POINT_point2oct(group, pointer, POINT_CONVERSION_UNCOMPRESSED, &bytes, bytes.count, context)
            return written == 65 ? bytes : nil
        }
    }
}

extension AssertionVerifier {
    /// The keys that could have signed `assertion` over `clientData` (see `KeyRecovery`), for a request
    /// that names no key id. Recovery proves nothing by itself: the caller looks each candidate up among
    /// the registered keys and then verifies the assertion with the registered key, as with a named one.
    public static func candidateKeys(assertion: [UInt8], clientData: [UInt8]) throws(VerificationError) -> [RecoveredKey] {
        let (signature, authData) = try decode(assertion)
        return KeyRecovery.candidates(signature: signature, message: SHA256.hash(authData, SHA256.hash(clientData)))
    }
}
