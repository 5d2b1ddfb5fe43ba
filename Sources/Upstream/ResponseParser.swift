import CHTTPParser

// The only file of Upstream that touches libhttp-parser: upstream responses are framed by it (HTTP_RESPONSE
// mode: status line, fields, Content-Length, chunked and read-until-close bodies), never by hand.

/// One http_parser for one upstream connection, re-initialised for every exchange. It reports to the
/// connection (`serve`): a head once complete (its fields wait here, `takeHead`, rather than being handed
/// over piece by piece: a read can end inside a name or value, and one copy into a reused buffer costs less
/// than a call per piece), body pieces, the end.
final class ResponseParser {
    private let parser: UnsafeMutablePointer<http_parser> = {
        let parser = UnsafeMutablePointer<http_parser>.allocate(capacity: 1)
        parser.initialize(to: http_parser())  // no connection to report to until `serve`
        return parser
    }()
    /// The names and values of the head being read, back to back, in memory of the parser's own: appending
    /// to an Array held by a class costs an exclusivity check and a uniqueness check per piece, and a piece
    /// comes per name and per value. `starts` holds where each field's name and value begin, two Ints a
    /// field (a value ends where the next name begins). Kept from one exchange to the next; the parser
    /// bounds a head (80 KiB) and an unusually large one's memory is let go at the next `reset`.
    private var bytes = UnsafeMutablePointer<UInt8>.allocate(capacity: ResponseParser.keptBytes)
    private var byteCapacity = ResponseParser.keptBytes
    private var byteCount = 0
    private var starts = UnsafeMutablePointer<Int>.allocate(capacity: ResponseParser.keptStarts)
    private var startCapacity = ResponseParser.keptStarts
    private var startCount = 0
    private var inValue = false
    /// Field bytes of the response being read, interim heads included (its limit is the exchange's to enforce).
    private(set) var headBytes = 0
    private static let keptBytes = 1024, keptStarts = 64

    init() { reset() }

    deinit {
        parser.deallocate()
        bytes.deallocate()
        starts.deallocate()
    }

    /// The connection the parser reports to, kept unretained in the C parser: the connection owns the parser
    /// and holds itself while it feeds it. (A Swift reference held here was a weak load and an exclusivity
    /// check per report.)
    func serve(_ connection: PlainHTTPConnection) {
        parser.pointee.data = Unmanaged.passUnretained(connection).toOpaque()
    }

    /// For the next response: the parser anew, no field half-read.
    func reset() {
        let connection = parser.pointee.data
        http_parser_init(parser, HTTP_RESPONSE)
        parser.pointee.data = connection
        dropFields()
        headBytes = 0
        if byteCapacity > 16 * Self.keptBytes {
            bytes.deallocate()
            bytes = .allocate(capacity: Self.keptBytes)
            byteCapacity = Self.keptBytes
        }
        if startCapacity > 16 * Self.keptStarts {
            starts.deallocate()
            starts = .allocate(capacity: Self.keptStarts)
            startCapacity = Self.keptStarts
        }
    }

    /// The fields of the head just completed (call from `parsedHeadersComplete`): each name and value made a
    /// String once, values without surrounding blanks, and what they declare about framing noted on the way.
    func takeHead() -> ResponseHead {
        closeField()
        var head = ResponseHead()
        head.fields.reserveCapacity(startCount / 2)
        for index in stride(from: 0, to: startCount, by: 2) {
            let name = starts[index], value = starts[index + 1]
            let end = index + 2 < startCount ? starts[index + 2] : byteCount
            head.add(name: UnsafeBufferPointer(start: bytes + name, count: value - name),
                     value: UnsafeBufferPointer(start: bytes + value, count: end - value))
        }
        return head
    }

    private func dropFields() {
        byteCount = 0
        startCount = 0
        inValue = false
    }

    fileprivate func appendName(_ at: UnsafePointer<CChar>?, _ length: Int) {
        if inValue || startCount == 0 {
            closeField()
            if startCount + 2 > startCapacity {
                let grown = UnsafeMutablePointer<Int>.allocate(capacity: 2 * startCapacity)
                grown.initialize(from: starts, count: startCount)
                starts.deallocate()
                starts = grown
                startCapacity *= 2
            }
            starts[startCount] = byteCount
            starts[startCount + 1] = -1
            startCount += 2
        }
        append(at, length)
    }

    fileprivate func appendValue(_ at: UnsafePointer<CChar>?, _ length: Int) {
        if !inValue, startCount > 0 {
            inValue = true
            starts[startCount - 1] = byteCount
        }
        append(at, length)
    }

    private func append(_ at: UnsafePointer<CChar>?, _ length: Int) {
        headBytes += length
        guard let at, length > 0 else { return }
        if byteCount + length > byteCapacity {
            let capacity = max(2 * byteCapacity, byteCount + length)
            let grown = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
            grown.initialize(from: bytes, count: byteCount)
            bytes.deallocate()
            bytes = grown
            byteCapacity = capacity
        }
        UnsafeMutableRawPointer(bytes + byteCount).copyMemory(from: at, byteCount: length)
        byteCount += length
    }

    /// A name whose value never started has an empty one.
    private func closeField() {
        inValue = false
        if startCount > 0, starts[startCount - 1] < 0 { starts[startCount - 1] = byteCount }
    }

    /// The head was reported: its fields are dropped (an interim head's, or the final one's once taken).
    fileprivate func headReported() { dropFields() }

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

    /// `body` on the connection a callback reports to, without a retain and release per call (the connection
    /// holds itself through the feed); nil before `serve`.
    fileprivate static func with<Result>(_ parser: UnsafeMutablePointer<http_parser>?,
                                         _ body: (PlainHTTPConnection) -> Result) -> Result? {
        guard let data = parser?.pointee.data else { return nil }
        return Unmanaged<PlainHTTPConnection>.fromOpaque(data)._withUnsafeGuaranteedRef(body)
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
        ResponseParser.with(parser) { $0.parser.appendName(at, length) }
        return 0
    }
    settings.on_header_value = { parser, at, length in
        ResponseParser.with(parser) { $0.parser.appendValue(at, length) }
        return 0
    }
    settings.on_headers_complete = { parser in
        let noBody = ResponseParser.with(parser) { connection in
            defer { connection.parser.headReported() }
            return connection.parsedHeadersComplete(status: connection.parser.status)
        }
        // 1: the parser expects no body (F_SKIPBODY).
        return noBody == true ? 1 : 0
    }
    settings.on_body = { parser, at, length in
        ResponseParser.with(parser) { $0.parsedBody(bytes(at, length)) }
        return 0
    }
    settings.on_message_complete = { parser in
        ResponseParser.with(parser) { connection in
            if connection.parsedMessageComplete(status: connection.parser.status) { connection.parser.pauseAtEnd() }
        }
        return 0
    }
    return settings
}()
