import EventLoop
import Glibc

/// TLS over a `TCPConnection`, either side: the socket's ciphertext goes through a `TLSSession`, the delegate hears
/// plaintext. Writes made before the handshake completes wait for it; reading can be paused (`stopReading`) as on
/// the socket itself, and `queuedBytes` counts what waits in either layer. Loop thread only; `close()` when done.
public final class TLSStream: ByteStream, TCPConnectionDelegate {
    public weak var delegate: (any TCPConnectionDelegate)?
    private let connection: TCPConnection
    public let session: TLSSession
    private let loop: EventLoop
    /// Who the peer is, for messages ("localhost:6380", a client's address).
    private let peer: String
    private var handshakeDone: ((TLSFailure?) -> Void)?
    /// Holds the stream until the handshake ends (the socket's link to its delegate is weak).
    private weak var handshakeTimer: LoopTimer?
    public var isEstablished: Bool { established }
    /// Private stored state the compiler can check statically (a public stored property is checked at run time).
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
    /// Plaintext written before the handshake completed, or not yet taken by OpenSSL. Grown through a local
    /// (`hold`): an access that spans the array's own calls made every access to it checked at run time.
    private var unsent: [UInt8] = []

    public init(over connection: TCPConnection, session: TLSSession, loop: EventLoop, peer: String) {
        (self.connection, self.session, self.loop, self.peer) = (connection, session, loop, peer)
    }

    /// Starts the handshake; `done` is called once, with nil when it completed (for a client: the server's certificate
    /// verified) or why not — the stream is closed right after — unless `close()` came first. A handshake still
    /// going after `timeoutMs` fails with the reason code "timeout".
    public func handshake(timeoutMs: Int, done: @escaping (TLSFailure?) -> Void) {
        handshakeDone = done
        let timer = LoopTimer(loop) { self.handshakeTimedOut(after: timeoutMs) }
        handshakeTimer = timer
        timer.start(milliseconds: timeoutMs)
        connection.delegate = self
        connection.startReading()
        advanceHandshake()
    }

    // MARK: ByteStream

    public var peerAddress: String { connection.peerAddress }
    public var queuedBytes: Int { connection.queuedBytes + unsent.count }
    public var isClosed: Bool { closed || connection.isClosed }
    public var writeFailed: Bool { broken || connection.writeFailed }

    public func startReading() {
        guard !reading, !closed else { return }
        reading = true
        guard established else { return }  // the handshake reads the socket meanwhile
        connection.startReading()
        // What OpenSSL already holds is delivered from the loop, not within this call (as TCPConnection does).
        loop.executeOnLoop { [weak self] in self?.pumpPlaintext() }
    }

    /// Records already received stay in OpenSSL until reading starts again.
    public func stopReading() {
        guard reading, !closed else { return }
        reading = false
        if established { connection.stopReading() }
    }

    public func write(_ bytes: [UInt8]) { bytes.withUnsafeBytes { write($0) } }

    public func write(_ bytes: UnsafeRawBufferPointer) {
        guard !closed, !writeFailed, !bytes.isEmpty else { return }
        guard established, unsent.isEmpty else { return hold(bytes) }
        encrypt(bytes)
    }

    /// Sends our close_notify when the session is healthy, then closes the socket. Nothing reaches the delegate after.
    public func close() {
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

    public func received(_ bytes: UnsafeRawBufferPointer) {
        guard !closed, !broken else { return }
        guard session.feed(bytes) else {
            let failure = TLSFailure("out of memory", reasonCode: TLSFailure.otherReason)
            return established ? breakSession(failure.message) : failHandshake(failure)
        }
        if !established {
            advanceHandshake()
            guard established, !closed else { return }
        }
        if !unsent.isEmpty { retryUnsent() }
        pumpPlaintext()
    }

    public func readEnded(error: LoopError?) {
        guard !closed else { return }
        guard established else {
            return failHandshake(TLSFailure(error.map { "\($0)" } ?? "the peer closed the connection", reasonCode: "closed"))
        }
        // Even without a close_notify: the protocols above (RESP, HTTP framing) see a cut message themselves.
        socketEnd = .some(error)
        pumpPlaintext()
    }

    public func drained() {
        guard !closed else { return }
        guard established else {
            if connection.writeFailed { failHandshake(TLSFailure("the socket write failed", reasonCode: "closed")) }
            return
        }
        if unsent.isEmpty || writeFailed { delegate?.drained() }
    }

    // MARK: Handshake

    private func advanceHandshake() {
        let outcome = session.handshake()
        // Our next flight, or the alert that tells the peer why we give up.
        sendCiphertext()
        switch outcome {
        case .ok:
            established = true
            let done = handshakeDone
            handshakeDone = nil
            handshakeTimer?.close()
            if !reading { connection.stopReading() }
            retryUnsent()
            done?(nil)
        case .wantsInput:
            break
        case .closedByPeer:
            failHandshake(TLSFailure("the peer closed the TLS session", reasonCode: "closed"))
        case .failed(let failure):
            failHandshake(failure)
        }
    }

    private func handshakeTimedOut(after milliseconds: Int) {
        guard !established, !closed else { return }
        failHandshake(TLSFailure("did not complete within \(milliseconds) ms", reasonCode: "timeout"))
    }

    /// The owner hears why first (it may close through its own path), then the stream is closed.
    private func failHandshake(_ failure: TLSFailure) {
        let done = handshakeDone
        handshakeDone = nil
        handshakeTimer?.close()
        done?(failure)
        close()
    }

    // MARK: Data

    /// Decrypts everything buffered for the delegate (TLS 1.3 session tickets are consumed here without output), then
    /// tells how reading ended, if it did. Nothing while reading is paused: what arrives meanwhile waits in OpenSSL.
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
            case .failed(let failure):
                breakSession(failure.message)
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
                hold(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
                break writing
            case .closedByPeer:
                breakSession("the peer closed the TLS session")
                break writing
            case .failed(let failure):
                breakSession(failure.message)
                break writing
            }
        }
        sendCiphertext()
    }

    private func hold(_ bytes: UnsafeRawBufferPointer) {
        var pending = unsent
        unsent = []
        pending.append(contentsOf: bytes)
        unsent = pending
    }

    private func retryUnsent() {
        guard !unsent.isEmpty else { return }
        let pending = unsent
        unsent = []
        pending.withUnsafeBytes { encrypt($0) }
    }

    /// All the records waiting go out in one write (a 64 KiB slice is four of them).
    private func sendCiphertext() {
        session.drainCiphertext { ciphertext.append(contentsOf: $0) }
        guard !ciphertext.isEmpty else { return }
        connection.write(ciphertext)
        ciphertext.removeAll(keepingCapacity: ciphertext.capacity <= 128 * 1024)
    }

    /// Records gathered by `sendCiphertext` (empty between calls).
    private var ciphertext: [UInt8] = []

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
