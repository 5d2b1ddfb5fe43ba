import Foundation
import Glibc
import Synchronization

/// The HTTP/1.1 plumbing of the fake remote services (Apple, Google): real sockets on 127.0.0.1 (a free port), a
/// thread per keep-alive connection, requests framed by Content-Length, every answer given by `handler`.
public final class LoopbackHTTPServer: @unchecked Sendable {
    public struct Request: Sendable {
        public let method: String
        public let path: String
        public let headers: [(name: String, value: String)]
        public let body: [UInt8]

        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }

    public struct Response: Sendable {
        public let status: Int
        public let contentType: String
        public let body: [UInt8]

        public init(_ status: Int, _ text: String, contentType: String = "text/plain") {
            self.status = status
            self.contentType = contentType
            body = Array(text.utf8)
        }
    }

    public let port: Int
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    private let listener: Int32
    private let state = Mutex((connections: Set<Int32>(), stopped: false))

    public init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw FakeServerError("socket() failed: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(listener, pointer, length) == 0 && listen(listener, 16) == 0 && getsockname(listener, pointer, &length) == 0
            }
        }
        guard bound else {
            close(listener)
            throw FakeServerError("cannot listen on 127.0.0.1: errno \(errno)")
        }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { stop() }

    /// Starts accepting; `handler` answers every request, on the connection's thread (nil: close the connection
    /// without an answer, like a server that fails mid-request).
    public func start(_ handler: @escaping @Sendable (Request) -> Response?) {
        Thread { [self] in acceptLoop(handler) }.start()
    }

    /// Stops accepting and closes every open connection, which ends their threads.
    public func stop() {
        let open: Set<Int32>? = state.withLock { state in
            guard !state.stopped else { return nil }
            state.stopped = true
            return state.connections
        }
        guard let open else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for connection in open { shutdown(connection, Int32(SHUT_RDWR)) }
    }

    private func acceptLoop(_ handler: @escaping @Sendable (Request) -> Response?) {
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }  // the listener was shut down
            let admitted = state.withLock { state in
                if !state.stopped { state.connections.insert(connection) }
                return !state.stopped
            }
            guard admitted else {
                close(connection)
                return
            }
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            Thread { [self] in serve(connection, handler) }.start()
        }
    }

    /// Keep-alive: answers requests on the connection until the client closes it or the server stops.
    private func serve(_ connection: Int32, _ handler: (Request) -> Response?) {
        var buffer: [UInt8] = []
        while let request = readRequest(connection, &buffer), let response = handler(request) {
            let reason = response.status == 200 ? "OK" : "Status"
            let head = "HTTP/1.1 \(response.status) \(reason)\r\nContent-Length: \(response.body.count)\r\nContent-Type: \(response.contentType)\r\n\r\n"
            guard write(connection, Array(head.utf8) + response.body) else { break }
        }
        state.withLock { _ = $0.connections.remove(connection) }
        close(connection)
    }

    private func readRequest(_ connection: Int32, _ buffer: inout [UInt8]) -> Request? {
        let separator: [UInt8] = [13, 10, 13, 10]
        var headEnd: Int?
        while headEnd == nil {
            headEnd = buffer.firstRange(of: separator)?.lowerBound
            if headEnd == nil, !receive(connection, &buffer) { return nil }
        }
        let lines = String(decoding: buffer[..<headEnd!], as: UTF8.self).components(separatedBy: "\r\n")
        let requestLine = lines[0].split(separator: " ")
        guard requestLine.count == 3 else { return nil }
        let headers = lines.dropFirst().compactMap { line -> (name: String, value: String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        let length = headers.first { $0.name.lowercased() == "content-length" }.flatMap { Int($0.value) } ?? 0
        let bodyStart = headEnd! + separator.count
        while buffer.count < bodyStart + length {
            if !receive(connection, &buffer) { return nil }
        }
        let body = Array(buffer[bodyStart..<(bodyStart + length)])
        buffer.removeFirst(bodyStart + length)
        return Request(method: String(requestLine[0]), path: String(requestLine[1]), headers: headers, body: body)
    }

    private func receive(_ connection: Int32, _ buffer: inout [UInt8]) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        let count = recv(connection, &chunk, chunk.count, 0)
        guard count > 0 else { return false }
        buffer += chunk[..<count]
        return true
    }

    private func write(_ connection: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { return false }
            sent += count
        }
        return true
    }
}

public struct FakeServerError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
