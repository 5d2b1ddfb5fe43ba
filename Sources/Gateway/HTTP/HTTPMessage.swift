import Foundation
import Upstream

/// Header lines in both directions are Upstream's `HTTPField` (name as spelled on the wire, value),
/// so the proxy passes them between the server and curl without conversion.
extension HTTPField {
    /// A token name and a value without CR, LF or NUL: anything else could split the response (header injection).
    var isSafeToSend: Bool {
        let nameIsToken = !name.isEmpty && name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A) || HTTPField.tokenSymbols.contains(byte)
        }
        return nameIsToken && !value.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0 }
    }

    /// Built once: a Set made per call was 5 % of a pass-through request's instructions.
    private static let tokenSymbols = Set("!#$%&'*+-.^_`|~".utf8)
}

extension Array where Element == HTTPField {
    /// The first value of header `name`, if any.
    public func first(named name: String) -> String? {
        first { $0.hasName(name) }?.value
    }
}

/// A complete inbound request: the body has been read in full (and within limits) before the handler runs.
public struct HTTPRequest: Sendable {
    public let method: String
    /// The request target's path exactly as sent: still percent-encoded, always starting with "/".
    public let path: String
    /// Everything after the first "?", still percent-encoded; nil when the target has no "?".
    public let query: String?
    /// In the order received. Bytes that are not UTF-8 (obsolete header text) arrive as U+FFFD.
    public let headers: [HTTPField]
    public let body: [UInt8]
    /// The peer's IP address as text ("127.0.0.1", "::1").
    public let clientAddress: String
    /// "HTTP/1.1" or "HTTP/1.0".
    public let httpVersion: String

    public init(method: String, path: String, query: String?, headers: [HTTPField], body: [UInt8],
                clientAddress: String, httpVersion: String) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.clientAddress = clientAddress
        self.httpVersion = httpVersion
    }
}

/// A response body produced piece by piece (an upstream response relayed as it arrives).
/// The server sends it with chunked transfer coding.
public protocol HTTPBodyStream: AnyObject {
    /// The next piece of the body; nil at the end. May block. Throwing aborts the response: the client
    /// sees the connection close without the final chunk, so a truncated body is never taken for a whole one.
    func nextChunk() throws -> [UInt8]?
    /// Called exactly once when the server is done with the stream: after the end, an error, or a client
    /// that went away mid-body.
    func close()
}

public enum HTTPResponseBody {
    case bytes([UInt8])
    case stream(any HTTPBodyStream)
}

public struct HTTPResponse {
    public var status: Int
    /// Content-Length, Transfer-Encoding and Connection are left out: the server owns message framing.
    public var headers: [HTTPField]
    public var body: HTTPResponseBody

    public init(status: Int, headers: [HTTPField] = [], body: HTTPResponseBody = .bytes([])) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The gateway's error shape: `{"error":"<reason_code>","message":"…"}` as application/json.
    public static func error(status: Int, reason: String, message: String) -> HTTPResponse {
        let body = (try? errorEncoder.encode(ErrorBody(error: reason, message: message))) ?? Data()
        return HTTPResponse(status: status, headers: [HTTPField("Content-Type", "application/json")],
                            body: .bytes(Array(body)))
    }

    private struct ErrorBody: Encodable {
        let error: String
        let message: String
    }

    private static let errorEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
}

/// Answers requests. Called concurrently, one thread per connection, so it may block on I/O.
public protocol HTTPHandler: AnyObject, Sendable {
    func handle(_ request: HTTPRequest) -> HTTPResponse
    /// The largest body accepted for a request to `path` (raw) with `method`, decided before the body is read;
    /// nil leaves `ServerLimits.maxBodyBytes`. The smaller of the two applies.
    func maxBodyBytes(method: String, path: String) -> Int?
    /// The server answered `status` itself (bad framing, bad target, body too large): for logs and metrics.
    func rejected(method: String, target: String, clientAddress: String, status: Int, reason: String)
}

extension HTTPHandler {
    public func maxBodyBytes(method: String, path: String) -> Int? { nil }
    public func rejected(method: String, target: String, clientAddress: String, status: Int, reason: String) {}
}

/// Resource bounds of the inbound server.
public struct ServerLimits: Sendable, Equatable {
    public var connectionLimit: Int
    /// 0 = no per-IP limit.
    public var perIPConnectionLimit: Int
    /// An idle connection is closed after this many seconds.
    public var connectionTimeoutSeconds: Int
    /// Per-connection memory for the request line, headers and I/O buffers: bounds header size.
    public var connectionMemoryLimitBytes: Int
    /// Largest request body accepted (413 beyond it).
    public var maxBodyBytes: Int
    /// 0 = the system default.
    public var threadStackSizeBytes: Int

    public init(connectionLimit: Int = 1024, perIPConnectionLimit: Int = 0, connectionTimeoutSeconds: Int = 30,
                connectionMemoryLimitBytes: Int = 32768, maxBodyBytes: Int = 1_048_576, threadStackSizeBytes: Int = 0) {
        self.connectionLimit = connectionLimit
        self.perIPConnectionLimit = perIPConnectionLimit
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
        self.connectionMemoryLimitBytes = connectionMemoryLimitBytes
        self.maxBodyBytes = maxBodyBytes
        self.threadStackSizeBytes = threadStackSizeBytes
    }
}
