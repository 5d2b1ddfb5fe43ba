/// Just enough strict DER to read the App Attest nonce extension:
/// SEQUENCE { [1] EXPLICIT { OCTET STRING nonce } }.
enum NonceExtension {
    static func nonce(fromExtensionValue der: [UInt8]) -> [UInt8]? {
        guard let sequence = element(der[...], tag: 0x30), sequence.rest.isEmpty,
              let explicit = element(sequence.content, tag: 0xA1), explicit.rest.isEmpty,
              let octets = element(explicit.content, tag: 0x04), octets.rest.isEmpty else { return nil }
        return Array(octets.content)
    }

    /// One TLV with the expected tag; definite lengths only, minimal long form.
    private static func element(_ input: ArraySlice<UInt8>, tag: UInt8) -> (content: ArraySlice<UInt8>, rest: ArraySlice<UInt8>)? {
        var cursor = input.startIndex
        guard cursor < input.endIndex, input[cursor] == tag else { return nil }
        cursor += 1
        guard cursor < input.endIndex else { return nil }
        var length = Int(input[cursor])
        cursor += 1
        if length & 0x80 != 0 {
            let octetCount = length & 0x7F
            guard (1...2).contains(octetCount), input.endIndex - cursor >= octetCount else { return nil }
            length = input[cursor..<(cursor + octetCount)].reduce(0) { $0 << 8 | Int($1) }
            cursor += octetCount
            guard length >= 0x80 else { return nil }
        }
        guard input.endIndex - cursor >= length else { return nil }
        return (input[cursor..<(cursor + length)], input[(cursor + length)...])
    }
}
