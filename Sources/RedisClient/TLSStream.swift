import CTLS
import EventLoop
import Glibc

// The only file that touches libssl. `RedisTLSContext` owns the SSL_CTX, `TLSSession` one SSL (and the two memory
// BIOs it owns); `TLSStream` runs a session over a `TCPConnection` on the loop, so no socket is handed to OpenSSL.

/// TLS client configuration for every Redis connection of the process, on any loop: built once, read-only after.
public final class RedisTLSContext: Sendable {
    /// SSL_CTX is safe to share between threads once configured (SSL_new only takes a reference).
    nonisolated(unsafe) fileprivate let context: OpaquePointer
    public let settings: RedisTLSSettings

    public init(_ settings: RedisTLSSettings) throws(RedisTLSError) {
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw RedisTLSError("cannot create a TLS context: \(OpenSSLError.take()?.text ?? "unknown error")")
        }
        do {
            try Self.configure(context, settings)
        } catch {
            SSL_CTX_free(context)
            throw error
        }
        self.context = context
        self.settings = settings
    }

    deinit { SSL_CTX_free(context) }

    private static func configure(_ context: OpaquePointer, _ settings: RedisTLSSettings) throws(RedisTLSError) {
        if settings.serverName?.isEmpty == true {
            // OpenSSL reads an empty expected name as "check no name at all".
            throw RedisTLSError("the TLS server name is empty: leave it unset to check the host connected to")
        }
        guard ctls_SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION) == 1 else {
            throw RedisTLSError("cannot require TLS 1.2: \(OpenSSLError.take()?.text ?? "unknown error")")
        }
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        ctls_SSL_CTX_disable_renegotiation(context)
        // Plaintext that OpenSSL could not take yet is retried from another buffer, in pieces.
        ctls_SSL_CTX_set_mode(context, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        // A passphrase-protected key fails to load instead of prompting on the terminal.
        SSL_CTX_set_default_passwd_cb(context) { _, _, _, _ in 0 }

        if let caFile = settings.caFile {
            try requireReadable(caFile, "CA file")
            guard SSL_CTX_load_verify_locations(context, caFile, nil) == 1 else {
                throw RedisTLSError("cannot load CA file \(caFile): \(OpenSSLError.take()?.text ?? "no certificate found")")
            }
        } else if SSL_CTX_set_default_verify_paths(context) != 1 {
            throw RedisTLSError("cannot load the system's CA certificates: \(OpenSSLError.take()?.text ?? "unknown error")")
        }

        switch (settings.certFile, settings.keyFile) {
        case (nil, nil):
            break
        case (let certFile?, nil):
            throw RedisTLSError("certificate file \(certFile) is set without a key file: a client certificate needs both")
        case (nil, let keyFile?):
            throw RedisTLSError("key file \(keyFile) is set without a certificate file: a client certificate needs both")
        case (let certFile?, let keyFile?):
            try requireReadable(certFile, "certificate file")
            try requireReadable(keyFile, "key file")
            guard SSL_CTX_use_certificate_chain_file(context, certFile) == 1 else {
                throw RedisTLSError("cannot load certificate file \(certFile): \(OpenSSLError.take()?.text ?? "unknown error")")
            }
            let mismatch = RedisTLSError("key file \(keyFile) does not match certificate file \(certFile)")
            guard SSL_CTX_use_PrivateKey_file(context, keyFile, SSL_FILETYPE_PEM) == 1 else {
                let error = OpenSSLError.take()
                if error?.reason == X509_R_KEY_VALUES_MISMATCH { throw mismatch }
                if isEncryptedKey(keyFile) {
                    throw RedisTLSError("cannot load key file \(keyFile): it is passphrase-protected, which is not supported")
                }
                throw RedisTLSError("cannot load key file \(keyFile): \(error?.text ?? "unknown error")")
            }
            // A key of another type than the certificate's is stored beside it, not refused: check the pair.
            guard SSL_CTX_check_private_key(context) == 1 else {
                OpenSSLError.clear()
                throw mismatch
            }
        }
    }

    /// A PEM key under a passphrase: "BEGIN ENCRYPTED PRIVATE KEY" (PKCS#8) or "Proc-Type: 4,ENCRYPTED" (legacy).
    private static func isEncryptedKey(_ path: String) -> Bool {
        guard let file = fopen(path, "r") else { return false }
        defer { fclose(file) }
        var head = [UInt8](repeating: 0, count: 4096)
        let count = fread(&head, 1, head.count, file)
        return String(decoding: head[..<count], as: UTF8.self).contains("ENCRYPTED")
    }

    /// OpenSSL names a missing or unreadable file only as a system error deep in its queue: say it plainly first.
    private static func requireReadable(_ path: String, _ what: String) throws(RedisTLSError) {
        let file = fopen(path, "r")
        // A directory opens; reading it fails (EISDIR).
        if let file, fgetc(file) != EOF || ferror(file) == 0 {
            fclose(file)
            return
        }
        let reason = String(cString: strerror(errno))
        if let file { fclose(file) }
        throw RedisTLSError("cannot read \(what) \(path): \(reason)")
    }
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

/// One TLS client connection held in memory: ciphertext goes in and comes out through two memory BIOs, plaintext
/// through SSL_read / SSL_write. Loop thread only.
private final class TLSSession {
    enum Outcome {
        /// Done; the byte count for a read or a write.
        case ok(Int)
        /// OpenSSL needs more ciphertext from the peer first.
        case wantsInput
        /// The peer's close_notify.
        case closedByPeer
        case failed(String)
    }

    private let ssl: OpaquePointer
    private let incoming: OpaquePointer
    private let outgoing: OpaquePointer
    /// Separate buffers: the delegate may write (draining ciphertext) while it reads the plaintext buffer.
    private let plaintext: UnsafeMutableRawBufferPointer
    private let ciphertext: UnsafeMutableRawBufferPointer

    /// `serverName`: a DNS name (sent as SNI, checked against the certificate) or an IP address (checked only).
    init(_ context: RedisTLSContext, serverName: String) throws(RedisTLSError) {
        guard let ssl = SSL_new(context.context) else {
            throw RedisTLSError("cannot create a TLS session: \(OpenSSLError.take()?.text ?? "unknown error")")
        }
        let incoming = BIO_new(BIO_s_mem()), outgoing = BIO_new(BIO_s_mem())
        guard let incoming, let outgoing else {
            BIO_free(incoming)
            BIO_free(outgoing)
            SSL_free(ssl)
            throw RedisTLSError("cannot create a TLS session: out of memory")
        }
        SSL_set_bio(ssl, incoming, outgoing)  // the session owns both BIOs from here
        do {
            try Self.expect(serverName, ssl)
        } catch {
            SSL_free(ssl)
            throw error
        }
        SSL_set_connect_state(ssl)
        (self.ssl, self.incoming, self.outgoing) = (ssl, incoming, outgoing)
        plaintext = .allocate(byteCount: 16 * 1024, alignment: 16)
        ciphertext = .allocate(byteCount: 16 * 1024 + 512, alignment: 16)
    }

    /// SNI and the name the certificate must carry.
    private static func expect(_ serverName: String, _ ssl: OpaquePointer) throws(RedisTLSError) {
        var address = in6_addr()
        if inet_pton(AF_INET, serverName, &address) == 1 || inet_pton(AF_INET6, serverName, &address) == 1 {
            // No SNI for an address (RFC 6066): the certificate must list it as an IP subjectAltName.
            guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName) == 1 else {
                OpenSSLError.clear()
                throw RedisTLSError("cannot check the server's certificate for IP address \(serverName)")
            }
            return
        }
        SSL_set_hostflags(ssl, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
        // An empty name would turn the name check off.
        guard !serverName.isEmpty, ctls_SSL_set_tlsext_host_name(ssl, serverName) == 1, SSL_set1_host(ssl, serverName) == 1 else {
            OpenSSLError.clear()
            throw RedisTLSError("invalid TLS server name \"\(serverName)\"")
        }
    }

    deinit {
        SSL_free(ssl)  // frees both BIOs
        plaintext.deallocate()
        ciphertext.deallocate()
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
    private func failure() -> String {
        let error = OpenSSLError.take()
        var text = error?.text ?? "unknown error"
        let verified = SSL_get_verify_result(ssl)
        if verified != X509_V_OK { text += " (\(String(cString: X509_verify_cert_error_string(verified))))" }
        switch error?.reason ?? 0 {
        case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED: text += " (the server requires a client certificate)"
        case SSL_R_WRONG_VERSION_NUMBER, SSL_R_PACKET_LENGTH_TOO_LONG: text += " (is that a TLS port?)"
        default: break
        }
        return text
    }
}

/// TLS over a `TCPConnection`: the socket's ciphertext goes through a `TLSSession`, the delegate hears plaintext.
/// Writes made before the handshake completes wait for it. Loop thread only; `close()` when done.
final class TLSStream: RedisStream, TCPConnectionDelegate {
    static let defaultHandshakeTimeoutMs = 10_000

    weak var delegate: (any TCPConnectionDelegate)?
    private let connection: TCPConnection
    private let session: TLSSession
    private let loop: EventLoop
    /// host:port, for messages.
    private let peer: String
    private var handshakeDone: ((Result<TLSStream, RedisClientError>) -> Void)?
    /// Holds the stream until the handshake ends (the socket's link to its delegate is weak).
    private weak var handshakeTimer: LoopTimer?
    private var established = false
    private var reading = false
    private var closed = false
    /// The TLS layer failed (a bad record, an alert): nothing more goes through.
    private var broken = false
    /// The socket's end of input, once seen: it ends reading after the plaintext before it has been delivered.
    private var socketEnd: LoopError??
    /// How reading ended (nil: not yet; .some(nil): cleanly), told to the delegate once it reads.
    private var end: LoopError??
    private var endReported = false
    /// Plaintext written before the handshake completed, or not yet taken by OpenSSL.
    private var unsent: [UInt8] = []

    var writeFailed: Bool { broken || connection.writeFailed }

    private init(connection: TCPConnection, session: TLSSession, loop: EventLoop, peer: String) {
        (self.connection, self.session, self.loop, self.peer) = (connection, session, loop, peer)
    }

    /// Starts the handshake on a connected socket and returns the stream at once (writes wait for the handshake).
    /// `done` is called once: the handshake completed and the server's certificate was verified for
    /// `context.settings.serverName ?? host`, or why not (the stream is then closed) — unless `close()` came first.
    @discardableResult
    static func start(over connection: TCPConnection, loop: EventLoop, context: RedisTLSContext, host: String, port: Int,
                      handshakeTimeoutMs: Int = defaultHandshakeTimeoutMs,
                      done: @escaping (Result<TLSStream, RedisClientError>) -> Void) -> TLSStream? {
        let peer = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let session: TLSSession
        do {
            session = try TLSSession(context, serverName: context.settings.serverName ?? host)
        } catch {
            connection.close()
            done(.failure(.unavailable("TLS with \(peer) failed: \(error.message)")))
            return nil
        }
        let stream = TLSStream(connection: connection, session: session, loop: loop, peer: peer)
        stream.handshakeDone = done
        let timer = LoopTimer(loop) { stream.handshakeTimedOut(after: handshakeTimeoutMs) }
        stream.handshakeTimer = timer
        timer.start(milliseconds: handshakeTimeoutMs)
        connection.delegate = stream
        connection.startReading()
        stream.advanceHandshake()
        return stream
    }

    // MARK: RedisStream

    func startReading() {
        guard !reading, !closed else { return }
        reading = true
        // What OpenSSL already holds is delivered from the loop, not within this call (as TCPConnection does).
        if established { loop.executeOnLoop { [weak self] in self?.pumpPlaintext() } }
    }

    func write(_ bytes: [UInt8]) {
        guard !closed, !writeFailed, !bytes.isEmpty else { return }
        guard established, unsent.isEmpty else {
            unsent += bytes
            return
        }
        bytes.withUnsafeBytes { encrypt($0) }
    }

    /// Sends our close_notify when the session is healthy, then closes the socket. Nothing reaches the delegate after.
    func close() {
        guard !closed else { return }
        closed = true
        delegate = nil
        handshakeDone = nil
        handshakeTimer?.close()
        if established, !broken {
            session.shutdown()
            sendCiphertext()
        }
        connection.close()
    }

    // MARK: TCPConnectionDelegate (the socket)

    func received(_ bytes: UnsafeRawBufferPointer) {
        guard !closed, !broken else { return }
        guard session.feed(bytes) else {
            return established ? breakSession("out of memory") : failHandshake(.unavailable("TLS handshake with \(peer) failed: out of memory"))
        }
        if !established {
            advanceHandshake()
            guard established, !closed else { return }
        }
        if !unsent.isEmpty { retryUnsent() }
        pumpPlaintext()
    }

    func readEnded(error: LoopError?) {
        guard !closed else { return }
        guard established else {
            return failHandshake(.unavailable("TLS handshake with \(peer) failed: "
                + (error.map { "\($0)" } ?? "the server closed the connection")))
        }
        // Even without a close_notify: RESP replies are self-delimiting, so a cut reply is seen above this layer.
        socketEnd = .some(error)
        pumpPlaintext()
    }

    func drained() {
        guard !closed else { return }
        guard established else {
            if connection.writeFailed { failHandshake(.unavailable("TLS handshake with \(peer) failed: the socket write failed")) }
            return
        }
        if unsent.isEmpty || writeFailed { delegate?.drained() }
    }

    // MARK: Handshake

    private func advanceHandshake() {
        let outcome = session.handshake()
        // Our next flight, or the alert that tells the server why we give up.
        sendCiphertext()
        switch outcome {
        case .ok:
            established = true
            retryUnsent()
            let done = handshakeDone
            handshakeDone = nil
            handshakeTimer?.close()
            done?(.success(self))
        case .wantsInput:
            break
        case .closedByPeer:
            failHandshake(.unavailable("TLS handshake with \(peer) failed: the server closed the TLS session"))
        case .failed(let reason):
            failHandshake(.unavailable("TLS handshake with \(peer) failed: \(reason)"))
        }
    }

    private func handshakeTimedOut(after milliseconds: Int) {
        guard !established, !closed else { return }
        // A plaintext Redis waits silently for the end of a command line that a ClientHello never sends.
        failHandshake(.timeout("TLS handshake with \(peer) did not complete within \(milliseconds) ms (is that a TLS port?)"))
    }

    private func failHandshake(_ error: RedisClientError) {
        let done = handshakeDone
        close()
        done?(.failure(error))
    }

    // MARK: Data

    /// Decrypts everything buffered for the delegate (TLS 1.3 session tickets are consumed here without output), then
    /// tells how reading ended, if it did. Nothing before the delegate reads: what arrives meanwhile waits in OpenSSL.
    private func pumpPlaintext() {
        reading: while established, reading, !closed, end == nil {
            switch session.read() {
            case .ok(let count):
                delegate?.received(session.plaintext(count))
            case .wantsInput:
                if let socketEnd { end = .some(socketEnd) }
                break reading
            case .closedByPeer:
                end = .some(nil)
            case .failed(let reason):
                breakSession(reason)
            }
        }
        sendCiphertext()
        reportEnd()
    }

    /// In slices, each sent before the next is encrypted: the outgoing BIO keeps its largest size, so it stays small.
    private func encrypt(_ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        writing: while offset < bytes.count {
            switch session.write(UnsafeRawBufferPointer(rebasing: bytes[offset..<min(bytes.count, offset + 64 * 1024)])) {
            case .ok(let count):
                offset += count
                sendCiphertext()
            case .wantsInput:
                unsent.append(contentsOf: bytes[offset...])
                break writing
            case .closedByPeer:
                breakSession("the server closed the TLS session")
                break writing
            case .failed(let reason):
                breakSession(reason)
                break writing
            }
        }
        sendCiphertext()
    }

    private func retryUnsent() {
        guard !unsent.isEmpty else { return }
        let pending = unsent
        unsent = []
        pending.withUnsafeBytes { encrypt($0) }
    }

    private func sendCiphertext() {
        session.drainCiphertext { connection.write($0) }
    }

    /// A fatal TLS error after the handshake: reading ends with it and writes fail. Reported from the loop, as the
    /// socket's own failures are, never from inside the caller's call.
    private func breakSession(_ reason: String) {
        guard !broken else { return }
        broken = true
        if end == nil { end = .some(LoopError(operation: "TLS with \(peer) failed: \(reason)", code: -EPROTO)) }
        sendCiphertext()
        unsent = []
        loop.executeOnLoop { [weak self] in
            guard let self, !closed else { return }
            reportEnd()
            delegate?.drained()
        }
    }

    private func reportEnd() {
        guard reading, !closed, !endReported, let end else { return }
        endReported = true
        delegate?.readEnded(error: end)
    }
}
