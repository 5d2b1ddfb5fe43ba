/// A response head's fields as relayed, and what they declare about framing and keep-alive, noted while
/// the fields are built (no second pass over them, no String compared).
struct ResponseHead {
    var fields: [HTTPField] = []
    /// Content-Length fields, whether each was digits only, and whether one declared a length other than 0.
    fileprivate var lengths = 0
    fileprivate var lengthsAreDigits = true
    fileprivate var declaresLength = false
    fileprivate var codings = 0
    /// The value of the first Keep-Alive field.
    private(set) var keepAlive: String?

    /// One field: the name as received, the value as UTF-8 (invalid bytes replaced) without surrounding blanks.
    mutating func add(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        var start = 0, end = value.count
        while start < end, value[start] == 0x20 || value[start] == 0x09 { start += 1 }
        while end > start, value[end - 1] == 0x20 || value[end - 1] == 0x09 { end -= 1 }
        add(name: UnsafeRawBufferPointer(name), trimmedValue: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: value[start..<end])))
    }

    /// One field whose value has no blanks around it; gives what the name is among the known ones.
    @discardableResult
    mutating func add(name: UnsafeRawBufferPointer, trimmedValue value: UnsafeRawBufferPointer) -> KnownHeader {
        let text = Self.literal(value) ?? String(decoding: value, as: UTF8.self)
        // Classified once, where the field is made (a canonical name is its spelling's literal).
        let field = HTTPField(name: name, value: text)
        let known = field.known
        fields.append(field)
        switch known {
        case .contentLength:
            lengths += 1
            if value.isEmpty || !value.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) { lengthsAreDigits = false }
            if value.contains(where: { $0 != UInt8(ascii: "0") }) { declaresLength = true }
        case .transferEncoding:
            codings += 1
        case .keepAlive where keepAlive == nil:
            keepAlive = text
        default:
            break
        }
        return known
    }

    /// Two values most responses carry, as literals when the bytes are the same: no UTF-8 check, and a
    /// literal's storage is static (no allocation for a long one, no reference counting).
    private static func literal(_ bytes: UnsafeRawBufferPointer) -> String? {
        switch bytes.count {
        case 10: same(bytes, "keep-alive") ? "keep-alive" : nil
        case 16: same(bytes, "application/json") ? "application/json" : nil
        default: nil
        }
    }

    private static func same(_ bytes: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
        same(bytes, UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Whether two byte runs are the same: by length first, then eight bytes at a time (the last word overlapping
    /// the one before it), under eight byte by byte.
    private static func same(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Bool {
        let count = lhs.count
        guard count == rhs.count else { return false }
        guard count >= 8 else {
            for index in 0..<count where lhs[index] != rhs[index] { return false }
            return true
        }
        var offset = 0
        while offset < count - 8 {
            guard lhs.loadUnaligned(fromByteOffset: offset, as: UInt64.self) == rhs.loadUnaligned(fromByteOffset: offset, as: UInt64.self) else {
                return false
            }
            offset += 8
        }
        return lhs.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self) == rhs.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
    }
}

/// Whether a response's framing left nothing to guess, so the connection that carried it can carry the
/// next exchange. A head that the parser framed by a rule rather than by what it declared could leave the
/// upstream's idea of where the response ends different from ours, and its leftover bytes would be read
/// as another client's response.
enum ResponseFraming {
    /// `bodyless`: the response has no body whatever its head says (HEAD, 204, 304).
    static func isUnambiguous(_ head: ResponseHead, bodyless: Bool) -> Bool {
        guard head.lengthsAreDigits else { return false }
        // A response without a body that declares one: the upstream may send it anyway.
        if bodyless && head.declaresLength { return false }
        // Several lengths, or a length and a coding: the parser chose one reading.
        if head.lengths > 1 || (head.lengths > 0 && head.codings > 0) { return false }
        return head.codings == 0 || !bodyless
    }
}
