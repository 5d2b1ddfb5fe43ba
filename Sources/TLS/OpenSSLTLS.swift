import CTLS
import Glibc

// The only file that touches libssl. `TLSClientContext` and `TLSServerContext` own SSL_CTXs, `TLSSession` one SSL
// (and the two memory BIOs it owns); `TLSStream` runs a session over a `TCPConnection` on a loop, so no socket is
// ever handed to OpenSSL. Used by the Redis client (client side) and the HTTP listener (server side).

/// Why a TLS context could not be built: the file concerned and OpenSSL's reason.
public struct TLSConfigError: Error, Equatable, Sendable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
    public init(_ message: String) { self.message = message }
}

/// A failed handshake or session: OpenSSL's reason as text, and as a short code (`TLSFailure.reasonCodes`) for metrics.
public struct TLSFailure: Error, Equatable, Sendable, CustomStringConvertible {
    public let message: String
    public let reasonCode: String
    public var description: String { message }

    public init(_ message: String, reasonCode: String) { (self.message, self.reasonCode) = (message, reasonCode) }

    /// Every code a handshake failure can carry, for zero series.
    public static let reasonCodes = ["timeout", "closed", "protocol_version", "no_shared_cipher", "not_tls", "peer_alert", otherReason]
    /// Any other failure of the TLS layer (OpenSSL's reason is in the message).
    public static let otherReason = "handshake_error"
}

/// The lowest TLS version a listener accepts (`server.tls.min_version`).
public enum TLSVersion: String, Sendable, CaseIterable {
    case tls12 = "1.2"
    case tls13 = "1.3"

    fileprivate var openSSL: Int32 { self == .tls12 ? TLS1_2_VERSION : TLS1_3_VERSION }
}

/// TLS client configuration (Redis): built once, read-only after. The peer's certificate is always verified.
public final class TLSClientContext: Sendable {
    /// SSL_CTX is safe to share between threads once configured (SSL_new only takes a reference).
    nonisolated(unsafe) fileprivate let context: OpaquePointer

    /// `caFile` nil: the system's CA store. `certFile` and `keyFile`: a client certificate, both or neither.
    public init(caFile: String?, certFile: String?, keyFile: String?) throws(TLSConfigError) {
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw TLSConfigError("cannot create a TLS context: \(OpenSSLError.take()?.text ?? "unknown error")")
        }
        do throws(TLSConfigError) {
            try configureCommon(context, minVersion: .tls12)
            SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
            if let caFile {
                try requireReadable(caFile, "CA file")
                guard SSL_CTX_load_verify_locations(context, caFile, nil) == 1 else {
                    throw TLSConfigError("cannot load CA file \(caFile): \(OpenSSLError.take()?.text ?? "no certificate found")")
                }
            } else if SSL_CTX_set_default_verify_paths(context) != 1 {
                throw TLSConfigError("cannot load the system's CA certificates: \(OpenSSLError.take()?.text ?? "unknown error")")
            }
            switch (certFile, keyFile) {
            case (nil, nil): break
            case (let certFile?, nil):
                throw TLSConfigError("certificate file \(certFile) is set without a key file: a client certificate needs both")
            case (nil, let keyFile?):
                throw TLSConfigError("key file \(keyFile) is set without a certificate file: a client certificate needs both")
            case (let certFile?, let keyFile?):
                try loadCertificate(context, certFile: certFile, keyFile: keyFile)
            }
        } catch {
            SSL_CTX_free(context)
            throw error
        }
        self.context = context
    }

    deinit { SSL_CTX_free(context) }
}

/// One certificate of a listener: its chain and key, the names it serves (none: the default) and an optional
/// DER OCSP response stapled to handshakes that ask for one.
public struct TLSServerCertificate: Sendable, Equatable {
    public let serverNames: [String]
    public let certFile: String
    public let keyFile: String
    public let ocspStapleFile: String?

    public init(serverNames: [String] = [], certFile: String, keyFile: String, ocspStapleFile: String? = nil) {
        (self.serverNames, self.certFile, self.keyFile, self.ocspStapleFile) = (serverNames.map { $0.lowercased() }, certFile, keyFile, ocspStapleFile)
    }
}

/// A listener's TLS: the default certificate first, then those chosen by SNI; ALPN protocols in preference order.
public struct TLSServerSettings: Sendable, Equatable {
    public let defaultCertificate: TLSServerCertificate
    public let certificates: [TLSServerCertificate]
    public let minVersion: TLSVersion
    public let alpn: [String]
    /// Sessions kept for resumption by session id (TLS 1.2 without tickets); tickets need no cache.
    public let sessionCacheSize: Int
    public static let maxStapleBytes = 64 * 1024

    public init(defaultCertificate: TLSServerCertificate, certificates: [TLSServerCertificate] = [], minVersion: TLSVersion = .tls12,
                alpn: [String] = ["http/1.1"], sessionCacheSize: Int = 20_000) {
        (self.defaultCertificate, self.certificates, self.minVersion) = (defaultCertificate, certificates, minVersion)
        (self.alpn, self.sessionCacheSize) = (alpn, sessionCacheSize)
    }
}

/// A listener's certificates loaded into one SSL_CTX each, read-only once built. New sessions take the context in
/// force when they start (a reload builds a new one); a session keeps its own alive until it ends. Session ticket
/// keys are OpenSSL's random ones, per context: they rotate with every reload and restart.
public final class TLSServerContext: @unchecked Sendable {
    private final class Entry {
        let context: OpaquePointer
        let names: [String]
        /// DER OCSP response, read once.
        let staple: [UInt8]?
        init(context: OpaquePointer, names: [String], staple: [UInt8]?) { (self.context, self.names, self.staple) = (context, names, staple) }
    }

    public let settings: TLSServerSettings
    private let entries: [Entry]
    /// The ALPN list in wire format (length-prefixed), kept for the life of the contexts: OpenSSL points into it.
    private let alpnWire: UnsafeMutableBufferPointer<UInt8>

    public init(_ settings: TLSServerSettings) throws(TLSConfigError) {
        var entries: [Entry] = []
        do throws(TLSConfigError) {
            for certificate in [settings.defaultCertificate] + settings.certificates {
                entries.append(try Self.load(certificate, settings))
            }
        } catch {
            entries.forEach { SSL_CTX_free($0.context) }
            throw error
        }
        self.settings = settings
        self.entries = entries
        let wire = settings.alpn.flatMap { [UInt8($0.utf8.count)] + Array($0.utf8) }
        alpnWire = .allocate(capacity: max(1, wire.count))
        _ = alpnWire.initialize(from: wire)
        let me = Unmanaged.passUnretained(self).toOpaque()
        for entry in entries {
            // Every context answers ALPN and staples: after SNI, the handshake goes on with the chosen one.
            SSL_CTX_set_alpn_select_cb(entry.context, { _, out, outCount, offered, offeredCount, arg in
                guard let arg, let out, let outCount, let offered else { return ctls_sni_noack() }
                let server = Unmanaged<TLSServerContext>.fromOpaque(arg).takeUnretainedValue()
                return server.selectProtocol(offered: UnsafeBufferPointer(start: offered, count: Int(offeredCount)), out, outCount)
            }, me)
            if entry.staple != nil {
                ctls_SSL_CTX_set_status_callback(entry.context, { ssl, arg in
                    guard let ssl, let arg else { return ctls_sni_ok() }
                    let entry = Unmanaged<Entry>.fromOpaque(arg).takeUnretainedValue()
                    guard ctls_SSL_client_asked_status(ssl) == 1, let staple = entry.staple else { return SSL_TLSEXT_ERR_NOACK }
                    let set = staple.withUnsafeBufferPointer { ctls_SSL_set_ocsp_response(ssl, $0.baseAddress, $0.count) }
                    return set == 1 ? ctls_sni_ok() : SSL_TLSEXT_ERR_NOACK
                }, Unmanaged.passUnretained(entry).toOpaque())
            }
        }
        if entries.count > 1 {
            ctls_SSL_CTX_set_servername_callback(entries[0].context, { ssl, _, arg in
                guard let ssl, let arg else { return ctls_sni_ok() }
                Unmanaged<TLSServerContext>.fromOpaque(arg).takeUnretainedValue().chooseCertificate(ssl)
                return ctls_sni_ok()
            }, me)
        }
    }

    deinit {
        entries.forEach { SSL_CTX_free($0.context) }
        alpnWire.deallocate()
    }

    fileprivate var defaultContext: OpaquePointer { entries[0].context }

    /// An exact name first, then `*.parent` for one more label; an unknown name (or none) keeps the default.
    private func chooseCertificate(_ ssl: OpaquePointer) {
        guard let raw = SSL_get_servername(ssl, Int32(TLSEXT_NAMETYPE_host_name)) else { return }
        let name = String(cString: raw).lowercased()
        let wildcard = name.firstIndex(of: ".").map { "*" + name[$0...] }
        let chosen = entries.dropFirst().first { $0.names.contains(name) } ?? wildcard.flatMap { wildcard in
            entries.dropFirst().first { $0.names.contains(wildcard) }
        }
        if let chosen { SSL_set_SSL_CTX(ssl, chosen.context) }
    }

    /// The first of our protocols the client offered; none in common: no ALPN (the client decides whether to go on).
    private func selectProtocol(offered: UnsafeBufferPointer<UInt8>, _ out: UnsafeMutablePointer<UnsafePointer<UInt8>?>,
                                _ outCount: UnsafeMutablePointer<UInt8>) -> Int32 {
        for wanted in settings.alpn {
            var index = 0
            while index < offered.count {
                let length = Int(offered[index])
                let start = index + 1
                guard start + length <= offered.count else { break }
                if length == wanted.utf8.count, wanted.utf8.elementsEqual(offered[start..<start + length]) {
                    out.pointee = UnsafePointer(offered.baseAddress! + start)
                    outCount.pointee = UInt8(length)
                    return ctls_sni_ok()
                }
                index = start + length
            }
        }
        return ctls_sni_noack()
    }

    private static func load(_ certificate: TLSServerCertificate, _ settings: TLSServerSettings) throws(TLSConfigError) -> Entry {
        guard let context = SSL_CTX_new(TLS_server_method()) else {
            throw TLSConfigError("cannot create a TLS context: \(OpenSSLError.take()?.text ?? "unknown error")")
        }
        do throws(TLSConfigError) {
            try configureCommon(context, minVersion: settings.minVersion)
            ctls_SSL_CTX_prefer_server_ciphers(context)
            ctls_SSL_CTX_set_session_cache_server(context, settings.sessionCacheSize)
            // Shared by every context of the listener, so a session resumes whichever certificate SNI picked.
            let sessionID = Array("gateway-listener".utf8)
            _ = SSL_CTX_set_session_id_context(context, sessionID, UInt32(sessionID.count))
            try loadCertificate(context, certFile: certificate.certFile, keyFile: certificate.keyFile)
            let staple = try certificate.ocspStapleFile.map { file throws(TLSConfigError) in try readStaple(file) }
            return Entry(context: context, names: certificate.serverNames, staple: staple)
        } catch {
            SSL_CTX_free(context)
            throw error
        }
    }

    private static func readStaple(_ path: String) throws(TLSConfigError) -> [UInt8] {
        try requireReadable(path, "OCSP staple file")
        guard let file = fopen(path, "rb") else { throw TLSConfigError("cannot read OCSP staple file \(path)") }
        defer { fclose(file) }
        var bytes = [UInt8](repeating: 0, count: TLSServerSettings.maxStapleBytes + 1)
        let count = fread(&bytes, 1, bytes.count, file)
        // A DER OCSPResponse is a SEQUENCE.
        guard count > 0, count <= TLSServerSettings.maxStapleBytes, bytes[0] == 0x30 else {
            throw TLSConfigError("OCSP staple file \(path) is not a DER OCSP response of at most \(TLSServerSettings.maxStapleBytes) bytes")
        }
        return Array(bytes[..<count])
    }
}

/// What both sides set: the version floor, no renegotiation, partial writes, no passphrase prompt.
private func configureCommon(_ context: OpaquePointer, minVersion: TLSVersion) throws(TLSConfigError) {
    guard ctls_SSL_CTX_set_min_proto_version(context, minVersion.openSSL) == 1 else {
        throw TLSConfigError("cannot require TLS \(minVersion.rawValue): \(OpenSSLError.take()?.text ?? "unknown error")")
    }
    ctls_SSL_CTX_disable_renegotiation(context)
    // Plaintext that OpenSSL could not take yet is retried from another buffer, in pieces; an idle session gives
    // its record buffers back (about half of an idle TLS connection's memory).
    ctls_SSL_CTX_set_mode(context, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS))
    // A passphrase-protected key fails to load instead of prompting on the terminal.
    SSL_CTX_set_default_passwd_cb(context) { _, _, _, _ in 0 }
}

/// A PEM certificate chain and its key, checked to belong together.
private func loadCertificate(_ context: OpaquePointer, certFile: String, keyFile: String) throws(TLSConfigError) {
    try requireReadable(certFile, "certificate file")
    try requireReadable(keyFile, "key file")
    guard SSL_CTX_use_certificate_chain_file(context, certFile) == 1 else {
        throw TLSConfigError("cannot load certificate file \(certFile): \(OpenSSLError.take()?.text ?? "unknown error")")
    }
    let mismatch = TLSConfigError("key file \(keyFile) does not match certificate file \(certFile)")
    guard SSL_CTX_use_PrivateKey_file(context, keyFile, SSL_FILETYPE_PEM) == 1 else {
        let error = OpenSSLError.take()
        if error?.reason == X509_R_KEY_VALUES_MISMATCH { throw mismatch }
        if isEncryptedKey(keyFile) {
            throw TLSConfigError("cannot load key file \(keyFile): it is passphrase-protected, which is not supported")
        }
        throw TLSConfigError("cannot load key file \(keyFile): \(error?.text ?? "unknown error")")
    }
    // A key of another type than the certificate's is stored beside it, not refused: check the pair.
    guard SSL_CTX_check_private_key(context) == 1 else {
        OpenSSLError.clear()
        throw mismatch
    }
}

/// A PEM key under a passphrase: "BEGIN ENCRYPTED PRIVATE KEY" (PKCS#8) or "Proc-Type: 4,ENCRYPTED" (legacy).
private func isEncryptedKey(_ path: String) -> Bool {
    guard let file = fopen(path, "r") else { return false }
    defer { fclose(file) }
    var head = [UInt8](repeating: 0, count: 4096)
    let count = fread(&head, 1, head.count, file)
    return String(decoding: head[..<count], as: UTF8.self).contains("ENCRYPTED")
}

/// OpenSSL names a missing or unreadable file only as a system error deep in its queue: say it plainly first.
private func requireReadable(_ path: String, _ what: String) throws(TLSConfigError) {
    let file = fopen(path, "r")
    // A directory opens; reading it fails (EISDIR).
    if let file, fgetc(file) != EOF || ferror(file) == 0 {
        fclose(file)
        return
    }
    let reason = String(cString: strerror(errno))
    if let file { fclose(file) }
    throw TLSConfigError("cannot read \(what) \(path): \(reason)")
}

/// OpenSSL's per-thread error queue.
private enum OpenSSLError {
    /// The first error the failed call queued ("certificate verify failed"); the queue is left empty.
    static func take() -> (reason: Int32, text: String)? {
        let code = ERR_get_error()
        clear()
        guard code != 0 else { return nil }
        var text: String
        if let reason = ERR_reason_error_string(code) {
            text = String(cString: reason)
        } else {
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        if ERR_GET_LIB(code) == ERR_LIB_PEM, ERR_GET_REASON(code) == PEM_R_NO_START_LINE {
            text += " (not a PEM file of the expected kind)"
        }
        return (ERR_GET_REASON(code), text)
    }

    /// Before each call whose failure is read from the queue: another library user on this thread may have left errors.
    static func clear() { ERR_clear_error() }
}

/// One TLS connection held in memory: ciphertext goes in and comes out through two memory BIOs, plaintext
/// through SSL_read / SSL_write. Loop thread only.
public final class TLSSession {
    enum Outcome {
        /// Done; the byte count for a read or a write.
        case ok(Int)
        /// OpenSSL needs more ciphertext from the peer first.
        case wantsInput
        /// The peer's close_notify.
        case closedByPeer
        case failed(TLSFailure)
    }

    private let ssl: OpaquePointer
    private let incoming: OpaquePointer
    private let outgoing: OpaquePointer
    /// The context whose callbacks (SNI, ALPN, OCSP) this session may still call: kept alive with it.
    private let owner: AnyObject
    private let isServer: Bool
    /// Separate buffers: the delegate may write (draining ciphertext) while it reads the plaintext buffer.
    private let plaintext: UnsafeMutableRawBufferPointer
    private let ciphertext: UnsafeMutableRawBufferPointer

    /// A client session. `serverName`: a DNS name (sent as SNI, checked against the certificate) or an IP address
    /// (checked only).
    public convenience init(_ context: TLSClientContext, serverName: String) throws(TLSConfigError) {
        try self.init(context.context, owner: context, isServer: false)
        try Self.expect(serverName, ssl)
        SSL_set_connect_state(ssl)
    }

    /// A server session with the listener's context in force now.
    public convenience init(_ context: TLSServerContext) throws(TLSConfigError) {
        try self.init(context.defaultContext, owner: context, isServer: true)
        SSL_set_accept_state(ssl)
    }

    private init(_ context: OpaquePointer, owner: AnyObject, isServer: Bool) throws(TLSConfigError) {
        guard let ssl = SSL_new(context) else {
            throw TLSConfigError("cannot create a TLS session: \(OpenSSLError.take()?.text ?? "unknown error")")
        }
        let incoming = BIO_new(BIO_s_mem()), outgoing = BIO_new(BIO_s_mem())
        guard let incoming, let outgoing else {
            BIO_free(incoming)
            BIO_free(outgoing)
            SSL_free(ssl)
            throw TLSConfigError("cannot create a TLS session: out of memory")
        }
        SSL_set_bio(ssl, incoming, outgoing)  // the session owns both BIOs from here
        (self.ssl, self.incoming, self.outgoing, self.owner, self.isServer) = (ssl, incoming, outgoing, owner, isServer)
        plaintext = .allocate(byteCount: 16 * 1024, alignment: 16)
        ciphertext = .allocate(byteCount: 16 * 1024 + 512, alignment: 16)
    }

    /// SNI and the name the certificate must carry.
    private static func expect(_ serverName: String, _ ssl: OpaquePointer) throws(TLSConfigError) {
        var address = in6_addr()
        if inet_pton(AF_INET, serverName, &address) == 1 || inet_pton(AF_INET6, serverName, &address) == 1 {
            // No SNI for an address (RFC 6066): the certificate must list it as an IP subjectAltName.
            guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName) == 1 else {
                OpenSSLError.clear()
                throw TLSConfigError("cannot check the server's certificate for IP address \(serverName)")
            }
            return
        }
        SSL_set_hostflags(ssl, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
        // An empty name would turn the name check off.
        guard !serverName.isEmpty, ctls_SSL_set_tlsext_host_name(ssl, serverName) == 1, SSL_set1_host(ssl, serverName) == 1 else {
            OpenSSLError.clear()
            throw TLSConfigError("invalid TLS server name \"\(serverName)\"")
        }
    }

    deinit {
        SSL_free(ssl)  // frees both BIOs
        plaintext.deallocate()
        ciphertext.deallocate()
    }

    /// "TLSv1.2", "TLSv1.3" once the handshake is done.
    public var protocolVersion: String { String(cString: SSL_get_version(ssl)) }

    /// The protocol ALPN settled on, if any.
    public var applicationProtocol: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// Ciphertext read from the socket. A memory BIO grows as needed, so it takes everything.
    func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var written = 0
        return bytes.isEmpty || (BIO_write_ex(incoming, bytes.baseAddress, bytes.count, &written) == 1 && written == bytes.count)
    }

    /// Hands every byte of ciphertext waiting to go out to `send` (valid only during the call).
    func drainCiphertext(_ send: (UnsafeRawBufferPointer) -> Void) {
        var count = 0
        while BIO_read_ex(outgoing, ciphertext.baseAddress, ciphertext.count, &count) == 1, count > 0 {
            send(UnsafeRawBufferPointer(rebasing: ciphertext[..<count]))
        }
    }

    func handshake() -> Outcome {
        OpenSSLError.clear()
        let result = SSL_do_handshake(ssl)
        return result == 1 ? .ok(0) : outcome(of: result)
    }

    /// Decrypts into the plaintext buffer: `.ok(n)` means `plaintext(n)` holds n new bytes.
    func read() -> Outcome {
        OpenSSLError.clear()
        var count = 0
        return SSL_read_ex(ssl, plaintext.baseAddress, plaintext.count, &count) == 1 ? .ok(count) : outcome(of: 0)
    }

    func plaintext(_ count: Int) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: plaintext[..<count]) }

    /// Encrypts what OpenSSL takes of `bytes` (not empty): `.ok(n)` may be fewer than `bytes.count`.
    func write(_ bytes: UnsafeRawBufferPointer) -> Outcome {
        OpenSSLError.clear()
        var count = 0
        return SSL_write_ex(ssl, bytes.baseAddress, bytes.count, &count) == 1 ? .ok(count) : outcome(of: 0)
    }

    /// Queues our close_notify (not waiting for the peer's).
    func shutdown() {
        OpenSSLError.clear()
        _ = SSL_shutdown(ssl)
        OpenSSLError.clear()
    }

    private func outcome(of result: Int32) -> Outcome {
        switch SSL_get_error(ssl, result) {
        // WANT_WRITE cannot happen on a memory BIO (it grows); treated like WANT_READ all the same.
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .wantsInput
        case SSL_ERROR_ZERO_RETURN: return .closedByPeer
        default: return .failed(failure())
        }
    }

    /// OpenSSL's reason, with the certificate check's own when that is what failed.
    private func failure() -> TLSFailure {
        let error = OpenSSLError.take()
        var text = error?.text ?? "unknown error"
        let verified = SSL_get_verify_result(ssl)
        if verified != X509_V_OK { text += " (\(String(cString: X509_verify_cert_error_string(verified))))" }
        let reason = error?.reason ?? 0
        switch reason {
        case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED: text += " (the server requires a client certificate)"
        case SSL_R_WRONG_VERSION_NUMBER, SSL_R_PACKET_LENGTH_TOO_LONG, SSL_R_HTTP_REQUEST, SSL_R_HTTPS_PROXY_REQUEST:
            text += isServer ? " (not a TLS client)" : " (is that a TLS port?)"
        default: break
        }
        return TLSFailure(text, reasonCode: Self.reasonCode(reason))
    }

    private static func reasonCode(_ reason: Int32) -> String {
        switch reason {
        case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_VERSION_TOO_LOW, SSL_R_NO_PROTOCOLS_AVAILABLE, SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
            "protocol_version"
        case SSL_R_NO_SHARED_CIPHER, SSL_R_NO_SHARED_GROUPS: "no_shared_cipher"
        case SSL_R_WRONG_VERSION_NUMBER, SSL_R_PACKET_LENGTH_TOO_LONG, SSL_R_HTTP_REQUEST, SSL_R_HTTPS_PROXY_REQUEST: "not_tls"
        case Int32(SSL_AD_REASON_OFFSET)...: "peer_alert"
        default: TLSFailure.otherReason
        }
    }
}
