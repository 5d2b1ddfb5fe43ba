import COpenSSL
import Foundation

// With KeyRecovery.swift, the only files of AssertionCheck that touch OpenSSL: every pointer is owned by one
// of these types and freed in its deinit (or its scope); the rest of the module sees [UInt8], Bool and Swift errors.

/// SHA-256 through OpenSSL's low-level SHA256_Init/Update/Final: in OpenSSL 3 the one-shot SHA256()
/// and EVP_Digest fetch the algorithm from the provider on every call, which costs more than hashing
/// a short message.
public enum SHA256 {
    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        hash(bytes, [])
    }

    /// SHA256 of no bytes (the body of every GET an assert route binds): a constant, not a compression.
    private static let ofNothing: [UInt8] = [
        0xE3, 0xB0, 0xC4, 0x42, 0x98, 0xFC, 0x1C, 0x14, 0x9A, 0xFB, 0xF4, 0xC8, 0x99, 0x6F, 0xB9, 0x24,
        0x27, 0xAE, 0x41, 0xE4, 0x64, 0x9B, 0x93, 0x4C, 0xA4, 0x95, 0x99, 0x1B, 0x78, 0x52, 0xB8, 0x55,
    ]

    /// SHA256(first || second) without building the concatenation (the App Attest nonce).
    public static func hash(_ first: [UInt8], _ second: [UInt8]) -> [UInt8] {
        if first.isEmpty && second.isEmpty { return ofNothing }
        return digest(first[...], second[...]).bytes
    }

    /// The same as a value: a digest that only feeds the next hash or a compare needs no array.
    public static func digest(_ first: ArraySlice<UInt8>, _ second: ArraySlice<UInt8> = []) -> Digest {
        var context = SHA256_CTX()
        SHA256_Init(&context)
        return Midstate.finish(&context, first, second)
    }

    /// SHA256(first || second) where `second` is itself a digest (the App Attest nonce).
    public static func digest(_ first: ArraySlice<UInt8>, _ second: Digest) -> Digest {
        var context = SHA256_CTX()
        SHA256_Init(&context)
        if !first.isEmpty { first.withUnsafeBytes { _ = SHA256_Update(&context, $0.baseAddress, $0.count) } }
        second.update(&context)
        return Midstate.finalDigest(&context)
    }

    /// 32 bytes held inline.
    public struct Digest: Sendable {
        fileprivate var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

        public var bytes: [UInt8] {
            [UInt8](unsafeUninitializedCapacity: 32) { buffer, initialized in
                withUnsafeBytes(of: words) { UnsafeMutableRawBufferPointer(buffer).copyMemory(from: $0) }
                initialized = 32
            }
        }

        /// Constant-time equality with `other` (a MAC as received).
        public func matches(_ other: ArraySlice<UInt8>) -> Bool {
            withUnsafeBytes(of: words) { own in
                other.withUnsafeBytes { Bytes.constantTimeEqual(own, $0) }
            }
        }

        /// The digest hashed where it lies.
        fileprivate func update(_ context: inout SHA256_CTX) {
            withUnsafeBytes(of: words) { _ = SHA256_Update(&context, $0.baseAddress, 32) }
        }
    }

    /// The hash state after a fixed prefix, for messages that all start with it (HMAC's padded keys: one
    /// compression less per use). A value: each `hash` continues from a copy.
    public struct Midstate: @unchecked Sendable {
        private let context: SHA256_CTX

        public init(prefix: [UInt8]) {
            var context = SHA256_CTX()
            SHA256_Init(&context)
            prefix.withUnsafeBytes { _ = SHA256_Update(&context, $0.baseAddress, $0.count) }
            self.context = context
        }

        /// SHA256(prefix || first || second), the parts hashed where they are.
        public func digest(_ first: ArraySlice<UInt8>, _ second: ArraySlice<UInt8> = []) -> Digest {
            var context = self.context
            return Self.finish(&context, first, second)
        }

        /// SHA256(prefix || digest) (HMAC's outer hash).
        public func digest(_ inner: Digest) -> Digest {
            var context = self.context
            inner.update(&context)
            return Self.finalDigest(&context)
        }

        fileprivate static func finish(_ context: inout SHA256_CTX, _ first: ArraySlice<UInt8>, _ second: ArraySlice<UInt8>) -> Digest {
            if !first.isEmpty { first.withUnsafeBytes { _ = SHA256_Update(&context, $0.baseAddress, $0.count) } }
            if !second.isEmpty { second.withUnsafeBytes { _ = SHA256_Update(&context, $0.baseAddress, $0.count) } }
            return finalDigest(&context)
        }

        fileprivate static func finalDigest(_ context: inout SHA256_CTX) -> Digest {
            var digest = Digest()
            withUnsafeMutableBytes(of: &digest.words) { _ = SHA256_Final($0.baseAddress?.assumingMemoryBound(to: UInt8.self), &context) }
            return digest
        }
    }
}

/// An ECDSA P-256 public key: the curve point as an owned EC_POINT on one shared curve group.
/// Immutable once made, so one instance may verify on many threads at once. Kept small (~0.3 KiB) and
/// cheap to make (a few µs, no DER decoder): the gateway caches many of them.
public final class P256PublicKey: @unchecked Sendable {
    private let curvePoint: OpaquePointer
    /// The uncompressed point (0x04 || X || Y), 65 bytes.
    public let point: [UInt8]

    /// DER SubjectPublicKeyInfo prefix of every P-256 key (id-ecPublicKey, prime256v1, BIT STRING of 66 bytes).
    private static let spkiPrefix: [UInt8] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A,
        0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ]

    /// The P-256 group, shared read-only by every key (OpenSSL's group objects are large).
    static let group = SharedGroup()

    final class SharedGroup: @unchecked Sendable {
        let pointer: OpaquePointer = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1)
    }

    /// Accepts the 65-byte uncompressed point or its DER SubjectPublicKeyInfo (the one canonical
    /// encoding of a P-256 key: the fixed prefix followed by the point).
    public convenience init(bytes: [UInt8]) throws(VerificationError) {
        if bytes.count == 65 {
            try self.init(point: bytes)
        } else if bytes.count == 91, bytes.starts(with: P256PublicKey.spkiPrefix) {
            try self.init(point: Array(bytes[26...]))
        } else {
            throw VerificationError(.badPublicKey, "public key is neither a P-256 SubjectPublicKeyInfo nor a 65-byte uncompressed point")
        }
    }

    /// The point must be uncompressed and on the curve.
    public init(point: [UInt8]) throws(VerificationError) {
        let group = P256PublicKey.group.pointer
        guard point.count == 65, point[0] == 0x04, let curvePoint = EC_POINT_new(group) else {
            throw VerificationError(.badPublicKey, "public key is not a 65-byte uncompressed P-256 point")
        }
        guard EC_POINT_oct2point(group, curvePoint, point, point.count, nil) == 1 else {
            EC_POINT_free(curvePoint)
            ERR_clear_error()
            throw VerificationError(.badPublicKey, "public key is not a point on P-256")
        }
        self.curvePoint = curvePoint
        self.point = point
    }

    deinit { EC_POINT_free(curvePoint) }

    /// The DER SubjectPublicKeyInfo (what the gateway stores and the CLI prints).
    public var spki: [UInt8] { P256PublicKey.spkiPrefix + point }

    /// Verifies a DER ECDSA signature over `message` (ECDSA-SHA256: the message is hashed once more).
    /// Uses the low-level ECDSA_do_verify on a transient EC_KEY: OpenSSL 3's EVP path fetches the algorithm
    /// from the provider on every call, which costs as much as a third of the verify itself. The DER is read
    /// here (`ECDSASignature.integerRanges`) rather than by ECDSA_verify, whose ASN.1 decode and re-encode
    /// (to refuse every other spelling) cost ~8,000 instructions; the same spellings are refused.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        isValidSignature(signature[...], digest: SHA256.digest(message[...]))
    }

    /// The same for a message that is itself a digest (App Attest signs the nonce): no array on the way.
    public func isValidSignature(_ signature: ArraySlice<UInt8>, for message: SHA256.Digest) -> Bool {
        isValidSignature(signature, digest: SHA256.digest([], message))
    }

    private func isValidSignature(_ signature: ArraySlice<UInt8>, digest: SHA256.Digest) -> Bool {
        signature.withUnsafeBufferPointer { der in
            guard let (r, s) = ECDSASignature.integerRanges(fromDER: der),
                  let scratch = P256PublicKey.spareScratch.borrow() else { return false }
            defer { P256PublicKey.spareScratch.giveBack(scratch) }
            // R and S into the scratch signature's own BIGNUMs (BN_bin2bn reuses their storage).
            guard BN_bin2bn(der.baseAddress! + r.lowerBound, Int32(r.count), scratch.r) != nil,
                  BN_bin2bn(der.baseAddress! + s.lowerBound, Int32(s.count), scratch.s) != nil,
                  copenssl_EC_KEY_copy_public_key(scratch.key, curvePoint) == 1 else {
                ERR_clear_error()
                return false
            }
            let result = withUnsafeBytes(of: digest.words) {
                ECDSA_do_verify($0.baseAddress?.assumingMemoryBound(to: UInt8.self), 32, scratch.signature, scratch.key)
            }
            if result != 1 { ERR_clear_error() }
            return result == 1
        }
    }

    /// What one verification needs besides the key's point, lent to one verification at a time: an EC_KEY
    /// with the group already set (making one per call copied the group and freed it again, about 15,000
    /// instructions) and an ECDSA_SIG whose two BIGNUMs take R and S (~1,500 in allocations per call).
    static let spareScratch = SpareScratch()

    final class SpareScratch: @unchecked Sendable {
        struct Scratch {
            let key: OpaquePointer
            let signature: OpaquePointer
            /// The signature's own R and S (owned by it).
            let r: OpaquePointer
            let s: OpaquePointer
        }

        private let lock = NSLock()  // a pthread mutex: no spinning when the loops meet here
        private var kept: [Scratch] = []

        func borrow() -> Scratch? {
            if let scratch = lock.withLock({ kept.popLast() }) { return scratch }
            guard let key = EC_KEY_new() else { return nil }
            guard EC_KEY_set_group(key, P256PublicKey.group.pointer) == 1, let signature = ECDSA_SIG_new() else {
                EC_KEY_free(key)
                return nil
            }
            guard let r = BN_new(), let s = BN_new() else {
                EC_KEY_free(key)
                ECDSA_SIG_free(signature)
                return nil
            }
            _ = ECDSA_SIG_set0(signature, r, s)
            return Scratch(key: key, signature: signature, r: r, s: s)
        }

        /// Kept for the next verification (a few: one per thread that verifies at once).
        func giveBack(_ scratch: Scratch) {
            let isKept = lock.withLock { () -> Bool in
                guard kept.count < 16 else { return false }
                kept.append(scratch)
                return true
            }
            if !isKept {
                EC_KEY_free(scratch.key)
                ECDSA_SIG_free(scratch.signature)
            }
        }
    }

    /// The uncompressed point of an EVP_PKEY, if it is a P-256 key.
    fileprivate static func uncompressedPoint(_ key: OpaquePointer) -> [UInt8]? {
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC else { return nil }
        var name = [CChar](repeating: 0, count: 64)
        var nameLength = 0
        guard EVP_PKEY_get_group_name(key, &name, name.count, &nameLength) == 1,
              String(decoding: name.prefix(nameLength).map { UInt8(bitPattern: $0) }, as: UTF8.self) == "prime256v1" else { return nil }
        var point = [UInt8](repeating: 0, count: 65)
        var length = 0
        guard EVP_PKEY_get_octet_string_param(key, "encoded-pub-key", &point, point.count, &length) == 1,
              length == 65, point[0] == 0x04 else { return nil }
        return point
    }
}

/// One parsed X.509 certificate (an owned X509).
final class X509Certificate {
    fileprivate let certificate: OpaquePointer

    init(der: [UInt8]) throws(VerificationError) {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let cert = d2i_X509(nil, &cursor, buffer.count)
            // Trailing bytes after the certificate are not a certificate.
            if let cert, cursor != buffer.baseAddress.map({ $0 + buffer.count }) {
                X509_free(cert)
                return nil
            }
            return cert
        }
        guard let parsed else {
            ERR_clear_error()
            throw VerificationError(.badCertificate, "x5c entry is not a DER X.509 certificate")
        }
        certificate = parsed
    }

    init(pem: String) throws(VerificationError) {
        let bytes = Array(pem.utf8)
        let parsed: OpaquePointer? = bytes.withUnsafeBufferPointer { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_X509(bio, nil, nil, nil)
        }
        guard let parsed else {
            ERR_clear_error()
            throw VerificationError(.badCertificate, "not a PEM certificate")
        }
        certificate = parsed
    }

    deinit { X509_free(certificate) }

    func publicKey() throws(VerificationError) -> P256PublicKey {
        guard let key = X509_get0_pubkey(certificate), let point = P256PublicKey.uncompressedPoint(key) else {
            ERR_clear_error()
            throw VerificationError(.badCertificate, "credCert public key is not an EC P-256 key")
        }
        return try P256PublicKey(point: point)
    }

    /// The DER content (inside the extnValue OCTET STRING) of the extension with this dotted OID.
    func extensionValue(oid: String) -> [UInt8]? {
        guard let object = OBJ_txt2obj(oid, 1) else { return nil }
        defer { ASN1_OBJECT_free(object) }
        let index = X509_get_ext_by_OBJ(certificate, object, -1)
        guard index >= 0, let ext = X509_get_ext(certificate, index),
              let data = X509_EXTENSION_get_data(ext) else { return nil }
        let length = Int(ASN1_STRING_length(data))
        guard let start = ASN1_STRING_get0_data(data) else { return nil }
        return Array(UnsafeBufferPointer(start: start, count: length))
    }

    var derBytes: [UInt8] {
        var output: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_X509(certificate, &output)
        guard length > 0, let output else { return [] }
        defer { copenssl_free(output) }
        return Array(UnsafeBufferPointer(start: output, count: Int(length)))
    }
}

/// Chain validation: leaf → intermediates → one pinned trust anchor, at an injected time.
enum X509Chain {
    static func verify(leaf: X509Certificate, intermediates: [X509Certificate], anchor: X509Certificate,
                       at time: Date) throws(VerificationError) {
        guard let store = X509_STORE_new() else { throw VerificationError(.chainInvalid, "out of memory") }
        defer { X509_STORE_free(store) }
        // Only the pinned anchor is trusted: no system paths are ever loaded.
        guard X509_STORE_add_cert(store, anchor.certificate) == 1,
              let untrusted = copenssl_sk_X509_new_null() else {
            throw VerificationError(.chainInvalid, "cannot load the trust anchor")
        }
        defer { copenssl_sk_X509_free(untrusted) }
        for certificate in intermediates { _ = copenssl_sk_X509_push(untrusted, certificate.certificate) }
        guard let context = X509_STORE_CTX_new() else { throw VerificationError(.chainInvalid, "out of memory") }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_CTX_init(context, store, leaf.certificate, untrusted) == 1 else {
            throw VerificationError(.chainInvalid, "cannot initialise chain verification")
        }
        X509_STORE_CTX_set_time(context, 0, time_t(time.timeIntervalSince1970.rounded(.down)))
        let verified = X509_verify_cert(context) == 1
        let code = X509_STORE_CTX_get_error(context)
        ERR_clear_error()
        if verified { return }
        let detail = X509_verify_cert_error_string(Int(code)).map { String(validatingCString: $0) ?? "" } ?? ""
        switch code {
        case X509_V_ERR_CERT_HAS_EXPIRED:
            throw VerificationError(.certExpired, "a certificate of the chain has expired: \(detail)")
        case X509_V_ERR_CERT_NOT_YET_VALID:
            throw VerificationError(.certNotYetValid, "a certificate of the chain is not yet valid (check the clock): \(detail)")
        default:
            throw VerificationError(.chainInvalid, "certificate chain does not verify to the trust anchor: \(detail)")
        }
    }
}

/// An ECDSA P-256 private key (an owned EVP_PKEY), such as the `.p8` key Apple issues for its server APIs.
/// Never printed: `description` and the mirror are redacted, and no error message quotes the PEM.
public final class P256PrivateKey: @unchecked Sendable, CustomStringConvertible, CustomReflectable {
    private let key: OpaquePointer
    public let publicKey: P256PublicKey

    /// Accepts an unencrypted PEM private key: PKCS#8 ("BEGIN PRIVATE KEY", Apple's `.p8`) or SEC1
    /// ("BEGIN EC PRIVATE KEY"). Encrypted keys are refused rather than prompting for a passphrase.
    public init(pem: String) throws(VerificationError) {
        let parsed = try readPEMPrivateKey(pem)
        guard let point = P256PublicKey.uncompressedPoint(parsed), let publicKey = try? P256PublicKey(point: point) else {
            EVP_PKEY_free(parsed)
            throw VerificationError(.badPrivateKey, "private key is not an EC P-256 key")
        }
        key = parsed
        self.publicKey = publicKey
    }

    deinit { EVP_PKEY_free(key) }

    public var description: String { "P256PrivateKey(<redacted>)" }
    public var customMirror: Mirror { Mirror(self, children: []) }

    /// ES256 as JWS wants it: ECDSA-SHA256 over `message`, as the raw 64-byte R || S (not DER).
    public func es256Signature(for message: [UInt8]) throws(VerificationError) -> [UInt8] {
        guard let raw = ECDSASignature.raw(fromDER: try sha256DigestSign(key, message)) else {
            throw VerificationError(.badPrivateKey, "signing failed")
        }
        return ECDSASignature.lowS(raw)
    }
}

/// An unencrypted PEM private key of any type, as an owned EVP_PKEY (the caller frees it or keeps it).
/// Encrypted keys are refused rather than prompting for a passphrase.
private func readPEMPrivateKey(_ pem: String) throws(VerificationError) -> OpaquePointer {
    let bytes = Array(pem.utf8)
    // A non-NULL empty passphrase stops OpenSSL from asking the terminal for one.
    var noPassphrase: [CChar] = [0]
    let parsed: OpaquePointer? = bytes.withUnsafeBufferPointer { buffer in
        guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
        defer { BIO_free(bio) }
        return noPassphrase.withUnsafeMutableBytes { PEM_read_bio_PrivateKey(bio, nil, nil, $0.baseAddress) }
    }
    ERR_clear_error()
    guard let parsed else { throw VerificationError(.badPrivateKey, "not an unencrypted PEM private key") }
    return parsed
}

/// EVP_DigestSign with SHA-256 over `message` under `key`: the signature as OpenSSL writes it (DER for ECDSA,
/// PKCS#1 v1.5 for RSA).
private func sha256DigestSign(_ key: OpaquePointer, _ message: [UInt8]) throws(VerificationError) -> [UInt8] {
    guard let context = EVP_MD_CTX_new() else { throw VerificationError(.badPrivateKey, "out of memory") }
    defer { EVP_MD_CTX_free(context) }
    var length = 0
    guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1,
          EVP_DigestSign(context, nil, &length, message, message.count) == 1 else {
        ERR_clear_error()
        throw VerificationError(.badPrivateKey, "cannot sign with this key")
    }
    var signature = [UInt8](repeating: 0, count: length)
    guard EVP_DigestSign(context, &signature, &length, message, message.count) == 1 else {
        ERR_clear_error()
        throw VerificationError(.badPrivateKey, "signing failed")
    }
    return Array(signature.prefix(length))
}

/// The two encodings of a P-256 ECDSA signature: DER ECDSA-Sig-Value (X.509, CMS, App Attest assertions)
/// and the fixed 64-byte R || S of JWS (RFC 7518 §3.4).
public enum ECDSASignature {
    /// nil unless `der` is exactly one DER ECDSA-Sig-Value whose R and S fit 32 bytes.
    public static func raw(fromDER der: [UInt8]) -> [UInt8]? {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let signature = d2i_ECDSA_SIG(nil, &cursor, buffer.count)
            if let signature, cursor != buffer.baseAddress.map({ $0 + buffer.count }) {
                ECDSA_SIG_free(signature)
                return nil
            }
            return signature
        }
        ERR_clear_error()
        guard let parsed else { return nil }
        defer { ECDSA_SIG_free(parsed) }
        var r: OpaquePointer? = nil
        var s: OpaquePointer? = nil
        ECDSA_SIG_get0(parsed, &r, &s)
        var raw = [UInt8](repeating: 0, count: 64)
        let written = raw.withUnsafeMutableBufferPointer { buffer in
            (BN_bn2binpad(r, buffer.baseAddress, 32), BN_bn2binpad(s, buffer.baseAddress! + 32, 32))
        }
        return written == (32, 32) ? raw : nil
    }

    /// Where R's and S's magnitudes lie in `der`, when it is exactly one DER ECDSA-Sig-Value (a SEQUENCE of
    /// two non-negative INTEGERs, each in its one minimal encoding, nothing after) whose R and S fit 32 bytes;
    /// nil otherwise. The spellings ECDSA_verify accepts: it encodes what it parsed again and refuses any
    /// difference (and an R or S of more than 32 bytes is not below the order).
    static func integerRanges(fromDER der: UnsafeBufferPointer<UInt8>) -> (r: Range<Int>, s: Range<Int>)? {
        // Two INTEGERs of at most 33 bytes each: the SEQUENCE's length always fits its one short-form byte.
        guard der.count >= 8, der[0] == 0x30, der[1] < 0x80, Int(der[1]) == der.count - 2 else { return nil }
        var cursor = 2
        func integer() -> Range<Int>? {
            guard cursor + 2 <= der.count, der[cursor] == 0x02 else { return nil }
            let length = Int(der[cursor + 1])
            let start = cursor + 2
            guard (1...33).contains(length), start + length <= der.count, der[start] & 0x80 == 0 else { return nil }
            cursor = start + length
            guard der[start] == 0, length > 1 else { return length <= 32 ? start..<cursor : nil }
            // A leading zero only to keep the next byte's top bit from reading as a sign.
            return der[start + 1] & 0x80 != 0 ? (start + 1)..<cursor : nil
        }
        guard let r = integer(), let s = integer(), cursor == der.count else { return nil }
        return (r, s)
    }

    /// P-256's group order n, and n / 2 rounded down (big-endian).
    private static let order: [UInt8] = [0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                         0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51]
    private static let halfOrder: [UInt8] = [0x7F, 0xFF, 0xFF, 0xFF, 0x80, 0x00, 0x00, 0x00, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                             0xDE, 0x73, 0x7D, 0x56, 0xD3, 0x8B, 0xCF, 0x42, 0x79, 0xDC, 0xE5, 0x61, 0x7E, 0x31, 0x92, 0xA8]

    /// Whether a raw P-256 signature's S is at most n / 2. (R, S) and (R, n − S) both verify: the low one is
    /// the single spelling a signer that normalises (`lowS`) produces.
    public static func isLowS(_ raw: [UInt8]) -> Bool {
        raw.count == 64 && !halfOrder.lexicographicallyPrecedes(raw[32...])
    }

    /// `raw` with S replaced by n − S when it is in the upper half (the same signature, its low-S spelling).
    public static func lowS(_ raw: [UInt8]) -> [UInt8] {
        raw.count == 64 && !isLowS(raw) ? flippedS(raw) : raw
    }

    /// The other spelling of the same signature: (R, n − S), for S in 1..<n.
    public static func flippedS(_ raw: [UInt8]) -> [UInt8] {
        guard raw.count == 64 else { return raw }
        var result = raw
        var borrow = 0
        for index in (0..<32).reversed() {
            let difference = Int(order[index]) - Int(raw[32 + index]) - borrow
            result[32 + index] = UInt8((difference + 256) % 256)
            borrow = difference < 0 ? 1 : 0
        }
        return result
    }

    /// nil unless `raw` is 64 bytes.
    public static func der(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 64, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        guard let r = BN_bin2bn(raw, 32, nil) else { return nil }
        guard let s = raw.withUnsafeBufferPointer({ BN_bin2bn($0.baseAddress! + 32, 32, nil) }) else {
            BN_free(r)
            return nil
        }
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        var output: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_ECDSA_SIG(signature, &output)
        guard length > 0, let output else { return nil }
        defer { copenssl_free(output) }
        return Array(UnsafeBufferPointer(start: output, count: Int(length)))
    }
}

/// What a verified SignedData holds: its content and the certificate that signed it.
struct SignedContent {
    let content: [UInt8]
    let signer: X509Certificate
}

/// A DER PKCS#7 SignedData that carries its content (an App Attest receipt), as an owned PKCS7.
final class PKCS7SignedData {
    private let pkcs7: UnsafeMutablePointer<PKCS7>

    init(der: [UInt8]) throws(VerificationError) {
        let parsed: UnsafeMutablePointer<PKCS7>? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let object = d2i_PKCS7(nil, &cursor, buffer.count)
            if let object, cursor != buffer.baseAddress.map({ $0 + buffer.count }) {
                PKCS7_free(object)
                return nil
            }
            return object
        }
        ERR_clear_error()
        guard let parsed else { throw VerificationError(.badFormat, "not a DER PKCS#7 object") }
        guard OBJ_obj2nid(parsed.pointee.type) == NID_pkcs7_signed, parsed.pointee.d.sign != nil else {
            PKCS7_free(parsed)
            throw VerificationError(.badFormat, "PKCS#7 object is not SignedData")
        }
        pkcs7 = parsed
    }

    deinit { PKCS7_free(pkcs7) }

    /// Checks the one signer's signature over the embedded content, then the signer's chain (through the
    /// certificates embedded beside it) to `anchor` at `time`. Throws `signature_invalid` for a bad signature
    /// and X509Chain's reasons for the chain.
    func verify(anchor: X509Certificate, at time: Date) throws(VerificationError) -> SignedContent {
        let (content, signer) = try verifiedSignature()
        let embedded = try certificates(pkcs7.pointee.d.sign.pointee.cert)
        let signerDER = signer.derBytes
        let intermediates = embedded.filter { $0.derBytes != signerDER }
        try X509Chain.verify(leaf: signer, intermediates: intermediates, anchor: anchor, at: time)
        return SignedContent(content: content, signer: signer)
    }

    private func verifiedSignature() throws(VerificationError) -> ([UInt8], X509Certificate) {
        guard let signers = PKCS7_get0_signers(pkcs7, nil, 0) else {
            ERR_clear_error()
            throw VerificationError(.badFormat, "SignedData names no signer whose certificate it carries")
        }
        defer { copenssl_sk_X509_free(signers) }
        guard copenssl_sk_X509_num(signers) == 1 else {
            throw VerificationError(.badFormat, "SignedData must have exactly one signer")
        }
        let signer = try certificates(signers)[0]
        guard let output = BIO_new(BIO_s_mem()) else { throw VerificationError(.badFormat, "out of memory") }
        defer { BIO_free(output) }
        // NOVERIFY: the chain is checked by X509Chain against the pinned anchor only, at the injected time.
        let verified = PKCS7_verify(pkcs7, nil, nil, nil, output, PKCS7_NOVERIFY | PKCS7_BINARY) == 1
        ERR_clear_error()
        guard verified else { throw VerificationError(.signatureInvalid, "SignedData signature does not verify over its content") }
        var content = [UInt8](repeating: 0, count: BIO_ctrl_pending(output))
        let read = content.isEmpty ? 0 : BIO_read(output, &content, Int32(content.count))
        return (Array(content.prefix(Int(max(read, 0)))), signer)
    }

    /// Owned copies of the certificates of an X509 stack that this object owns.
    private func certificates(_ stack: OpaquePointer?) throws(VerificationError) -> [X509Certificate] {
        guard let stack else { return [] }
        var result = [X509Certificate]()
        for index in 0..<copenssl_sk_X509_num(stack) {
            guard let certificate = copenssl_sk_X509_value(stack, index) else { continue }
            var output: UnsafeMutablePointer<UInt8>? = nil
            let length = i2d_X509(certificate, &output)
            guard length > 0, let output else { throw VerificationError(.badCertificate, "cannot encode an embedded certificate") }
            defer { copenssl_free(output) }
            result.append(try X509Certificate(der: Array(UnsafeBufferPointer(start: output, count: Int(length)))))
        }
        return result
    }
}

// MARK: - Public key recovery

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
        return KeyRecovery.candidates(signature: Array(signature), message: SHA256.digest(authData, SHA256.digest(clientData[...])).bytes)
    }
}

// MARK: - RSA (RS256: Google's service-account assertions)

/// An RSA private key (an owned EVP_PKEY) of at least 2048 bits, such as the one in a Google service-account
/// file. Never printed: `description` and the mirror are redacted, and no error message quotes the PEM.
public final class RSAPrivateKey: @unchecked Sendable, CustomStringConvertible, CustomReflectable {
    private let key: OpaquePointer
    public let publicKey: RSAPublicKey

    /// Accepts an unencrypted PEM private key, PKCS#8 ("BEGIN PRIVATE KEY", what Google issues) or PKCS#1
    /// ("BEGIN RSA PRIVATE KEY"). Encrypted keys are refused rather than prompting for a passphrase.
    public init(pem: String) throws(VerificationError) {
        let parsed = try readPEMPrivateKey(pem)
        guard EVP_PKEY_get_base_id(parsed) == EVP_PKEY_RSA, EVP_PKEY_get_bits(parsed) >= RSAPublicKey.minimumBits else {
            EVP_PKEY_free(parsed)
            throw VerificationError(.badPrivateKey, "private key is not an RSA key of at least \(RSAPublicKey.minimumBits) bits")
        }
        var output: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_PUBKEY(parsed, &output)
        guard length > 0, let output, let publicKey = try? RSAPublicKey(spki: Array(UnsafeBufferPointer(start: output, count: Int(length)))) else {
            EVP_PKEY_free(parsed)
            ERR_clear_error()
            throw VerificationError(.badPrivateKey, "cannot derive the RSA public key")
        }
        copenssl_free(output)
        key = parsed
        self.publicKey = publicKey
    }

    deinit { EVP_PKEY_free(key) }

    public var description: String { "RSAPrivateKey(<redacted>)" }
    public var customMirror: Mirror { Mirror(self, children: []) }

    /// RS256 (RFC 7518 §3.3): RSASSA-PKCS1-v1_5 with SHA-256 over `message`.
    public func rs256Signature(for message: [UInt8]) throws(VerificationError) -> [UInt8] {
        // PKCS#1 v1.5 is OpenSSL's default padding for an RSA EVP_PKEY.
        try sha256DigestSign(key, message)
    }
}

/// An RSA public key (an owned EVP_PKEY): checks RS256 signatures (the fake Google does, with the service
/// account's key). Immutable, so usable from many threads.
public final class RSAPublicKey: @unchecked Sendable {
    /// Google's service-account keys are 2048 bits; shorter keys are not safe to sign with.
    public static let minimumBits: Int32 = 2048
    private let key: OpaquePointer
    /// The DER SubjectPublicKeyInfo.
    public let spki: [UInt8]

    public init(spki: [UInt8]) throws(VerificationError) {
        let parsed: OpaquePointer? = spki.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let object = d2i_PUBKEY(nil, &cursor, buffer.count)
            if let object, cursor != buffer.baseAddress.map({ $0 + buffer.count }) {
                EVP_PKEY_free(object)
                return nil
            }
            return object
        }
        ERR_clear_error()
        guard let parsed else { throw VerificationError(.badPublicKey, "not a DER SubjectPublicKeyInfo") }
        guard EVP_PKEY_get_base_id(parsed) == EVP_PKEY_RSA, EVP_PKEY_get_bits(parsed) >= Self.minimumBits else {
            EVP_PKEY_free(parsed)
            throw VerificationError(.badPublicKey, "public key is not an RSA key of at least \(Self.minimumBits) bits")
        }
        key = parsed
        self.spki = spki
    }

    deinit { EVP_PKEY_free(key) }

    /// Whether `signature` is an RS256 (RSASSA-PKCS1-v1_5, SHA-256) signature of `message` by this key.
    public func isValidRS256Signature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        let valid = EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1
            && EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
        ERR_clear_error()
        return valid
    }
}

// MARK: - AES-256 (Play Integrity's JWE: A256KW key wrap, A256GCM content)

/// The two AES-256 operations that decrypting a JWE with `alg` A256KW and `enc` A256GCM needs (RFC 7518 §4.4, §5.3), each
/// on an EVP_CIPHER_CTX owned for the call. Both answer nil rather than throw: the caller knows which step
/// of the token failed, and OpenSSL's words would say nothing more to a client.
public enum AES256 {
    public static let keyBytes = 32
    public static let gcmIVBytes = 12
    public static let gcmTagBytes = 16

    /// RFC 3394 key unwrap with the default IV: nil when `kek` is not 32 bytes, `wrapped` is not a whole
    /// number of 8-byte blocks (at least 3), or the integrity check fails (the wrong key, or altered bytes).
    public static func unwrapKey(_ wrapped: [UInt8], kek: [UInt8]) -> [UInt8]? {
        guard kek.count == keyBytes, wrapped.count >= 24, wrapped.count % 8 == 0 else { return nil }
        return withContext { context in
            // OpenSSL refuses the wrap modes through EVP unless the caller says it means them.
            EVP_CIPHER_CTX_set_flags(context, Int32(EVP_CIPHER_CTX_FLAG_WRAP_ALLOW))
            guard EVP_DecryptInit_ex(context, EVP_aes_256_wrap(), nil, kek, nil) == 1 else { return nil }
            var output = [UInt8](repeating: 0, count: wrapped.count + 8)
            var length: Int32 = 0
            var finalLength: Int32 = 0
            var tail = [UInt8](repeating: 0, count: 32)
            guard EVP_DecryptUpdate(context, &output, &length, wrapped, Int32(wrapped.count)) == 1,
                  EVP_DecryptFinal_ex(context, &tail, &finalLength) == 1,
                  Int(length + finalLength) == wrapped.count - 8 else { return nil }
            return Array(output.prefix(Int(length))) + tail.prefix(Int(finalLength))
        }
    }

    /// AES-256-GCM with a 96-bit IV and a 128-bit tag: the plaintext, or nil when the tag does not verify
    /// over `aad` and `ciphertext` under `key` (or a size is wrong).
    public static func gcmDecrypt(_ ciphertext: [UInt8], key: [UInt8], iv: [UInt8], aad: [UInt8], tag: [UInt8]) -> [UInt8]? {
        guard key.count == keyBytes, iv.count == gcmIVBytes, tag.count == gcmTagBytes, ciphertext.count < Int(Int32.max) - 16 else { return nil }
        return withContext { context in
            var tag = tag
            var output = [UInt8](repeating: 0, count: ciphertext.count + 16)
            var length: Int32 = 0
            var ignored: Int32 = 0
            var finalLength: Int32 = 0
            var tail = [UInt8](repeating: 0, count: 32)
            guard EVP_DecryptInit_ex(context, EVP_aes_256_gcm(), nil, key, iv) == 1,
                  aad.isEmpty || EVP_DecryptUpdate(context, nil, &ignored, aad, Int32(aad.count)) == 1,
                  EVP_DecryptUpdate(context, &output, &length, ciphertext, Int32(ciphertext.count)) == 1,
                  EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(gcmTagBytes), &tag) == 1,
                  EVP_DecryptFinal_ex(context, &tail, &finalLength) == 1 else { return nil }
            return Array(output.prefix(Int(length))) + tail.prefix(Int(finalLength))
        }
    }

    private static func withContext<T>(_ body: (OpaquePointer) -> T?) -> T? {
        guard let context = EVP_CIPHER_CTX_new() else { return nil }
        defer {
            EVP_CIPHER_CTX_free(context)
            ERR_clear_error()
        }
        return body(context)
    }
}
