/// The strict RFC 9112 reading of an upstream's response head, in one pass over its bytes (what HeadScan is to
/// a client's request head): the status line, each field line checked and made a field as it is read, and what
/// the fields declare about the body. Anything a lenient reader could frame differently — obs-fold, a bare CR or
/// LF, a name that is not a token, a control byte in a value, several or malformed Content-Lengths, a length
/// beside a Transfer-Encoding, chunked applied twice or not last — is the upstream's protocol error, never relayed.
/// Resumable by line: a head that arrives over several reads is read on from the first line not yet whole.
struct ResponseScan {
    enum Outcome: Equatable {
        /// The head's last line is not whole yet: scan again from `lineStart` once more bytes are there.
        case incomplete
        /// The head ends just before `end` (after its CRLF CRLF).
        case complete(end: Int)
        case invalid(String)
    }

    /// How the body of a complete head is framed (RFC 9112 §6.3).
    enum Framing: Equatable {
        case none
        case length(Int)
        case chunked
        /// Read until the upstream closes the connection (HTTP/1.0 without a length, or a coding other than chunked).
        case untilClose
    }

    /// Where the first line not yet read starts.
    private(set) var lineStart = 0
    private(set) var status = 0
    private var minorVersion = 1
    private var length: Int?
    private var lengths = 0
    /// Transfer codings listed, and whether the last one listed is chunked.
    private var codings = 0
    private var chunkedLast = false
    private var connectionClose = false
    private var connectionKeepAlive = false
    /// A Connection value that is not a list of tokens: the connection is not kept (no reading of it is sure).
    private var connectionUnclear = false

    /// A length of more digits than this is refused (no overflow to judge; no body is an exabyte).
    private static let maxLengthDigits = 18

    /// Reads the lines of `bytes` (the head from its status line) from `lineStart` on while they are whole, each
    /// field made into `head` (the scan itself holds nothing counted: its owner keeps it without exclusivity checks).
    mutating func scan(_ bytes: UnsafeRawBufferPointer, into head: inout ResponseHead) -> Outcome {
        var index = lineStart
        if index == 0 {
            if let stop = statusLine(bytes, next: &index) { return stop }
            lineStart = index
            head.fields.reserveCapacity(8)  // most responses' fields, in one allocation
        }
        while index < bytes.count {
            if bytes[index] == 0x0D {  // an empty line: the head's end
                guard index + 1 < bytes.count else { return .incomplete }
                guard bytes[index + 1] == 0x0A else { return .invalid("a CR is not followed by LF") }
                lineStart = index + 2
                if let problem = framingProblem() { return .invalid(problem) }
                return .complete(end: index + 2)
            }
            if let stop = fieldLine(bytes, next: &index, into: &head) { return stop }
            lineStart = index
        }
        return .incomplete
    }

    /// HTTP-version SP 3DIGIT [SP reason-phrase] CRLF, version 1.0 or 1.1, status 100–999 (not 101: the gateway
    /// never asks to switch protocols). Moves `next` to the next line; nil when the line was read.
    private mutating func statusLine(_ bytes: UnsafeRawBufferPointer, next: inout Int) -> Outcome? {
        let count = bytes.count
        // A start that cannot become a status line is refused at once, whole or not.
        guard count >= 8 else {
            return bytes.elementsEqual("HTTP/1.".utf8.prefix(count)) ? .incomplete : .invalid(Self.badStatusLine)
        }
        let version = UInt64(littleEndian: bytes.loadUnaligned(as: UInt64.self))
        guard version == Self.http11 || version == Self.http10 else {
            return .invalid(bytes[..<7].elementsEqual("HTTP/1.".utf8) ? Self.badVersion : Self.badStatusLine)
        }
        // "HTTP/1.x 200" and the byte after it.
        guard count > 12 else { return .incomplete }
        guard bytes[8] == 0x20 else { return .invalid(Self.badVersion) }
        var status = 0
        for index in 9..<12 {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit <= 9 else { return .invalid(Self.badStatusLine) }
            status = status * 10 + Int(digit)
        }
        guard status >= 100 else { return .invalid(Self.badStatusLine) }
        guard status != 101 else { return .invalid("the upstream switched protocols, which the gateway does not relay") }
        var index = 12
        if bytes[index] == 0x20 {
            index += 1
            while index < count, Self.isFieldByte(bytes[index]) { index += 1 }
        }
        guard index < count else { return .incomplete }
        guard bytes[index] == 0x0D else {
            return .invalid(bytes[index] == 0x0A ? "a line ends in LF without CR" : Self.badStatusLine)
        }
        guard index + 1 < count else { return .incomplete }
        guard bytes[index + 1] == 0x0A else { return .invalid("a CR is not followed by LF") }
        self.status = status
        minorVersion = Int(bytes[7] &- UInt8(ascii: "0"))
        next = index + 2
        return nil
    }

    private static let badStatusLine = "the status line is not: HTTP/1.x, a space, three digits, a reason"
    private static let badVersion = "only HTTP/1.0 and HTTP/1.1 responses are read"
    /// "HTTP/1.1" and "HTTP/1.0" as the little-endian words their eight bytes make (constants: no lazy global to
    /// check per response; ResponseScanTests checks them).
    static let http11: UInt64 = 0x312E_312F_5054_5448, http10: UInt64 = 0x302E_312F_5054_5448

    /// name ":" OWS value OWS CRLF: a token name and a value of visible bytes, spaces, tabs and obs-text. The field
    /// is made (and what it declares noted). Moves `next` from the line's start to the next line's; nil when read.
    private mutating func fieldLine(_ bytes: UnsafeRawBufferPointer, next: inout Int, into head: inout ResponseHead) -> Outcome? {
        let count = bytes.count, start = next
        let first = bytes[start]
        if first == 0x20 || first == 0x09 { return .invalid("a header line starts with whitespace (obsolete line folding)") }
        // Eight bytes at a time up to the first that is not a letter, digit or dash (most often the colon); past
        // another token byte, byte by byte.
        var colon = ByteWord.firstMarked(in: bytes, from: start) { ~Self.plainNameBytes($0) & Self.highs }
        while colon < count, HTTPField.isTokenByte(bytes[colon]) { colon += 1 }
        guard colon < count else { return .incomplete }
        guard bytes[colon] == UInt8(ascii: ":"), colon > start else {
            switch bytes[colon] {
            case 0x0A: return .invalid("a line ends in LF without CR")
            case 0x0D, UInt8(ascii: ":"): return .invalid("a header line has no name or no colon")
            case 0x20, 0x09: return .invalid("whitespace between a header name and its colon")
            default: return .invalid("a header name holds a byte that is not a token character")
            }
        }
        // Eight bytes at a time up to the first control byte or DEL (the CR ends every value; past a tab, byte by byte).
        var end = ByteWord.firstMarked(in: bytes, from: colon + 1, by: ByteWord.controls)
        while end < count, Self.isFieldByte(bytes[end]) { end += 1 }
        guard end < count else { return .incomplete }
        guard bytes[end] == 0x0D else {
            return .invalid(bytes[end] == 0x0A ? "a line ends in LF without CR" : "a header value holds a control character")
        }
        guard end + 1 < count else { return .incomplete }
        guard bytes[end + 1] == 0x0A else { return .invalid("a CR is not followed by LF") }
        var lower = colon + 1, upper = end
        while lower < upper, bytes[lower] == 0x20 || bytes[lower] == 0x09 { lower += 1 }
        while upper > lower, bytes[upper - 1] == 0x20 || bytes[upper - 1] == 0x09 { upper -= 1 }
        let value = UnsafeRawBufferPointer(rebasing: bytes[lower..<upper])
        let known = head.add(name: UnsafeRawBufferPointer(rebasing: bytes[start..<colon]), trimmedValue: value)
        switch known {
        case .contentLength, .transferEncoding:
            // libhttp-parser refused a tab in a length and misread one after "chunked": no upstream sends one.
            for index in (colon + 1)..<end where bytes[index] == 0x09 { return .invalid("a Content-Length or Transfer-Encoding value holds a tab") }
            if let problem = known == .contentLength ? noteLength(value) : noteCodings(value) { return .invalid(problem) }
        case .connection, .proxyConnection:
            noteConnection(value)
        default:
            break
        }
        next = end + 2
        return nil
    }

    private mutating func noteLength(_ value: UnsafeRawBufferPointer) -> String? {
        lengths += 1
        guard lengths == 1 else { return "more than one Content-Length" }
        guard !value.isEmpty, value.count <= Self.maxLengthDigits else { return "the Content-Length is not a number of bytes" }
        var number = 0
        for byte in value {
            let digit = byte &- UInt8(ascii: "0")
            guard digit <= 9 else { return "the Content-Length is not a number of bytes" }
            number = number * 10 + Int(digit)
        }
        length = number
        return nil
    }

    /// A list of codings (tokens); chunked at most once, and last. No empty element: libhttp-parser read "chunked,"
    /// as no chunked at all, and a framing field is where readers must not differ.
    private mutating func noteCodings(_ value: UnsafeRawBufferPointer) -> String? {
        var problem: String?
        Self.forEachElement(value) { element in
            guard let element else { problem = "a Transfer-Encoding value is not a list of codings"; return }
            if chunkedLast { problem = "chunked is not the last transfer coding" }
            codings += 1
            chunkedLast = Self.equalsFolded(element, "chunked")
        }
        if codings == 0 && problem == nil { problem = "a Transfer-Encoding names no coding" }
        return problem
    }

    private mutating func noteConnection(_ value: UnsafeRawBufferPointer) {
        // The value nearly every response has, without walking a list.
        if Self.equalsFolded(value, "keep-alive") { return connectionKeepAlive = true }
        Self.forEachElement(value) { element in
            guard let element else { connectionUnclear = true; return }
            if Self.equalsFolded(element, "close") { connectionClose = true }
            if Self.equalsFolded(element, "keep-alive") { connectionKeepAlive = true }
        }
    }

    /// Each element of a comma-separated list, without the blanks around it; nil for one that is not a token, an
    /// empty one too (RFC 9110 §5.6.1 lets a recipient skip those, but libhttp-parser misread lists holding one).
    private static func forEachElement(_ value: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer?) -> Void) {
        var start = 0
        while start <= value.count {
            var end = start
            while end < value.count, value[end] != UInt8(ascii: ",") { end += 1 }
            var (lower, upper) = (start, end)
            while lower < upper, value[lower] == 0x20 || value[lower] == 0x09 { lower += 1 }
            while upper > lower, value[upper - 1] == 0x20 || value[upper - 1] == 0x09 { upper -= 1 }
            if lower < upper {
                let element = UnsafeRawBufferPointer(rebasing: value[lower..<upper])
                body(element.allSatisfy(HTTPField.isTokenByte) ? element : nil)
            } else if !value.isEmpty {
                body(nil)
            }
            start = end + 1
        }
    }

    private static func equalsFolded(_ bytes: UnsafeRawBufferPointer, _ lower: StaticString) -> Bool {
        guard bytes.count == lower.utf8CodeUnitCount else { return false }
        let expected = lower.utf8Start
        for offset in 0..<bytes.count where bytes[offset] | 0x20 != expected[offset] { return false }  // "-" is 0x2D either way
        return true
    }

    /// What the fields declare together, checked once the head is whole.
    private func framingProblem() -> String? {
        if codings > 0 && lengths > 0 { return "both Transfer-Encoding and Content-Length" }
        return nil
    }

    /// `bodyless`: the request was HEAD. 1xx, 204 and 304 never have a body either (RFC 9112 §6.3).
    func framing(bodyless: Bool) -> Framing {
        if bodyless || status < 200 || status == 204 || status == 304 { return .none }
        if codings > 0 { return chunkedLast ? .chunked : .untilClose }
        if let length { return .length(length) }
        return .untilClose
    }

    /// HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with `keep-alive` (and no Transfer-Encoding: a 1.0
    /// response that has one is faulty framing, RFC 9112 §6.1). Whether the body allows it is the caller's.
    var keepAlive: Bool {
        if connectionUnclear || connectionClose { return false }
        return minorVersion == 1 || (connectionKeepAlive && codings == 0)
    }

    private static var ones: UInt64 { ByteWord.ones }
    private static var highs: UInt64 { ByteWord.highs }

    /// The high bit of each of a word's bytes (in memory order) that is a letter, a digit or "-", as most of a field
    /// name's are; exact per byte (no sum carries into the next byte).
    @inline(__always)
    static func plainNameBytes(_ word: UInt64) -> UInt64 {
        let word = UInt64(littleEndian: word), ascii = word & ~highs
        // Only letters fold into a..z by setting 0x20; digits and "-" are compared as they are (a CR folds to "-").
        let folded = ascii | ones &* 0x20
        let letter = (folded &+ ones &* (0x80 - 0x61)) & ~(folded &+ ones &* (0x80 - 0x7B))
        let digit = (ascii &+ ones &* (0x80 - 0x30)) & ~(ascii &+ ones &* (0x80 - 0x3A))
        let dash = ascii ^ ones &* 0x2D
        let isDash = ~((dash & (ones &* 0x7F)) &+ ones &* 0x7F | dash)
        return (letter | digit | isDash) & ~word & highs
    }

    /// Field-value bytes (RFC 9110 §5.5): visible ASCII, space, tab and obs-text.
    @inline(__always)
    static func isFieldByte(_ byte: UInt8) -> Bool {
        byte == 0x09 || (byte >= 0x20 && byte != 0x7F)
    }
}
