/// Strict DER TLVs: single-byte tags, definite lengths in minimal form, at most 4 length octets. Enough for
/// the App Attest nonce extension and the receipt payload; certificates themselves go through OpenSSL.
struct DERReader {
    private var input: ArraySlice<UInt8>

    init(_ input: ArraySlice<UInt8>) { self.input = input }

    var isAtEnd: Bool { input.isEmpty }

    /// The content of the next element if it has this tag; nothing is consumed otherwise.
    mutating func read(tag: UInt8) -> ArraySlice<UInt8>? {
        var cursor = input.startIndex
        guard cursor < input.endIndex, input[cursor] == tag else { return nil }
        cursor += 1
        guard cursor < input.endIndex else { return nil }
        var length = Int(input[cursor])
        cursor += 1
        if length & 0x80 != 0 {
            let octets = length & 0x7F
            guard (1...4).contains(octets), input.endIndex - cursor >= octets, input[cursor] != 0 else { return nil }
            length = input[cursor..<(cursor + octets)].reduce(0) { $0 << 8 | Int($1) }
            cursor += octets
            guard length >= 0x80 else { return nil }
        }
        guard input.endIndex - cursor >= length else { return nil }
        let content = input[cursor..<(cursor + length)]
        input = input[(cursor + length)...]
        return content
    }

    /// A non-negative INTEGER content of at most 4 bytes.
    static func smallInteger(_ content: ArraySlice<UInt8>) -> Int? {
        guard (1...4).contains(content.count), let first = content.first, first & 0x80 == 0 else { return nil }
        return content.reduce(0) { $0 << 8 | Int($1) }
    }
}

/// The App Attest nonce extension: SEQUENCE { [1] EXPLICIT { OCTET STRING nonce } }.
enum NonceExtension {
    static func nonce(fromExtensionValue der: [UInt8]) -> [UInt8]? {
        var outer = DERReader(der[...])
        guard let sequence = outer.read(tag: 0x30), outer.isAtEnd else { return nil }
        var inSequence = DERReader(sequence)
        guard let explicit = inSequence.read(tag: 0xA1), inSequence.isAtEnd else { return nil }
        var inExplicit = DERReader(explicit)
        guard let octets = inExplicit.read(tag: 0x04), inExplicit.isAtEnd else { return nil }
        return Array(octets)
    }
}
