import EventLoop

/// A connected byte stream to one Redis node: plain TCP, or TLS over it (`TLSStream`). Loop thread only;
/// the delegate hears plaintext.
protocol RedisStream: AnyObject {
    var delegate: (any TCPConnectionDelegate)? { get set }
    var writeFailed: Bool { get }
    func startReading()
    func write(_ bytes: [UInt8])
    func close()
}

extension TCPConnection: RedisStream {}
