/// The top-level members of a JSON object (RFC 8259), for client data: string members are decoded,
/// every other value is validated and skipped. Strict: one object, no trailing commas, no duplicate
/// keys (two `path` members would let two readers see two requests), nesting bounded.
/// Foundation's JSONSerialization costs more than a third of an ECDSA verify here, hence this reader.
/// Names and strings stay bytes, noted by where they lie (in the input, or after decoding escapes in
/// `decoded`): client data's values are only compared with the request's, and a String per member cost
/// ~5,000 instructions a parse.
struct JSONFields {
    /// A string's UTF-8 bytes (escapes decoded, checked to be valid UTF-8): a range of the input, or of
    /// `decoded` when the string had escapes.
    struct Text: Equatable {
        let range: Range<Int>
        let isDecoded: Bool
        /// Whether every byte is ASCII: two such names are the same name only when their bytes are.
        let isASCII: Bool
    }

    enum Value: Equatable {
        case string(Text)
        case null
        /// A number, boolean, array or object: present, not interpreted.
        case other
    }

    /// In order, searched by a scan: client data has five members, and a dictionary's hashing cost ~3,300
    /// instructions a parse. Past `scannedMembers` the names also go into a set, so finding a repeated
    /// name stays linear in the input.
    private var members: [(name: Text, value: Value)] = []
    private var names: Set<String>?
    private static let scannedMembers = 16

    private let bytes: [UInt8]
    private var decoded: [UInt8] = []
    private var index = 0
    private static let maxDepth = 32

    init?(_ bytes: [UInt8]) {
        self.bytes = bytes
        guard parseTopLevel() else { return nil }
    }

    /// The member called `name`, compared as bytes: `name` is ASCII, and no other spelling of client data's
    /// names is the same String (only K, ; and ` have non-ASCII canonical equivalents).
    subscript(name: StaticString) -> Value? {
        let wanted = UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        for member in members where withBytes(of: member.name, { Bytes.equal($0, wanted) }) { return member.value }
        return nil
    }

    /// The bytes `text` names.
    func bytes(of text: Text) -> ArraySlice<UInt8> {
        text.isDecoded ? decoded[text.range] : bytes[text.range]
    }

    private func withBytes<T>(of text: Text, _ body: (UnsafeBufferPointer<UInt8>) -> T) -> T {
        (text.isDecoded ? decoded : bytes).withUnsafeBufferPointer { body(UnsafeBufferPointer(rebasing: $0[text.range])) }
    }

    private mutating func parseTopLevel() -> Bool {
        skipWhitespace()
        guard consume(UInt8(ascii: "{")) else { return false }
        skipWhitespace()
        if !consume(UInt8(ascii: "}")) {
            repeat {
                skipWhitespace()
                guard let name = parseString() else { return false }
                skipWhitespace()
                guard consume(UInt8(ascii: ":")) else { return false }
                skipWhitespace()
                let value: Value
                if peek == UInt8(ascii: "\"") {
                    guard let text = parseString() else { return false }
                    value = .string(text)
                } else if peek == UInt8(ascii: "n") {
                    guard consumeLiteral("null") else { return false }
                    value = .null
                } else {
                    guard skipValue(depth: 1) else { return false }
                    value = .other
                }
                guard add(name, value) else { return false }
                skipWhitespace()
            } while consume(UInt8(ascii: ","))
            guard consume(UInt8(ascii: "}")) else { return false }
        }
        skipWhitespace()
        return index == bytes.count
    }

    /// False when the object already has a member of that name. Names are compared as Swift compares
    /// Strings (canonical equivalence: "é" precomposed or not is one name), which for ASCII is byte equality.
    private mutating func add(_ name: Text, _ value: Value) -> Bool {
        if members.isEmpty { members.reserveCapacity(8) }
        if names != nil {
            let text = string(name)
            guard names?.insert(text).inserted == true else { return false }
        } else {
            for member in members where sameName(member.name, name) { return false }
            if members.count == Self.scannedMembers {
                names = Set((members.map(\.name) + [name]).map(string))
            }
        }
        members.append((name, value))
        return true
    }

    private func sameName(_ lhs: Text, _ rhs: Text) -> Bool {
        if lhs.isASCII && rhs.isASCII {
            return lhs.range.count == rhs.range.count && withBytes(of: lhs) { left in withBytes(of: rhs) { Bytes.equal(left, $0) } }
        }
        return string(lhs) == string(rhs)
    }

    private func string(_ text: Text) -> String {
        String(decoding: bytes(of: text), as: UTF8.self)
    }

    private var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func consume(_ byte: UInt8) -> Bool {
        guard peek == byte else { return false }
        index += 1
        return true
    }

    private mutating func consumeLiteral(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count else { return false }
        for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] { return false }
        index += count
        return true
    }

    private mutating func skipWhitespace() {
        while let byte = peek, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
    }

    /// A string token, escapes decoded; control characters and invalid UTF-8 rejected.
    private mutating func parseString() -> Text? {
        guard consume(UInt8(ascii: "\"")) else { return nil }
        // Most strings have no escape: one scan, and the input's own bytes.
        let (end, highBits) = bytes.withUnsafeBufferPointer { [index] in Self.plainRun($0, from: index) }
        if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
            defer { index = end + 1 }
            let text = Text(range: index..<end, isDecoded: false, isASCII: highBits < 0x80)
            return text.isASCII || String(validating: bytes[text.range], as: UTF8.self) != nil ? text : nil
        }
        var output = Array(bytes[index..<end])
        index = end
        while let byte = peek {
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard String(validating: output, as: UTF8.self) != nil else { return nil }
                let start = decoded.count
                decoded += output
                return Text(range: start..<decoded.count, isDecoded: true, isASCII: !output.contains { $0 >= 0x80 })
            case UInt8(ascii: "\\"):
                guard let escaped = parseEscape() else { return nil }
                output.append(contentsOf: escaped)
            case 0..<0x20:
                return nil
            default:
                output.append(byte)
            }
        }
        return nil
    }

    /// Where the run of bytes from `start` that need no decoding ends (at a quote, a backslash, a control
    /// character or the end), and the OR of its bytes' top bits. Eight bytes at a time while none of them
    /// ends the run (a byte-at-a-time scan cost ~12 instructions a byte of client data), then byte by byte.
    private static func plainRun(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> (end: Int, highBits: UInt8) {
        let ones: UInt64 = 0x0101_0101_0101_0101, tops: UInt64 = 0x8080_8080_8080_8080
        var end = start
        var seen: UInt64 = 0
        let raw = UnsafeRawBufferPointer(bytes)
        while end + 8 <= bytes.count {
            let word = raw.loadUnaligned(fromByteOffset: end, as: UInt64.self)
            // A byte of `word ^ quotes` is zero where the word has a quote; `(x - 0x01…) & ~x & 0x80…` is
            // non-zero exactly when some byte of x is zero, and with 0x20… when some byte is below 0x20.
            let quotes = word ^ (ones &* 0x22), backslashes = word ^ (ones &* 0x5C)
            let stops = ((quotes &- ones) & ~quotes) | ((backslashes &- ones) & ~backslashes) | ((word &- ones &* 0x20) & ~word)
            if stops & tops != 0 { break }
            seen |= word
            end += 8
        }
        var highBits: UInt8 = seen & tops == 0 ? 0 : 0x80
        while end < bytes.count {
            let byte = bytes[end]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            highBits |= byte
            end += 1
        }
        return (end, highBits)
    }

    private mutating func parseEscape() -> [UInt8]? {
        guard let byte = peek else { return nil }
        index += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): return [byte]
        case UInt8(ascii: "b"): return [0x08]
        case UInt8(ascii: "f"): return [0x0C]
        case UInt8(ascii: "n"): return [0x0A]
        case UInt8(ascii: "r"): return [0x0D]
        case UInt8(ascii: "t"): return [0x09]
        case UInt8(ascii: "u"):
            guard var scalar = parseHex4() else { return nil }
            if (0xD800...0xDBFF).contains(scalar) {
                guard consumeLiteral("\\u"), let low = parseHex4(), (0xDC00...0xDFFF).contains(low) else { return nil }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            }
            guard let unicode = Unicode.Scalar(scalar) else { return nil }
            return Array(String(Character(unicode)).utf8)
        default: return nil
        }
    }

    private mutating func parseHex4() -> UInt32? {
        guard bytes.count - index >= 4 else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            index += 1
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    /// Any JSON value, checked for syntax and thrown away.
    private mutating func skipValue(depth: Int) -> Bool {
        guard depth <= JSONFields.maxDepth, let byte = peek else { return false }
        switch byte {
        case UInt8(ascii: "\""): return parseString() != nil
        case UInt8(ascii: "t"): return consumeLiteral("true")
        case UInt8(ascii: "f"): return consumeLiteral("false")
        case UInt8(ascii: "n"): return consumeLiteral("null")
        case UInt8(ascii: "["), UInt8(ascii: "{"):
            let isObject = byte == UInt8(ascii: "{")
            let close = isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")
            index += 1
            skipWhitespace()
            if consume(close) { return true }
            repeat {
                skipWhitespace()
                if isObject {
                    guard parseString() != nil else { return false }
                    skipWhitespace()
                    guard consume(UInt8(ascii: ":")) else { return false }
                    skipWhitespace()
                }
                guard skipValue(depth: depth + 1) else { return false }
                skipWhitespace()
            } while consume(UInt8(ascii: ","))
            return consume(close)
        default: return skipNumber()
        }
    }

    /// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    private mutating func skipNumber() -> Bool {
        _ = consume(UInt8(ascii: "-"))
        if consume(UInt8(ascii: "0")) {
        } else if let byte = peek, (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(byte) {
            skipDigits()
        } else {
            return false
        }
        if consume(UInt8(ascii: ".")) { guard skipDigits() else { return false } }
        if consume(UInt8(ascii: "e")) || consume(UInt8(ascii: "E")) {
            if !consume(UInt8(ascii: "+")) { _ = consume(UInt8(ascii: "-")) }
            guard skipDigits() else { return false }
        }
        return true
    }

    @discardableResult
    private mutating func skipDigits() -> Bool {
        let start = index
        while let byte = peek, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { index += 1 }
        return index > start
    }
}
