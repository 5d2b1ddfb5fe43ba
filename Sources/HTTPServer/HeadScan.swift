import Upstream

/// The strict RFC 9112 check of a raw request head, run before libhttp-parser sees it (Debian's build is
/// lenient: it folds obs-fold lines into header names, stops at a NUL, accepts bare LF). Anything a
/// lenient upstream could read differently from the gateway is refused with 400 and never forwarded.
enum HeadScan {
    enum Outcome: Equatable {
        /// No blank line yet; bytes up to `scanned` hold no bare LF (the lines are judged once the head is whole).
        case incomplete(scanned: Int)
        /// The head ends just before `end` (after its CRLF CRLF); `start` skips leading empty lines.
        case complete(start: Int, end: Int)
        case invalid(RequestFraming.Violation)
    }

    /// Where a complete head's parts lie, as offsets into the head (from its request line): the request is read
    /// from here, found by the walk that checks it (the parser's callbacks had copied each name's and
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
        var start = 0
        // RFC 9112 §2.2: a server should ignore at least one empty line before the request line.
        while start + 1 < bytes.count, bytes[start] == 0x0D, bytes[start + 1] == 0x0A { start += 2 }
        let head = UnsafeRawBufferPointer(rebasing: bytes[start...])
        // A head scanned from its start (one read holds nearly all) has its lines checked as their line feeds are
        // found; a scan resumed within the head looks for the end first, then walks the head again, checking.
        var walked = walk(head, from: max(from - start, 0), checking: from <= start, parts: &parts)
        if from > start, case .end = walked { walked = walk(head, from: 0, checking: true, parts: &parts) }
        switch walked {
        case .end(let end): return .complete(start: start, end: start + end)
        case .invalid(let violation): return .invalid(violation)
        // A CR that may be followed by its LF in the next read stays unscanned.
        case .incomplete: return .incomplete(scanned: max(start, bytes.count - 1))
        }
    }

    private enum Walk {
        case incomplete
        /// The head ends before `end`, after its empty line.
        case end(Int)
        case invalid(RequestFraming.Violation)
    }

    /// The head's lines from `from` to the first empty one, each ending in CRLF (no list of lines: the head is
    /// checked per request). When `checking` (from the head's start), the request line and each field line are
    /// checked as they are found, the first problem told only once the head is whole: a later bare LF, or an
    /// unfinished head, is told instead.
    private static func walk(_ head: UnsafeRawBufferPointer, from: Int, checking: Bool, parts: inout Parts) -> Walk {
        var (lineStart, checking, problem) = (from, checking, RequestFraming.Violation?.none)
        var (hosts, http11) = (0, false)
        if checking { parts.fields.removeAll(keepingCapacity: true) }
        while let lineFeed = HeadBytes.find(0x0A, in: head, lineStart..<head.count) {
            guard lineFeed > 0, head[lineFeed - 1] == 0x0D else { return .invalid(bad("bare_lf", "a line ends in LF without CR")) }
            if lineFeed >= 3, head[lineFeed - 2] == 0x0A, head[lineFeed - 3] == 0x0D {  // an empty line
                if let problem { return .invalid(problem) }
                if hosts > 1 { return .invalid(bad("duplicate_host", "more than one Host header")) }
                if hosts == 0, http11 { return .invalid(bad("missing_host", "an HTTP/1.1 request must carry a Host header")) }
                return .end(lineFeed + 1)
            }
            if checking {
                let line = lineStart..<(lineFeed - 1)
                if lineStart == 0 {
                    switch checkRequestLine(head, line) {
                    // The version is HTTP/1.0 or HTTP/1.1: its last digit tells which.
                    case .success(let target): (parts.target, http11) = (target, head[line.upperBound - 1] == UInt8(ascii: "1"))
                    case .failure(let violation): (problem, checking) = (violation, false)
                    }
                } else {
                    switch checkField(head, line, hosts: &hosts) {
                    case .success(let field): parts.fields.append((lineStart..<field.colon, field.value))
                    case .failure(let violation): (problem, checking) = (violation, false)
                    }
                }
            }
            lineStart = lineFeed + 1
        }
        return .incomplete
    }

    /// The field line `line` (without its CRLF): a token name, a colon, a value of visible bytes, spaces, tabs and
    /// obs-text. Gives where its colon is and its value without the blanks around it.
    private static func checkField(_ head: UnsafeRawBufferPointer, _ line: Range<Int>, hosts: inout Int)
        -> Result<(colon: Int, value: Range<Int>), RequestFraming.Violation> {
        let start = line.lowerBound
        if head[start] == 0x20 || head[start] == 0x09 {
            return .failure(bad("obs_fold", "a header line starts with whitespace (obsolete line folding)"))
        }
        var colon = start
        // Ends at the line's CR at the latest: no token byte.
        while HeadBytes.byte(head[colon], is: .token) { colon += 1 }
        if colon == start || head[colon] != UInt8(ascii: ":") {
            // A line without a colon is told as such whatever its name holds.
            guard let found = HeadBytes.find(UInt8(ascii: ":"), in: head, colon..<line.upperBound) else {
                return .failure(bad("bad_header", "a header line has no colon"))
            }
            let name = start..<found
            return .failure(name.contains { head[$0] == 0x20 || head[$0] == 0x09 }
                ? bad("bad_header", "whitespace between a header name and its colon")
                : bad("bad_header", "a header name holds a byte that is not a token character"))
        }
        let value = (colon + 1)..<line.upperBound
        guard HeadBytes.allFieldValue(head, value) else {
            return .failure(bad("bad_header", "a header value holds a control character"))
        }
        var (lower, upper) = (value.lowerBound, value.upperBound)
        while lower < upper, head[lower] == 0x20 || head[lower] == 0x09 { lower += 1 }
        while upper > lower, head[upper - 1] == 0x20 || head[upper - 1] == 0x09 { upper -= 1 }
        if colon - start == 4, head[start] | 0x20 == 0x68, head[start + 1] | 0x20 == 0x6F, head[start + 2] | 0x20 == 0x73,
           head[start + 3] | 0x20 == 0x74 {
            hosts += 1
            guard isHost(head, lower..<upper) else { return .failure(bad("bad_host", "the Host header is not host[:port]")) }
        }
        return .success((colon, lower..<upper))
    }

    /// RFC 9112 §3.2: a Host value (without the blanks around it) that is not `uri-host [":" port]` (RFC 3986)
    /// is refused — with `host_header: preserve` it reaches the upstream, which may build links from it. The host
    /// is a bracketed IPv6 address or a non-empty reg-name / IPv4 address (no userinfo, path or space).
    private static func isHost(_ head: UnsafeRawBufferPointer, _ value: Range<Int>) -> Bool {
        guard !value.isEmpty else { return false }
        var index = value.lowerBound
        if head[index] == UInt8(ascii: "[") {
            index += 1
            while index < value.upperBound,
                  HeadBytes.byte(head[index], is: .hexDigit) || head[index] == UInt8(ascii: ":") || head[index] == UInt8(ascii: ".") {
                index += 1
            }
            guard index > value.lowerBound + 1, index < value.upperBound, head[index] == UInt8(ascii: "]") else { return false }
            index += 1
        } else {
            while index < value.upperBound {
                if HeadBytes.byte(head[index], is: .regName) {
                    index += 1
                    continue
                }
                guard head[index] == UInt8(ascii: "%") else { break }  // the port's colon, or a byte refused below
                guard index + 2 < value.upperBound, HeadBytes.byte(head[index + 1], is: .hexDigit),
                      HeadBytes.byte(head[index + 2], is: .hexDigit) else { return false }
                index += 3
            }
            guard index > value.lowerBound else { return false }
        }
        guard index < value.upperBound else { return true }
        return head[index] == UInt8(ascii: ":") && HeadBytes.all(head, (index + 1)..<value.upperBound, are: .digit)
    }

    /// method SP request-target SP HTTP-version, with a version of 1.0 or 1.1 only. Gives where the target is.
    /// One pass over an accepted line; a refused one is told as a count of its spaces would first.
    private static func checkRequestLine(_ head: UnsafeRawBufferPointer, _ line: Range<Int>)
        -> Result<Range<Int>, RequestFraming.Violation> {
        var index = line.lowerBound
        while HeadBytes.byte(head[index], is: .token) { index += 1 }  // the line's CR ends it at the latest
        guard index > line.lowerBound, head[index] == 0x20 else { return .failure(badRequestLine) }
        let targetStart = index + 1
        index = targetStart
        while HeadBytes.byte(head[index], is: .visible) { index += 1 }
        let version = line.upperBound - index - 1 == 8
            ? UInt64(littleEndian: head.loadUnaligned(fromByteOffset: index + 1, as: UInt64.self)) : 0
        if head[index] == 0x20, index > targetStart, version == http11 || version == http10 { return .success(targetStart..<index) }
        guard let secondSpace = HeadBytes.find(0x20, in: head, index..<line.upperBound), secondSpace > targetStart,
              HeadBytes.find(0x20, in: head, (secondSpace + 1)..<line.upperBound) == nil else { return .failure(badRequestLine) }
        guard secondSpace == index else { return .failure(bad("bad_request_target", "the request target must be visible ASCII")) }
        return .failure(bad("unsupported_http_version", "only HTTP/1.0 and HTTP/1.1 are accepted"))
    }

    private static let badRequestLine = bad("bad_request_line", "the request line is not: method, one space, target, one space, version")
    /// "HTTP/1.1" and "HTTP/1.0" as the little-endian words their eight bytes make (literals: a computed constant
    /// is initialised lazily, and that is checked on every use).
    private static let http11: UInt64 = 0x312E_312F_5054_5448, http10: UInt64 = 0x302E_312F_5054_5448

    private static func bad(_ reason: String, _ message: String) -> RequestFraming.Violation {
        RequestFraming.Violation(status: 400, reason: reason, message: message)
    }
}
