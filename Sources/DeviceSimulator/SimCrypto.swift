import COpenSSL
import Foundation

// The only file of DeviceSimulator that touches OpenSSL: every pointer is owned by one of the types
// below and freed in its deinit; the rest of the module sees [UInt8], String and Swift errors.

enum ECCurve: String {
    case p256 = "P-256"
    case p384 = "P-384"
}

enum SignatureDigest {
    case sha256
    case sha384

    fileprivate var algorithm: OpaquePointer? {
        switch self {
        case .sha256: return EVP_sha256()
        case .sha384: return EVP_sha384()
        }
    }
}

/// An EC private key (an owned EVP_PKEY). Signing never mutates it, so one key may sign on many threads.
final class SimKey: @unchecked Sendable {
    fileprivate let key: OpaquePointer

    /// The public key as an uncompressed point (0x04 || X || Y).
    let publicPoint: [UInt8]

    convenience init(curve: ECCurve) throws(SimulatorError) {
        guard let key = copenssl_EVP_EC_gen(curve.rawValue) else { throw OpenSSLFailure.error("\(curve.rawValue) key generation") }
        try self.init(owning: key, failure: { .cryptoFailure($0) })
    }

    convenience init(pem: String) throws(SimulatorError) {
        guard let key = MemoryBIO.reading(pem, { PEM_read_bio_PrivateKey($0, nil, nil, nil) }) else {
            throw OpenSSLFailure.error("reading the PEM private key", as: { .caInvalid($0) })
        }
        try self.init(owning: key, failure: { .caInvalid($0) })
    }

    private init(owning key: OpaquePointer, failure: (String) -> SimulatorError) throws(SimulatorError) {
        var point = [UInt8](repeating: 0, count: 133)
        var length = 0
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC,
              EVP_PKEY_get_octet_string_param(key, "encoded-pub-key", &point, point.count, &length) == 1 else {
            EVP_PKEY_free(key)
            throw OpenSSLFailure.error("reading the EC public point", as: failure)
        }
        self.key = key
        publicPoint = Array(point.prefix(length))
    }

    deinit { EVP_PKEY_free(key) }

    /// Unencrypted PKCS#8 PEM.
    func pem() throws(SimulatorError) -> String {
        try MemoryBIO.writing("private key PEM") { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }
    }

    /// DER ECDSA signature over `message`, which is hashed with `digest` first.
    func signature(over message: [UInt8], digest: SignatureDigest = .sha256) throws(SimulatorError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw OpenSSLFailure.error("signing context") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, digest.algorithm, nil, key) == 1 else { throw OpenSSLFailure.error("signing setup") }
        var signature = [UInt8](repeating: 0, count: 160)
        var length = signature.count
        let status = message.withUnsafeBufferPointer { input in
            EVP_DigestSign(context, &signature, &length, input.baseAddress, input.count)
        }
        guard status == 1 else { throw OpenSSLFailure.error("ECDSA signing") }
        return Array(signature.prefix(length))
    }
}

/// The encrypting half of a classic Play Integrity token (Google's side, played by tests): RFC 3394 key
/// wrap and AES-256-GCM, each on an EVP_CIPHER_CTX owned for the call.
enum SimAES {
    static func wrap(_ key: [UInt8], kek: [UInt8]) throws(SimulatorError) -> [UInt8] {
        try withContext("AES key wrap") { context in
            EVP_CIPHER_CTX_set_flags(context, Int32(EVP_CIPHER_CTX_FLAG_WRAP_ALLOW))
            var output = [UInt8](repeating: 0, count: key.count + 16)
            var length: Int32 = 0
            guard kek.count == 32, EVP_EncryptInit_ex(context, EVP_aes_256_wrap(), nil, kek, nil) == 1,
                  EVP_EncryptUpdate(context, &output, &length, key, Int32(key.count)) == 1 else { return nil }
            return Array(output.prefix(Int(length)))
        }
    }

    /// (ciphertext, 16-byte tag) of AES-256-GCM with a 12-byte IV.
    static func gcmSeal(_ plaintext: [UInt8], key: [UInt8], iv: [UInt8], aad: [UInt8]) throws(SimulatorError) -> ([UInt8], [UInt8]) {
        try withContext("AES-256-GCM encryption") { context in
            var output = [UInt8](repeating: 0, count: plaintext.count + 16)
            var tail = [UInt8](repeating: 0, count: 32)
            var tag = [UInt8](repeating: 0, count: 16)
            var length: Int32 = 0, aadLength: Int32 = 0, tailLength: Int32 = 0
            guard key.count == 32, iv.count == 12, EVP_EncryptInit_ex(context, EVP_aes_256_gcm(), nil, key, iv) == 1,
                  EVP_EncryptUpdate(context, nil, &aadLength, aad, Int32(aad.count)) == 1,
                  EVP_EncryptUpdate(context, &output, &length, plaintext, Int32(plaintext.count)) == 1,
                  EVP_EncryptFinal_ex(context, &tail, &tailLength) == 1,
                  EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else { return nil }
            return (Array(output.prefix(Int(length))) + tail.prefix(Int(tailLength)), tag)
        }
    }

    static func randomBytes(_ count: Int) throws(SimulatorError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&bytes, Int32(count)) == 1 else { throw OpenSSLFailure.error("random bytes") }
        return bytes
    }

    private static func withContext<T>(_ what: String, _ body: (OpaquePointer) -> T?) throws(SimulatorError) -> T {
        guard let context = EVP_CIPHER_CTX_new() else { throw OpenSSLFailure.error(what) }
        defer { EVP_CIPHER_CTX_free(context) }
        guard let result = body(context) else { throw OpenSSLFailure.error(what) }
        return result
    }
}

/// What a new certificate says; the signer decides the issuer name.
struct CertificateRequest {
    var subject: [(attribute: String, value: String)]
    var subjectKey: SimKey
    var notBefore: Date
    var notAfter: Date
    var extensions: [CertificateExtension]
    var digest: SignatureDigest
}

/// One X.509 v3 extension with its DER value (the content of extnValue).
struct CertificateExtension {
    let oid: String
    let critical: Bool
    let value: [UInt8]
}

/// One X.509 certificate (an owned X509).
final class SimCertificate: @unchecked Sendable {
    fileprivate let certificate: OpaquePointer
    let der: [UInt8]

    private init(owning certificate: OpaquePointer) throws(SimulatorError) {
        var output: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_X509(certificate, &output)
        guard length > 0, let output else {
            X509_free(certificate)
            throw OpenSSLFailure.error("certificate DER encoding")
        }
        defer { copenssl_free(output) }
        self.certificate = certificate
        der = Array(UnsafeBufferPointer(start: output, count: Int(length)))
    }

    convenience init(pem: String) throws(SimulatorError) {
        guard let certificate = MemoryBIO.reading(pem, { PEM_read_bio_X509($0, nil, nil, nil) }) else {
            throw OpenSSLFailure.error("reading the PEM certificate", as: { .caInvalid($0) })
        }
        try self.init(owning: certificate)
    }

    deinit { X509_free(certificate) }

    func pem() throws(SimulatorError) -> String {
        try MemoryBIO.writing("certificate PEM") { PEM_write_bio_X509($0, certificate) }
    }

    /// True when `key` is the private half of this certificate's public key.
    func isCertified(_ key: SimKey) -> Bool {
        defer { ERR_clear_error() }
        return X509_check_private_key(certificate, key.key) == 1
    }

    /// True when `issuer`'s key signed this certificate.
    func isSigned(by issuer: SimCertificate) -> Bool {
        defer { ERR_clear_error() }
        guard let issuerKey = X509_get0_pubkey(issuer.certificate) else { return false }
        return X509_verify(certificate, issuerKey) == 1
    }

    /// Issues `request`, signed by `signingKey`; `issuer` nil means self-signed.
    static func issue(_ request: CertificateRequest, issuer: SimCertificate?, signingKey: SimKey) throws(SimulatorError) -> SimCertificate {
        guard let certificate = X509_new() else { throw OpenSSLFailure.error("certificate allocation") }
        do throws(SimulatorError) {
            try fill(certificate, with: request, issuer: issuer)
            guard X509_sign(certificate, signingKey.key, request.digest.algorithm) > 0 else {
                throw OpenSSLFailure.error("certificate signing")
            }
        } catch {
            X509_free(certificate)
            throw error
        }
        return try SimCertificate(owning: certificate)
    }

    private static func fill(_ certificate: OpaquePointer, with request: CertificateRequest, issuer: SimCertificate?) throws(SimulatorError) {
        let subject = try name(request.subject)
        defer { X509_NAME_free(subject) }
        let issuerName = issuer.map { X509_get_subject_name($0.certificate) } ?? subject
        guard X509_set_version(certificate, Int(X509_VERSION_3)) == 1,
              ASN1_INTEGER_set_uint64(X509_get_serialNumber(certificate), randomSerial()) == 1,
              X509_set_subject_name(certificate, subject) == 1,
              X509_set_issuer_name(certificate, issuerName) == 1,
              ASN1_TIME_set(X509_getm_notBefore(certificate), time_t(request.notBefore.timeIntervalSince1970)) != nil,
              ASN1_TIME_set(X509_getm_notAfter(certificate), time_t(request.notAfter.timeIntervalSince1970)) != nil,
              X509_set_pubkey(certificate, request.subjectKey.key) == 1 else {
            throw OpenSSLFailure.error("certificate fields")
        }
        for item in request.extensions { try add(item, to: certificate) }
    }

    private static func name(_ entries: [(attribute: String, value: String)]) throws(SimulatorError) -> OpaquePointer {
        guard let name = X509_NAME_new() else { throw OpenSSLFailure.error("name allocation") }
        for entry in entries {
            let value = Array(entry.value.utf8)
            guard X509_NAME_add_entry_by_txt(name, entry.attribute, V_ASN1_UTF8STRING, value, Int32(value.count), -1, 0) == 1 else {
                X509_NAME_free(name)
                throw OpenSSLFailure.error("name entry \(entry.attribute)")
            }
        }
        return name
    }

    private static func add(_ item: CertificateExtension, to certificate: OpaquePointer) throws(SimulatorError) {
        guard let object = OBJ_txt2obj(item.oid, 1) else { throw OpenSSLFailure.error("extension OID \(item.oid)") }
        defer { ASN1_OBJECT_free(object) }
        guard let data = ASN1_OCTET_STRING_new() else { throw OpenSSLFailure.error("extension allocation") }
        defer { ASN1_OCTET_STRING_free(data) }
        guard ASN1_OCTET_STRING_set(data, item.value, Int32(item.value.count)) == 1,
              let created = X509_EXTENSION_create_by_OBJ(nil, object, item.critical ? 1 : 0, data) else {
            throw OpenSSLFailure.error("extension \(item.oid)")
        }
        defer { X509_EXTENSION_free(created) }
        guard X509_add_ext(certificate, created, -1) == 1 else { throw OpenSSLFailure.error("adding extension \(item.oid)") }
    }

    /// A positive 63-bit serial, unique enough for a test CA.
    private static func randomSerial() -> UInt64 {
        UInt64.random(in: 1...UInt64(Int64.max))
    }
}

/// Turns OpenSSL's error queue into a SimulatorError (and clears it, so it never leaks into a later call).
private enum OpenSSLFailure {
    static func error(_ operation: String, as make: (String) -> SimulatorError = { .cryptoFailure($0) }) -> SimulatorError {
        let code = ERR_get_error()
        ERR_clear_error()
        guard code != 0 else { return make("\(operation) failed") }
        var text = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &text, text.count)
        return make("\(operation) failed: \(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))")
    }
}

/// PEM text in and out of OpenSSL through memory BIOs.
private enum MemoryBIO {
    static func reading<T>(_ text: String, _ body: (OpaquePointer) -> T?) -> T? {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBufferPointer { buffer -> T? in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return body(bio)
        }
    }

    static func writing(_ what: String, _ body: (OpaquePointer) -> Int32) throws(SimulatorError) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw OpenSSLFailure.error("\(what) buffer") }
        defer { BIO_free(bio) }
        guard body(bio) == 1 else { throw OpenSSLFailure.error(what) }
        var output = [UInt8](repeating: 0, count: Int(BIO_ctrl_pending(bio)))
        let read = BIO_read(bio, &output, Int32(output.count))
        guard read == output.count else { throw OpenSSLFailure.error(what) }
        return String(decoding: output, as: UTF8.self)
    }
}
