import CHTTPParser

// The only file of Upstream that touches libhttp-parser: upstream responses are framed by it (HTTP_RESPONSE
// mode: status line, fields, Content-Length, chunked and read-until-close bodies), never by hand.

/// What the parser reports while it reads a response. Field names and values may arrive in pieces (a read
/// can end inside one); the delegate joins them.
protocol ResponseParserDelegate: AnyObject {
    func parsedField(name: UnsafeRawBufferPointer)
    func parsedValue(_ bytes: UnsafeRawBufferPointer)
    /// A head is complete (an interim 1xx one too). True: no body follows whatever the head says (HEAD).
    func parsedHeadersComplete(status: Int) -> Bool
    func parsedBody(_ bytes: UnsafeRawBufferPointer)
    /// A message ended. True: stop here (the final response), false: read on (after an interim 1xx).
    func parsedMessageComplete(status: Int) -> Bool
}

/// One http_parser for one upstream connection, re-initialised for every exchange.
final class ResponseParser {
    private let parser: UnsafeMutablePointer<http_parser> = .allocate(capacity: 1)
    weak var delegate: (any ResponseParserDelegate)?

    init() { reset() }
    deinit { parser.deallocate() }

    func reset() {
        http_parser_init(parser, HTTP_RESPONSE)
        parser.pointee.data = Unmanaged.passUnretained(self).toOpaque()
    }

    enum Fed: Equatable {
        /// Every byte was consumed.
        case consumed
        /// The final response ended after `consumed` bytes; anything after it is not part of this exchange.
        case messageComplete(consumed: Int)
        case failed(String)
    }

    func feed(_ bytes: UnsafeRawBufferPointer) -> Fed {
        let consumed = http_parser_execute(parser, &responseSettings, bytes.baseAddress?.assumingMemoryBound(to: CChar.self),
                                           bytes.count)
        return outcome(consumed: consumed, of: bytes.count)
    }

    /// The upstream closed its side: ends a read-until-close body, fails a response cut short.
    func feedEndOfStream() -> Fed {
        outcome(consumed: http_parser_execute(parser, &responseSettings, nil, 0), of: 0)
    }

    private func outcome(consumed: Int, of count: Int) -> Fed {
        let code = http_errno(rawValue: chp_errno(parser))
        if code == HPE_PAUSED {
            http_parser_pause(parser, 0)
            return .messageComplete(consumed: consumed)
        }
        guard code == HPE_OK else { return .failed(String(cString: http_errno_description(code))) }
        if parser.pointee.upgrade != 0 { return .failed("the upstream switched protocols, which the gateway does not relay") }
        return consumed == count ? .consumed : .failed("the parser stopped early")
    }

    /// HTTP/1.1 without `Connection: close` (or 1.0 with keep-alive), and a body that did not run to EOF.
    var shouldKeepAlive: Bool { http_should_keep_alive(parser) != 0 }

    fileprivate static func from(_ parser: UnsafeMutablePointer<http_parser>?) -> ResponseParser? {
        guard let data = parser?.pointee.data else { return nil }
        return Unmanaged<ResponseParser>.fromOpaque(data).takeUnretainedValue()
    }

    fileprivate var status: Int { Int(parser.pointee.status_code) }
    fileprivate func pauseAtEnd() { http_parser_pause(parser, 1) }
}

private func bytes(_ at: UnsafePointer<CChar>?, _ length: Int) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(start: at, count: length)
}

nonisolated(unsafe) private var responseSettings: http_parser_settings = {
    var settings = http_parser_settings()
    settings.on_header_field = { parser, at, length in
        ResponseParser.from(parser)?.delegate?.parsedField(name: bytes(at, length))
        return 0
    }
    settings.on_header_value = { parser, at, length in
        ResponseParser.from(parser)?.delegate?.parsedValue(bytes(at, length))
        return 0
    }
    settings.on_headers_complete = { parser in
        guard let response = ResponseParser.from(parser) else { return 0 }
        // 1: the parser expects no body (F_SKIPBODY).
        return response.delegate?.parsedHeadersComplete(status: response.status) == true ? 1 : 0
    }
    settings.on_body = { parser, at, length in
        ResponseParser.from(parser)?.delegate?.parsedBody(bytes(at, length))
        return 0
    }
    settings.on_message_complete = { parser in
        guard let response = ResponseParser.from(parser) else { return 0 }
        if response.delegate?.parsedMessageComplete(status: response.status) != false { response.pauseAtEnd() }
        return 0
    }
    return settings
}()
