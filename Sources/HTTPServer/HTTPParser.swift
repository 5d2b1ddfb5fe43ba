import CHTTPParser
import Upstream

// The only file that touches libhttp-parser. The parser sees a request head only after `HeadScan`
// accepted its raw bytes (Debian's build is non-strict), and only when `HeadVerdict` cannot read it from
// HeadScan's parts; it then frames the body: Content-Length or chunked, with its own overflow and syntax checks.

/// What the parser reports while it reads one request: only its body (the head's target and fields are read
/// where `HeadScan` found them; the parser reads a head only when `HeadVerdict` cannot).
protocol RequestParserDelegate: AnyObject {
    func parsedBody(_ bytes: UnsafeRawBufferPointer)
    func parsedMessageComplete()
}

/// One http_parser for one connection, re-initialised for every request.
final class RequestParser {
    private let parser: UnsafeMutablePointer<http_parser> = .allocate(capacity: 1)
    weak var delegate: (any RequestParserDelegate)?

    /// The head's reading when `HeadVerdict` made it (the parser then reads only the body).
    private var verdict: HeadVerdict?

    init() { reset() }
    deinit { parser.deallocate() }

    func reset() {
        http_parser_init(parser, HTTP_REQUEST)
        parser.pointee.data = Unmanaged.passUnretained(self).toOpaque()
        verdict = nil
    }

    /// Reads a head HeadScan accepted: from its parts when `HeadVerdict` can, else byte by byte. Either way the
    /// parser is left to frame the body, and a head without one completes the message.
    func readHead(_ head: UnsafeRawBufferPointer, parts: HeadScan.Parts, fields: [HTTPField]) -> Fed {
        guard let verdict = HeadVerdict(head: head, parts: parts, fields: fields) else { return feed(head) }
        self.verdict = verdict
        guard verdict.contentLength > 0 else {
            delegate?.parsedMessageComplete()
            return .messageComplete(consumed: head.count)
        }
        // A head of the same framing sets the parser's body state (its other readings are the verdict's).
        let framing = Array("PUT / HTTP/1.1\r\nContent-Length: \(verdict.contentLength)\r\n\r\n".utf8)
        guard case .consumed = framing.withUnsafeBytes({ feed($0) }) else { return .failed("parser stopped early") }
        return .consumed
    }

    enum Fed {
        /// Every byte was consumed.
        case consumed
        /// The message ended after `count` bytes; the rest belongs to the next request.
        case messageComplete(consumed: Int)
        case failed(String)
    }

    /// Feeds bytes. The parser pauses itself at the end of a message so the next request's bytes stay unread.
    func feed(_ bytes: UnsafeRawBufferPointer) -> Fed {
        let count = bytes.count
        let consumed = http_parser_execute(parser, &settings, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), count)
        let code = http_errno(rawValue: chp_errno(parser))
        if code == HPE_PAUSED {
            http_parser_pause(parser, 0)
            return .messageComplete(consumed: consumed)
        }
        guard code == HPE_OK else { return .failed(String(cString: http_errno_description(code))) }
        return consumed == count ? .consumed : .failed("parser stopped early")
    }

    /// The common methods as literals (no string made per request); the others by the parser's name for them.
    var method: String {
        if let verdict { return verdict.method }
        let method = http_method(rawValue: chp_method(parser))
        switch method {
        case HTTP_GET: return "GET"
        case HTTP_POST: return "POST"
        case HTTP_HEAD: return "HEAD"
        case HTTP_PUT: return "PUT"
        case HTTP_DELETE: return "DELETE"
        case HTTP_PATCH: return "PATCH"
        case HTTP_OPTIONS: return "OPTIONS"
        default: return String(cString: http_method_str(method))
        }
    }
    var isChunked: Bool { verdict == nil && chp_is_chunked(parser) != 0 }
    var shouldKeepAlive: Bool { verdict?.keepAlive ?? (http_should_keep_alive(parser) != 0) }
    var isUpgrade: Bool { verdict == nil && parser.pointee.upgrade != 0 }
    var minorVersion: Int { verdict?.minorVersion ?? Int(parser.pointee.http_minor) }

    fileprivate static func from(_ parser: UnsafeMutablePointer<http_parser>?) -> RequestParser? {
        guard let data = parser?.pointee.data else { return nil }
        return Unmanaged<RequestParser>.fromOpaque(data).takeUnretainedValue()
    }

    fileprivate func pauseAtEnd() { http_parser_pause(parser, 1) }
}

private func bytes(_ at: UnsafePointer<CChar>?, _ length: Int) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(start: at, count: length)
}

nonisolated(unsafe) private var settings: http_parser_settings = {
    var settings = http_parser_settings()
    settings.on_body = { parser, at, length in
        RequestParser.from(parser)?.delegate?.parsedBody(bytes(at, length))
        return 0
    }
    settings.on_message_complete = { parser in
        guard let request = RequestParser.from(parser) else { return 0 }
        request.pauseAtEnd()
        request.delegate?.parsedMessageComplete()
        return 0
    }
    return settings
}()
