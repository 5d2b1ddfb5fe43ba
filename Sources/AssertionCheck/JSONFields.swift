/// The top-level members of a JSON object (RFC 8259), for client data: string members are decoded,
/// every other value is validated and skipped. Strict: one object, no trailing commas, no duplicate
/// keys (two `path` members would let two readers see two requests), nesting bounded.
/// Foundation's JSONSerialization costs more than a third of an ECDSA verify here, hence this reader.
/// Names and strings stay bytes (a slice of the input when they hold no escape): client data's values are
/// only compared with the request's, and a String per member cost ~5,000 instructions a parse.
struct JSONFields {
    enum Value: Equatable {
        /// The UTF-8 bytes, escapes decoded (checked to be valid UTF-8).
        case string(ArraySlice<UInt8>)
        case null
        /// A number, boolean, array or object: present, not interpreted.
        case other
    }

    private struct Member {
        let name: ArraySlice<UInt8>
        /// Whether the name is all ASCII: two such names are the same name only when their bytes are.
        let isASCII: Bool
        let value: Value
    }

    /// In order, searched by a scan: client data has five members, and a dictionary's hashing cost ~3,300
    /// instructions a parse. Past `scannedMembers` the names also go into a set, so finding a repeated
    /// name stays linear in the input.
    private var members: [Member] = []
    private var names: Set<String>?
    private static let scannedMembers = 16

    private let bytes: [UInt8]
    private var index = 0
    private static let maxDepth = 32

    init?(_ bytes: [UInt8]) {
        self.bytes = bytes
        guard parseTopLevel() else { return nil }
    }

    /// The member called `name` (an ASCII name).
    subscript(name: StaticString) -> Value? {
        let wanted = UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        return members.first { $0.name.elementsEqual(wanted) }?.value
    }

    private mutating func parseTopLevel() -> Bool {
        skipWhitespace()
        guard consume(UInt8(ascii: "{")) else { return false }
        skipWhitespace()
        if !consume(UInt8(ascii: "}")) {
            repeat {
                skipWhitespace()
                guard let (name, isASCII) = parseString() else { return false }
                skipWhitespace()
                guard consume(UInt8(ascii: ":")) else { return false }
                skipWhitespace()
                let value: Value
                if peek == UInt8(ascii: "\"") {
                    guard let (text, _) = parseString() else { return false }
                    value = .string(text)
                } else if peek == UInt8(ascii: "n") {
                    guard consumeLiteral("null") else { return false }
                    value = .null
                } else {
                    guard skipValue(depth: 1) else { return false }
                    value = .other
                }
                guard add(Member(name: name, isASCII: isASCII, value: value)) else { return false }
                skipWhitespace()
            } while consume(UInt8(ascii: ","))
            guard consume(UInt8(ascii: "}")) else { return false }
        }
        skipWhitespace()
        return index == bytes.count
    }

    /// False when the object already has a member of that name. Names are compared as Swift compares
    /// Strings (canonical equivalence: "é" precomposed or not is one name), which for ASCII is byte equality.
    private mutating func add(_ member: Member) -> Bool {
        if members.isEmpty { members.reserveCapacity(8) }
        if names != nil {
            guard names?.insert(String(decoding: member.name, as: UTF8.self)).inserted == true else { return false }
        } else {
            guard !members.contains(where: { Self.sameName($0, member) }) else { return false }
            if members.count == Self.scannedMembers {
                names = Set((members + [member]).map { String(decoding: $0.name, as: UTF8.self) })
            }
        }
        members.append(member)
        return true
    }

    private static func sameName(_ lhs: Member, _ rhs: Member) -> Bool {
        if lhs.isASCII && rhs.isASCII { return lhs.name.elementsEqual(rhs.name) }
        return String(decoding: lhs.name, as: UTF8.self) == String(decoding: rhs.name, as: UTF8.self)
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

    /// A string token's bytes, escapes decoded, and whether they are all ASCII; control characters and
    /// invalid UTF-8 rejected.
    private mutating func parseString() -> (ArraySlice<UInt8>, isASCII: Bool)? {
        guard consume(UInt8(ascii: "\"")) else { return nil }
        // Most strings have no escape: one scan, and the input's own bytes.
        let (end, highBits) = bytes.withUnsafeBufferPointer { [index] in Self.plainRun($0, from: index) }
        if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
            defer { index = end + 1 }
            let text = bytes[index..<end]
            return highBits < 0x80 ? (text, true) : Self.validUTF8(text).map { ($0, false) }
        }
        var output = Array(bytes[index..<end])
        index = end
        while let byte = peek {
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return Self.validUTF8(output[...]).map { ($0, !$0.contains { $0 >= 0x80 }) }
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
    /// character or the end), and the OR of its bytes. Over the buffer: the array's indexing cost ~12
    /// instructions a byte here.
    private static func plainRun(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> (end: Int, highBits: UInt8) {
        var end = start
        var highBits: UInt8 = 0
        while end < bytes.count {
            let byte = bytes[end]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            highBits |= byte
            end += 1
        }
        return (end, highBits)
    }

    private static func validUTF8(_ text: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        String(validating: text, as: UTF8.self) == nil ? nil : text
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
