/// A connected byte stream on one loop: a TCP connection, or TLS over one (the TLS target's `TLSStream`). What a
/// protocol layer (HTTP, RESP) reads from and writes to, whatever carries it. Loop thread only.
public protocol ByteStream: AnyObject {
    /// Hears the stream's bytes (plaintext for TLS), its end and its drains.
    var delegate: (any TCPConnectionDelegate)? { get set }
    var peerAddress: String { get }
    /// Bytes written and not yet taken by the kernel: the back-pressure signal.
    var queuedBytes: Int { get }
    var isClosed: Bool { get }
    var writeFailed: Bool { get }
    func startReading()
    func stopReading()
    func write(_ bytes: [UInt8])
    func write(_ bytes: UnsafeRawBufferPointer)
    func close()
}

extension TCPConnection: ByteStream {}
