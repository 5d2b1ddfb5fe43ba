import Upstream

/// libhttp-parser's reading of a head `HeadScan` accepted, made from where HeadScan found its parts and from the
/// classified fields, for the heads clients send every day: a common method, an origin-form target, Connection
/// values of one token, one plain Content-Length. The parser read every head byte a second time only to learn
/// this (2,200 instructions a small head, 10,000 a signed one). A head holding anything else (another method,
/// another target form, Transfer-Encoding, Upgrade, a Connection list, several Content-Lengths, 80 KiB) gives
/// nil and the parser reads it as before, so its verdicts (refusals included) stay exactly its own;
/// HeadVerdictTests runs both over a corpus and requires the same reading.
struct HeadVerdict: Equatable {
    /// The method's place in `common` (no String held: the verdict is plain bytes, nothing to retain or release).
    private let methodIndex: Int
    var method: String { Self.common[methodIndex].name }
    let minorVersion: Int
    /// As `http_should_keep_alive`: HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with `keep-alive`.
    let keepAlive: Bool
    /// The body's length (0: none, the message ends with its head).
    let contentLength: Int

    /// The parser's HTTP_MAX_HEADER_SIZE: a head this big is the parser's to judge (it overflows there).
    static let parserHeadLimit = 80 * 1024

    init?(head: UnsafeRawBufferPointer, parts: HeadScan.Parts, fields: [HTTPField]) {
        guard head.count < Self.parserHeadLimit, let methodIndex = Self.method(head, length: parts.target.lowerBound - 1),
              head[parts.target.lowerBound] == UInt8(ascii: "/") else { return nil }
        // HeadScan admitted "HTTP/1.0" and "HTTP/1.1" only, right after the target's space.
        let minorVersion = Int(head[parts.target.upperBound + 8] &- UInt8(ascii: "0"))
        var close = false, keepAliveToken = false
        var contentLength: Int?
        for index in fields.indices {
            switch fields[index].known {
            case .connection, .proxyConnection:  // the parser reads Proxy-Connection as Connection
                let value = parts.fields[index].value
                guard Self.onlySpacesFollow(value, in: head), let token = Self.connectionToken(head, value) else { return nil }
                close = close || token == .close
                keepAliveToken = keepAliveToken || token == .keepAlive
            case .contentLength:
                let value = parts.fields[index].value
                guard contentLength == nil, Self.onlySpacesFollow(value, in: head),
                      let length = Self.decimal(head, value) else { return nil }
                contentLength = length
            case .transferEncoding, .upgrade:
                return nil
            default:
                continue
            }
        }
        self.methodIndex = methodIndex
        self.minorVersion = minorVersion
        keepAlive = minorVersion == 0 ? keepAliveToken : !close
        self.contentLength = contentLength ?? 0
    }

    /// The methods clients use, as literals; any other is left to the parser (it knows 34, and refuses the rest).
    /// Compared as one word (the head holds 8 bytes past any method of up to 7: a space, a target, a version).
    private static func method(_ head: UnsafeRawBufferPointer, length: Int) -> Int? {
        guard length <= 7 else { return nil }
        let word = UInt64(littleEndian: head.loadUnaligned(as: UInt64.self)) & (1 << (UInt64(length) * 8) - 1)
        for index in common.indices where common[index].word == word { return index }
        return nil
    }

    private static let common: [(name: String, word: UInt64)] = ["GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"].map {
        ($0, $0.utf8.reversed().reduce(0) { $0 << 8 | UInt64($1) })
    }

    private enum Token { case close, keepAlive, other }

    /// One token or none (a list, or blanks within, is the parser's to read): `close` and `keep-alive` in any case.
    private static func connectionToken(_ head: UnsafeRawBufferPointer, _ value: Range<Int>) -> Token? {
        for index in value where head[index] == UInt8(ascii: ",") || head[index] == 0x20 || head[index] == 0x09 { return nil }
        if equalsFolded(head, value, "close") { return .close }
        if equalsFolded(head, value, "keep-alive") { return .keepAlive }
        return .other
    }

    private static func equalsFolded(_ head: UnsafeRawBufferPointer, _ range: Range<Int>, _ lower: StaticString) -> Bool {
        guard range.count == lower.utf8CodeUnitCount else { return false }
        let expected = lower.utf8Start
        for offset in 0..<range.count where head[range.lowerBound + offset] | 0x20 != expected[offset] {  // "-" is 0x2D either way
            return false
        }
        return true
    }

    /// 1 to 18 digits (no overflow to judge); anything else is left to the parser.
    private static func decimal(_ head: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int? {
        guard !range.isEmpty, range.count <= 18 else { return nil }
        var number = 0
        for index in range {
            let digit = head[index] &- UInt8(ascii: "0")
            guard digit <= 9 else { return nil }
            number = number * 10 + Int(digit)
        }
        return number
    }

    /// The parser ends a token at a space but not at a tab: a value followed by anything but spaces before its
    /// CR is left to it.
    private static func onlySpacesFollow(_ value: Range<Int>, in head: UnsafeRawBufferPointer) -> Bool {
        var index = value.upperBound
        while head[index] != 0x0D {
            guard head[index] == 0x20 else { return false }
            index += 1
        }
        return true
    }
}
