import Upstream
import CMicroHTTPD
import Glibc
import Synchronization

/// The inbound HTTP/1.1 server: libmicrohttpd with one thread per connection, so a handler may block on
/// Redis and the upstream. This file is the only user of CMicroHTTPD.
public final class MHDServer: Sendable {
    private struct State {
        var daemon: OpaquePointer?
        /// The listen socket after `quiesce()`: MHD hands it to us and it must outlive the daemon's threads.
        var quiescedSocket: Int32?
    }

    private let state: Mutex<State>
    private let context: ServerContext
    /// The bound port (the one the system chose when the address asked for port 0).
    public let port: Int

    public init(address: String, limits: ServerLimits, handler: any HTTPHandler) throws(HTTPServerError) {
        let listen = try ListenAddress(address)
        let context = ServerContext(handler: handler, limits: limits)
        let cls = Unmanaged.passUnretained(context).toOpaque()
        let daemon = withSocketAddress(of: listen) { sockaddr in
            cmhd_start_daemon(cmhd_flags(listen.family == .ipv6 ? 1 : 0), sockaddr,
                              accessHandler, requestStarted, requestCompleted, cls,
                              UInt32(clamping: limits.connectionLimit), UInt32(clamping: limits.perIPConnectionLimit),
                              UInt32(clamping: limits.connectionTimeoutSeconds), limits.connectionMemoryLimitBytes,
                              limits.threadStackSizeBytes)
        }
        guard let daemon else { throw .startFailed(listen.description, String(cString: strerror(errno))) }
        self.context = context
        self.port = Int(cmhd_bind_port(daemon))
        self.state = Mutex(State(daemon: daemon))
    }

    deinit { stop() }

    /// Stops accepting connections while requests already accepted run to completion (graceful drain).
    /// Connection attempts from now on are refused rather than left waiting in the backlog.
    public func quiesce() {
        state.withLock { state in
            guard let daemon = state.daemon, state.quiescedSocket == nil else { return }
            let socket = MHD_quiesce_daemon(daemon)
            guard socket >= 0 else { return }
            // shutdown, not close: the descriptor stays ours until MHD's threads are gone, yet the kernel
            // stops completing handshakes on it.
            shutdown(socket, Int32(SHUT_RDWR))
            state.quiescedSocket = socket
        }
    }

    /// Closes every connection and waits for handler threads to return. Idempotent. Never call it from a
    /// handler: it would wait for its own thread.
    public func stop() {
        let (daemon, socket) = state.withLock { state in
            defer { state = State() }
            return (state.daemon, state.quiescedSocket)
        }
        if let daemon { MHD_stop_daemon(daemon) }
        if let socket { close(socket) }
    }

    /// Open client connections, idle keep-alive ones included.
    public var activeConnections: Int {
        state.withLock { state in state.daemon.map { Int(cmhd_current_connections($0)) } ?? 0 }
    }

    /// Requests received (request line seen) and not yet fully answered.
    public var inFlightRequests: Int { context.inFlight.load(ordering: .relaxed) }
}

/// What the C callbacks share, passed to them unretained as `cls`; the server outlives its daemon.
private final class ServerContext: Sendable {
    let handler: any HTTPHandler
    let limits: ServerLimits
    let inFlight = Atomic<Int>(0)

    init(handler: any HTTPHandler, limits: ServerLimits) {
        self.handler = handler
        self.limits = limits
    }
}

/// One request's progress, owned by MHD's `*con_cls` from `requestStarted` to `requestCompleted`.
/// Only the connection's own thread touches it.
private final class RequestState {
    let rawTarget: String
    var head: RequestHead?
    var bodyLimit = 0
    var body: [UInt8] = []
    /// Bytes thrown away after the body passed its limit (chunked uploads only: a Content-Length over the
    /// limit is refused before reading).
    var discarded = 0

    init(rawTarget: String) { self.rawTarget = rawTarget }
}

private struct RequestHead {
    let path: String
    let query: String?
    let headers: [HTTPField]
    let clientAddress: String
}

/// How much of an oversized chunked upload is read and dropped so the client can still get its 413;
/// past this the connection is simply closed (MHD cannot answer before the upload is consumed).
private let overflowDrainBytes = 256 * 1024

// MARK: - C callbacks (global functions: C calls them on MHD's threads)

private func requestStarted(cls: UnsafeMutableRawPointer?, uri: UnsafePointer<CChar>?,
                            connection: OpaquePointer?) -> UnsafeMutableRawPointer? {
    guard let cls else { return nil }
    Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue().inFlight.add(1, ordering: .relaxed)
    let state = RequestState(rawTarget: uri.map { String(cString: $0) } ?? "")
    return Unmanaged.passRetained(state).toOpaque()
}

private func requestCompleted(cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
                              conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                              toe: MHD_RequestTerminationCode) {
    guard let cls, let conCls, let raw = conCls.pointee else { return }
    conCls.pointee = nil
    Unmanaged<RequestState>.fromOpaque(raw).release()
    Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue().inFlight.subtract(1, ordering: .relaxed)
}

private func accessHandler(cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, url: UnsafePointer<CChar>?,
                           method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?,
                           uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>?,
                           conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> MHD_Result {
    guard let cls, let connection, let method, let version, let uploadDataSize, let raw = conCls?.pointee else {
        return .NO
    }
    let server = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()
    let request = Unmanaged<RequestState>.fromOpaque(raw).takeUnretainedValue()
    let exchange = Exchange(server: server, connection: connection, request: request,
                            method: String(cString: method), version: String(cString: version))
    guard let head = request.head else { return exchange.begin() }
    if uploadDataSize.pointee > 0 {
        let accepted = exchange.receive(UnsafeRawBufferPointer(start: uploadData, count: uploadDataSize.pointee))
        uploadDataSize.pointee = 0
        return accepted ? .YES : .NO
    }
    return exchange.finish(head)
}

private func collectHeader(cls: UnsafeMutableRawPointer?, kind: MHD_ValueKind, key: UnsafePointer<CChar>?,
                           value: UnsafePointer<CChar>?) -> MHD_Result {
    guard let cls, let key else { return .YES }
    let collector = Unmanaged<HeaderCollector>.fromOpaque(cls).takeUnretainedValue()
    collector.headers.append(HTTPField(String(cString: key), value.map { String(cString: $0) } ?? ""))
    return .YES
}

private final class HeaderCollector {
    var headers: [HTTPField] = []
}

private func readStream(cls: UnsafeMutableRawPointer?, position: UInt64, buffer: UnsafeMutablePointer<CChar>?,
                        max: Int) -> Int {
    guard let cls, let buffer else { return cmhd_content_reader_end_with_error() }
    let source = Unmanaged<StreamSource>.fromOpaque(cls).takeUnretainedValue()
    return source.fill(UnsafeMutableRawBufferPointer(start: buffer, count: max))
}

private func freeStream(cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    let source = Unmanaged<StreamSource>.fromOpaque(cls).takeRetainedValue()
    source.stream.close()
}

/// Feeds MHD's content reader from an `HTTPBodyStream`, keeping what did not fit MHD's buffer.
private final class StreamSource {
    let stream: any HTTPBodyStream
    private var pending: [UInt8] = []
    private var offset = 0

    init(_ stream: any HTTPBodyStream) { self.stream = stream }

    func fill(_ buffer: UnsafeMutableRawBufferPointer) -> Int {
        while offset == pending.count {
            do {
                guard let next = try stream.nextChunk() else { return cmhd_content_reader_end_of_stream() }
                (pending, offset) = (next, 0)
            } catch {
                return cmhd_content_reader_end_with_error()
            }
        }
        let count = min(buffer.count, pending.count - offset)
        pending.withUnsafeBytes { bytes in
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count]))
        }
        offset += count
        return count
    }
}

// MARK: - One access-handler call

/// The steps of one request as MHD drives them: `begin` once headers are in, `receive` per body piece,
/// `finish` when the body is complete.
private struct Exchange {
    let server: ServerContext
    let connection: OpaquePointer
    let request: RequestState
    let method: String
    let version: String

    func begin() -> MHD_Result {
        let (path, query) = splitTarget(request.rawTarget)
        // Visible ASCII only (RFC 9112); no "#": an upstream cutting the target at a fragment would see
        // another path than the one routed here.
        guard path.hasPrefix("/"), request.rawTarget.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != 0x23 }) else {
            return reject(status: 400, reason: "bad_request_target",
                          message: "the request target must be an absolute path of visible ASCII without a fragment")
        }
        let headers = connectionHeaders()
        let framing: RequestFraming
        switch RequestFraming.judge(headers, httpVersion: version) {
        case .success(let judged): framing = judged
        case .failure(let violation):
            return reject(status: violation.status, reason: violation.reason, message: violation.message)
        }
        let limit = min(server.limits.maxBodyBytes,
                        server.handler.maxBodyBytes(method: method, path: path) ?? server.limits.maxBodyBytes)
        if case .contentLength(let length) = framing, length > limit { return tooLarge(limit) }
        request.bodyLimit = limit
        request.head = RequestHead(path: path, query: query, headers: headers, clientAddress: clientAddress())
        return .YES
    }

    /// False once an oversized upload has been drained as far as it will be: the connection is then closed.
    func receive(_ piece: UnsafeRawBufferPointer) -> Bool {
        if request.discarded == 0 && request.body.count + piece.count <= request.bodyLimit {
            request.body.append(contentsOf: piece)
            return true
        }
        request.discarded += request.body.count + piece.count
        request.body = []
        return request.discarded <= overflowDrainBytes
    }

    func finish(_ head: RequestHead) -> MHD_Result {
        if request.discarded > 0 { return tooLarge(request.bodyLimit) }
        let inbound = HTTPRequest(method: method, path: head.path, query: head.query, headers: head.headers,
                                  body: request.body, clientAddress: head.clientAddress, httpVersion: version)
        request.body = []
        return queue(server.handler.handle(inbound))
    }

    private func tooLarge(_ limit: Int) -> MHD_Result {
        reject(status: 413, reason: "body_too_large", message: "request body exceeds \(limit) bytes")
    }

    /// An answer the server gives on its own, before the handler saw the request: reported to the handler
    /// so it is logged and counted like every other request.
    private func reject(status: Int, reason: String, message: String) -> MHD_Result {
        server.handler.rejected(method: method, target: request.rawTarget, clientAddress: clientAddress(), status: status, reason: reason)
        return queue(.error(status: status, reason: reason, message: message))
    }

    private func splitTarget(_ target: String) -> (path: String, query: String?) {
        guard let mark = target.firstIndex(of: "?") else { return (target, nil) }
        return (String(target[..<mark]), String(target[target.index(after: mark)...]))
    }

    private func connectionHeaders() -> [HTTPField] {
        let collector = HeaderCollector()
        withExtendedLifetime(collector) {
            _ = MHD_get_connection_values(connection, .HEADER_KIND, collectHeader,
                                          Unmanaged.passUnretained(collector).toOpaque())
        }
        return collector.headers
    }

    private func clientAddress() -> String {
        guard let address = cmhd_client_addr(connection) else { return "" }
        let length = address.pointee.sa_family == sa_family_t(AF_INET6)
            ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        guard getnameinfo(address, socklen_t(length), &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else {
            return ""
        }
        return String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private func queue(_ response: HTTPResponse) -> MHD_Result {
        guard (200...599).contains(response.status) else {
            if case .stream(let stream) = response.body { stream.close() }
            return queue(.error(status: 500, reason: "invalid_response_status",
                                message: "the gateway produced status \(response.status)"))
        }
        guard let mhdResponse = makeResponse(response.body) else { return .NO }
        defer { MHD_destroy_response(mhdResponse) }
        for header in response.headers where !Self.framingHeaders.contains(header.name.lowercased()) {
            guard header.isSafeToSend, MHD_add_response_header(mhdResponse, header.name, header.value) == .YES else {
                return queue(.error(status: 500, reason: "invalid_response_header",
                                    message: "the gateway produced an invalid header \(header.name)"))
            }
        }
        return MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    }

    /// Set by MHD from the body it sends; a second copy from the handler would contradict it.
    private static let framingHeaders: Set<String> = ["content-length", "transfer-encoding", "connection"]

    private func makeResponse(_ body: HTTPResponseBody) -> OpaquePointer? {
        switch body {
        case .bytes(let bytes):
            return bytes.withUnsafeBytes { raw in
                MHD_create_response_from_buffer(raw.count, UnsafeMutableRawPointer(mutating: raw.baseAddress),
                                                .RESPMEM_MUST_COPY)
            }
        case .stream(let stream):
            let source = Unmanaged.passRetained(StreamSource(stream)).toOpaque()
            guard let response = MHD_create_response_from_callback(cmhd_size_unknown(), 16 * 1024, readStream,
                                                                   source, freeStream) else {
                freeStream(cls: source)
                return nil
            }
            return response
        }
    }
}

// MARK: - Socket addresses

private func withSocketAddress<T>(of listen: ListenAddress, _ body: (UnsafePointer<sockaddr>) -> T) -> T {
    switch listen.family {
    case .ipv4:
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(listen.port).bigEndian)
        inet_pton(AF_INET, listen.host, &address.sin_addr)
        return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
    case .ipv6:
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_port = in_port_t(UInt16(listen.port).bigEndian)
        inet_pton(AF_INET6, listen.host, &address.sin6_addr)
        return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
    }
}
