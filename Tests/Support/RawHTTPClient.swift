import Glibc

/// A blocking loopback HTTP/1.1 client speaking raw bytes, so tests control framing exactly and can see
/// chunk boundaries. Every read is bounded by a receive timeout.
public final class RawHTTPClient {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public struct Response {
        public let status: Int
        public let headers: [(name: String, value: String)]
        public let body: [UInt8]

        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    private let socket: Int32
    private var buffer: [UInt8] = []
    private var isOpen = true

    /// `receiveBufferBytes` fixes the socket's receive buffer (no autotuning): a client that does not read
    /// then holds only that much.
    public init(port: Int, timeoutSeconds: Int = 5, receiveBufferBytes: Int32? = nil) throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw Failure(description: "socket() failed") }
        if var size = receiveBufferBytes {
            setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(socket)
            throw Failure(description: "connect failed: errno \(errno)")
        }
    }

    deinit { disconnect() }

    /// Closes the connection from the client side.
    public func disconnect() {
        guard isOpen else { return }
        isOpen = false
        close(socket)
    }

    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    public func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { throw Failure(description: "send failed: errno \(errno)") }
            sent += count
        }
    }

    /// Status line and headers.
    public func readHead() throws -> (status: Int, headers: [(name: String, value: String)]) {
        let statusLine = try readLine()
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else {
            throw Failure(description: "bad status line \(statusLine)")
        }
        var headers: [(name: String, value: String)] = []
        while true {
            let line = try readLine()
            if line.isEmpty { return (status, headers) }
            guard let colon = line.firstIndex(of: ":") else { throw Failure(description: "bad header \(line)") }
            headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: " ")))
        }
    }

    /// One chunk of a chunked body; nil for the last (empty) chunk, after which the trailer is consumed.
    public func readChunk() throws -> [UInt8]? {
        let sizeLine = try readLine()
        guard let size = Int(sizeLine.split(separator: ";")[0], radix: 16) else {
            throw Failure(description: "bad chunk size \(sizeLine)")
        }
        if size == 0 {
            while try !readLine().isEmpty {}
            return nil
        }
        let chunk = try readExact(size)
        guard try readLine().isEmpty else { throw Failure(description: "chunk not followed by CRLF") }
        return chunk
    }

    /// A whole response, body framed by Content-Length, chunked coding, or the connection's end.
    public func readResponse(method: String = "GET") throws -> Response {
        let head = try readHead()
        let headers = head.headers
        let find = { (name: String) in headers.first { $0.name.lowercased() == name }?.value }
        var body: [UInt8] = []
        if method == "HEAD" || head.status == 204 || head.status == 304 {
        } else if find("transfer-encoding")?.lowercased() == "chunked" {
            while let chunk = try readChunk() { body += chunk }
        } else if let length = find("content-length").flatMap({ Int($0) }) {
            body = try readExact(length)
        } else {
            body = try readToEnd()
        }
        return Response(status: head.status, headers: headers, body: body)
    }

    /// Everything until the peer closes.
    public func readToEnd() throws -> [UInt8] {
        while try fill() {}
        defer { buffer = [] }
        return buffer
    }

    /// True when the peer closes (or resets) the connection before sending anything more.
    public func peerClosed() -> Bool {
        guard buffer.isEmpty else { return false }
        var byte: UInt8 = 0
        let count = recv(socket, &byte, 1, 0)
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    private func readLine() throws -> String {
        while true {
            if let end = buffer.indices.dropLast().first(where: { buffer[$0] == 13 && buffer[$0 + 1] == 10 }) {
                let line = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeFirst(end + 2)
                return line
            }
            guard try fill() else { throw Failure(description: "connection closed mid-line") }
        }
    }

    private func readExact(_ count: Int) throws -> [UInt8] {
        while buffer.count < count {
            guard try fill() else { throw Failure(description: "connection closed mid-body") }
        }
        defer { buffer.removeFirst(count) }
        return Array(buffer[..<count])
    }

    /// Reads what is available; false at the peer's end of stream.
    private func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
        if count < 0 { throw Failure(description: "recv failed: errno \(errno)") }
        buffer += chunk[..<count]
        return count > 0
    }
}

private extension Substring {
    func trimmingCharacters(in set: Character) -> String {
        String(drop { $0 == set }.reversed().drop { $0 == set }.reversed())
    }
}
