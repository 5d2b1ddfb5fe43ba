import Foundation
import Glibc
import Synchronization

/// A real loopback TCP server whose answers are scripted bytes: each accepted connection is handed to
/// `serve` on a thread of its own, so a test can send malformed, truncated, interim or slow responses that
/// a well-behaved HTTP server never would. Every read and write is bounded by a timeout.
final class ScriptedUpstream: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let serve: @Sendable (ScriptedConnection) -> Void
    private let state = Mutex<(connections: Int, requests: [String], stopped: Bool)>((0, [], false))

    /// `ipv6`: listens on [::1] instead of 127.0.0.1.
    init(ipv6: Bool = false, serve: @escaping @Sendable (ScriptedConnection) -> Void) throws {
        self.serve = serve
        self.ipv6 = ipv6
        let listener = socket(ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_storage()
        let length = socklen_t(ipv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        withUnsafeMutableBytes(of: &address) { raw in
            if ipv6 {
                var v6 = sockaddr_in6()
                v6.sin6_family = sa_family_t(AF_INET6)
                inet_pton(AF_INET6, "::1", &v6.sin6_addr)
                withUnsafeBytes(of: v6) { raw.copyMemory(from: $0) }
            } else {
                var v4 = sockaddr_in()
                v4.sin_family = sa_family_t(AF_INET)
                v4.sin_addr.s_addr = inet_addr("127.0.0.1")
                withUnsafeBytes(of: v4) { raw.copyMemory(from: $0) }
            }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) }
        }
        guard bound == 0, listen(listener, 64) == 0 else { throw ScriptError("bind/listen failed: errno \(errno)") }
        var boundLength = length
        withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(listener, $0, &boundLength) }
        }
        // sin_port and sin6_port sit at the same offset.
        port = Int(UInt16(bigEndian: withUnsafeBytes(of: &address) { $0.load(fromByteOffset: 2, as: UInt16.self) }))
        self.listener = listener
        Thread { [self] in acceptLoop() }.start()
    }

    deinit { stop() }

    private let ipv6: Bool
    var baseURL: String { ipv6 ? "http://[::1]:\(port)" : "http://127.0.0.1:\(port)" }
    /// Connections accepted so far.
    var connections: Int { state.withLock { $0.connections } }
    /// Every request head read so far, in order (request line and fields).
    var requests: [String] { state.withLock { $0.requests } }

    func stop() {
        let wasStopped = state.withLock { state in
            defer { state.stopped = true }
            return state.stopped
        }
        guard !wasStopped else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let socket = accept(listener, nil, nil)
            guard socket >= 0 else { return }
            let number = state.withLock { state in
                state.connections += 1
                return state.connections
            }
            let connection = ScriptedConnection(socket: socket, number: number) { [weak self] head in
                self?.state.withLock { $0.requests.append(head) }
            }
            Thread { [serve] in
                serve(connection)
                connection.close()
            }.start()
        }
    }
}

struct ScriptError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One accepted connection of a `ScriptedUpstream`, used from its thread.
final class ScriptedConnection: @unchecked Sendable {
    /// 1 for the first connection the server accepted.
    let number: Int
    private let socket: Int32
    private var buffer: [UInt8] = []
    private var closed = false
    private let recorded: (String) -> Void

    fileprivate init(socket: Int32, number: Int, recorded: @escaping (String) -> Void) {
        self.socket = socket
        self.number = number
        self.recorded = recorded
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// The next request head (up to the blank line), or nil when the client closed or nothing came in time.
    @discardableResult
    func readHead() -> String? {
        while true {
            if let end = buffer.indices.dropLast(3).first(where: { buffer[$0..<($0 + 4)].elementsEqual("\r\n\r\n".utf8) }) {
                let head = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeFirst(end + 4)
                recorded(head)
                return head
            }
            guard fill() else { return nil }
        }
    }

    /// Exactly `count` body bytes (or fewer when the client stopped sending).
    func read(_ count: Int) -> [UInt8] {
        while buffer.count < count, fill() {}
        let taken = Array(buffer.prefix(count))
        buffer.removeFirst(taken.count)
        return taken
    }

    /// Bytes up to and including `marker` (a chunked body's "0\r\n\r\n"), or what came before the client stopped.
    func read(through marker: String) -> [UInt8] {
        let pattern = Array(marker.utf8)
        while true {
            if buffer.count >= pattern.count,
               let start = buffer.indices.dropLast(pattern.count - 1).first(where: { buffer[$0..<($0 + pattern.count)].elementsEqual(pattern) }) {
                let taken = Array(buffer[..<(start + pattern.count)])
                buffer.removeFirst(taken.count)
                return taken
            }
            guard fill() else { return buffer }
        }
    }

    private func fill() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = recv(socket, &chunk, chunk.count, 0)
        guard count > 0 else { return false }
        buffer += chunk[..<count]
        return true
    }

    /// False once the peer is gone or the write timed out (the client is not reading).
    @discardableResult
    func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// How long sends may block before `send` answers false.
    func setSendTimeout(milliseconds: Int) {
        var timeout = timeval(tv_sec: milliseconds / 1000, tv_usec: Int((milliseconds % 1000) * 1000))
        setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var size: Int32 = 64 * 1024
        setsockopt(socket, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Waits until the client closes its side (or the read timeout).
    func waitForClose() { while fill() {} }

    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(socket)
    }
}
