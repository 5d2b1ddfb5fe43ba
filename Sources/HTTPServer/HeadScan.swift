import Upstream

/// The strict RFC 9112 check of a raw request head, run before libhttp-parser sees it (Debian's build is
/// lenient: it folds obs-fold lines into header names, stops at a NUL, accepts bare LF). Anything a
/// lenient upstream could read differently from the gateway is refused with 400 and never forwarded.
enum HeadScan {
    enum Outcome: Equatable {
        /// No blank line yet; bytes up to `scanned` hold no violation.
        case incomplete(scanned: Int)
        /// The head ends just before `end` (after its CRLF CRLF); `start` skips leading empty lines.
        case complete(start: Int, end: Int)
        case invalid(RequestFraming.Violation)
    }

    /// Where a complete head's parts lie, as offsets into the head (from its request line): the request is read
    /// from here, found by the one pass that checks it (the parser's callbacks had copied each name's and
    /// value's bytes into buffers before a String was made of them).
    struct Parts {
        var target: Range<Int> = 0..<0
        /// Each field's name, and its value without the blanks around it, in order.
        var fields: [(name: Range<Int>, value: Range<Int>)] = []
    }

    static func findEnd(_ bytes: UnsafeRawBufferPointer, from: Int) -> Outcome {
        var parts = Parts()
        return findEnd(bytes, from: from, parts: &parts)
    }

    /// Looks for the end of the head in `bytes`, resuming after `from` (the previous `scanned`): a line
    /// break without CR is refused as soon as it arrives, so a bare-LF client never waits for a timeout.
    static func findEnd(_ bytes: UnsafeRawBufferPointer, from: Int, parts: inout Parts) -> Outcome {
        var index = from
        var start = 0
        // RFC 9112 §2.2: a server should ignore at least one empty line before the request line.
        while start + 1 < bytes.count, bytes[start] == 0x0D, bytes[start + 1] == 0x0A { start += 2 }
        index = max(index, start)
        while index < bytes.count {
            if bytes[index] == 0x0A {
                guard index > 0, bytes[index - 1] == 0x0D else { return .invalid(bad("bare_lf", "a line ends in LF without CR")) }
                if index >= start + 3, bytes[index - 2] == 0x0A, bytes[index - 3] == 0x0D {
                    let end = index + 1
                    if let violation = validate(UnsafeRawBufferPointer(rebasing: bytes[start..<end]), parts: &parts) {
                        return .invalid(violation)
                    }
                    return .complete(start: start, end: end)
                }
            }
            index += 1
        }
        // A CR that may be followed by its LF in the next read stays unscanned.
        return .incomplete(scanned: max(start, bytes.count - 1))
    }

    /// The request line and every field line of a complete head (ending in CRLF CRLF), in one pass over
    /// its bytes (no list of lines: the head is checked per request, and signed requests' heads run to a
    /// kilobyte). Every LF follows a CR (`findEnd` saw to it); a line is what lies between them.
    static func validate(_ head: UnsafeRawBufferPointer, parts: inout Parts) -> RequestFraming.Violation? {
        var lineEnd = 0
        while head[lineEnd] != 0x0A { lineEnd += 1 }
        let requestLine = 0..<(lineEnd - 1)
        switch checkRequestLine(UnsafeRawBufferPointer(rebasing: head[requestLine])) {
        case .success(let target): parts.target = target
        case .failure(let violation): return violation
        }
        parts.fields.removeAll(keepingCapacity: true)
        var hosts = 0
        var start = lineEnd + 1
        while start < head.count {
            if head[start] == 0x0D, head[start + 1] == 0x0A {  // an empty line: the head's end
                start += 2
                continue
            }
            switch checkField(head, from: start, hosts: &hosts) {
            case .success(let field):
                parts.fields.append((start..<field.colon, field.value))
                start = field.next
            case .failure(let violation): return violation
            }
        }
        if hosts > 1 { return bad("duplicate_host", "more than one Host header") }
        if hosts == 0, head[requestLine].suffix(3).elementsEqual("1.1".utf8) {
            return bad("missing_host", "an HTTP/1.1 request must carry a Host header")
        }
        return nil
    }

    /// The field line starting at `start`: a token name, a colon, a value of visible bytes, spaces, tabs and
    /// obs-text. Gives where its colon is, its value without the blanks around it, and where the next line starts.
    private static func checkField(_ head: UnsafeRawBufferPointer, from start: Int, hosts: inout Int)
        -> Result<(colon: Int, value: Range<Int>, next: Int), RequestFraming.Violation> {
        let first = head[start]
        if first == 0x20 || first == 0x09 {
            return .failure(bad("obs_fold", "a header line starts with whitespace (obsolete line folding)"))
        }
        var colon = start
        var nameIsToken = true, nameHasWhitespace = false
        while head[colon] != UInt8(ascii: ":") {
            let byte = head[colon]
            if byte == 0x0A { return .failure(bad("bad_header", "a header line has no colon")) }
            // The line's own CR (before its LF) is no part of it: it can only be followed by "no colon".
            if !isTokenByte(byte) && !(byte == 0x0D && head[colon + 1] == 0x0A) {
                nameIsToken = false
                if byte == 0x20 || byte == 0x09 { nameHasWhitespace = true }
            }
            colon += 1
        }
        guard colon > start, nameIsToken else {
            return .failure(nameHasWhitespace
                ? bad("bad_header", "whitespace between a header name and its colon")
                : bad("bad_header", "a header name holds a byte that is not a token character"))
        }
        // Field values: visible bytes, space, tab and obs-text; no NUL, CR, LF or other control.
        var index = colon + 1
        while true {
            let byte = head[index]
            if byte == 0x0D && head[index + 1] == 0x0A { break }
            guard byte == 0x09 || (byte >= 0x20 && byte != 0x7F) else {
                return .failure(bad("bad_header", "a header value holds a control character"))
            }
            index += 1
        }
        if colon - start == 4, head[start] | 0x20 == 0x68, head[start + 1] | 0x20 == 0x6F, head[start + 2] | 0x20 == 0x73,
           head[start + 3] | 0x20 == 0x74 {
            hosts += 1
            guard isHostValue(UnsafeRawBufferPointer(rebasing: head[(colon + 1)..<index])) else {
                return .failure(bad("bad_host", "the Host header is not host[:port]"))
            }
        }
        var (lower, upper) = (colon + 1, index)
        while lower < upper, head[lower] == 0x20 || head[lower] == 0x09 { lower += 1 }
        while upper > lower, head[upper - 1] == 0x20 || head[upper - 1] == 0x09 { upper -= 1 }
        return .success((colon, lower..<upper, index + 2))
    }

    /// RFC 9112 §3.2: a Host value that is not `uri-host [":" port]` (RFC 3986) is refused — with
    /// `host_header: preserve` it reaches the upstream, which may build links from it. The host is a
    /// bracketed IPv6 address or a non-empty reg-name / IPv4 address (no userinfo, path or space).
    private static func isHostValue(_ field: UnsafeRawBufferPointer) -> Bool {
        var lower = 0, upper = field.count
        while lower < upper, field[lower] == 0x20 || field[lower] == 0x09 { lower += 1 }
        while upper > lower, field[upper - 1] == 0x20 || field[upper - 1] == 0x09 { upper -= 1 }
        guard lower < upper else { return false }
        var index = lower
        if field[index] == UInt8(ascii: "[") {
            index += 1
            while index < upper, isHexDigit(field[index]) || field[index] == UInt8(ascii: ":") || field[index] == UInt8(ascii: ".") {
                index += 1
            }
            guard index > lower + 1, index < upper, field[index] == UInt8(ascii: "]") else { return false }
            index += 1
        } else {
            while index < upper, field[index] != UInt8(ascii: ":") {
                let byte = field[index]
                if byte == UInt8(ascii: "%") {
                    guard index + 2 < upper, isHexDigit(field[index + 1]), isHexDigit(field[index + 2]) else { return false }
                    index += 3
                    continue
                }
                guard isRegNameByte(byte) else { return false }
                index += 1
            }
            guard index > lower else { return false }
        }
        guard index < upper else { return true }
        guard field[index] == UInt8(ascii: ":") else { return false }
        return field[(index + 1)..<upper].allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x66)
    }

    /// unreserved / sub-delims (RFC 3986).
    private static func isRegNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"): true
        case UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"),
             UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="): true
        default: false
        }
    }

    /// method SP request-target SP HTTP-version, with a version of 1.0 or 1.1 only. Gives where the target is.
    /// Read in one pass for the spaces (the generic searches and comparisons cost a thousand instructions a head).
    private static func checkRequestLine(_ line: UnsafeRawBufferPointer) -> Result<Range<Int>, RequestFraming.Violation> {
        var firstSpace = -1, secondSpace = -1
        for index in 0..<line.count where line[index] == 0x20 {
            guard firstSpace < 0 || secondSpace < 0 else { return .failure(badRequestLine) }  // a third space
            if firstSpace < 0 { firstSpace = index } else { secondSpace = index }
        }
        guard secondSpace >= 0 else { return .failure(badRequestLine) }
        let method = line[..<firstSpace], target = line[(firstSpace + 1)..<secondSpace]
        guard !method.isEmpty, method.allSatisfy(isTokenByte), !target.isEmpty else { return .failure(badRequestLine) }
        guard target.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .failure(bad("bad_request_target", "the request target must be visible ASCII"))
        }
        let version = line.count - secondSpace - 1 == 8
            ? UInt64(littleEndian: line.loadUnaligned(fromByteOffset: secondSpace + 1, as: UInt64.self)) : 0
        guard version == http11 || version == http10 else {
            return .failure(bad("unsupported_http_version", "only HTTP/1.0 and HTTP/1.1 are accepted"))
        }
        return .success((firstSpace + 1)..<secondSpace)
    }

    private static let badRequestLine = bad("bad_request_line", "the request line is not: method, one space, target, one space, version")
    /// "HTTP/1.1" and "HTTP/1.0" as the little-endian words their eight bytes make.
    private static let http11 = word("HTTP/1.1"), http10 = word("HTTP/1.0")

    private static func word(_ text: String) -> UInt64 {
        text.utf8.reversed().reduce(0) { $0 << 8 | UInt64($1) }
    }

    static func isTokenByte(_ byte: UInt8) -> Bool { HTTPField.isTokenByte(byte) }

    private static func bad(_ reason: String, _ message: String) -> RequestFraming.Violation {
        RequestFraming.Violation(status: 400, reason: reason, message: message)
    }
}
