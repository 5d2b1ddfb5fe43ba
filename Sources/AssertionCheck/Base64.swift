/// Base64 as it arrives on the wire: standard or URL-safe alphabet, padded or not, no whitespace.
public enum Base64 {
    private static let invalid: UInt8 = 0xFF
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: invalid, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)
        for (index, char) in alphabet.enumerated() { table[Int(char)] = UInt8(index) }
        table[Int(UInt8(ascii: "+"))] = 62
        table[Int(UInt8(ascii: "-"))] = 62
        table[Int(UInt8(ascii: "/"))] = 63
        table[Int(UInt8(ascii: "_"))] = 63
        return table
    }()
    /// The table four times over, each value already shifted to its place in a group of four characters
    /// (bit 31 marks a character outside both alphabets): a group is four lookups ORed together.
    private static let groupTables: [UInt32] = {
        var tables = [UInt32](repeating: 1 << 31, count: 4 * 256)
        for byte in 0..<256 where decodeTable[byte] != invalid {
            for position in 0..<4 { tables[position * 256 + byte] = UInt32(decodeTable[byte]) << UInt32(18 - 6 * position) }
        }
        return tables
    }()
    private static let standardAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Decodes either alphabet, with or without `=` padding. Returns nil on any other character,
    /// misplaced padding, an impossible length, or non-zero trailing bits.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        text.utf8.withContiguousStorageIfAvailable { decode(contiguous: $0) } ?? decode(utf8: Array(text.utf8))
    }

    /// The same for a String, read in place (the generic path costs ~300 instructions a call in dispatch).
    public static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode(contiguous: $0) }
    }

    public static func decode(utf8 input: [UInt8]) -> [UInt8]? {
        decode(utf8: input[...])
    }

    public static func decode(utf8 input: ArraySlice<UInt8>) -> [UInt8]? {
        input.withUnsafeBufferPointer { decode(contiguous: $0) }
    }

    private static func decode(contiguous input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var length = input.count
        var padding = 0
        while length > 0, input[length - 1] == UInt8(ascii: "="), padding < 2 {
            length -= 1
            padding += 1
        }
        if padding > 0, input.count % 4 != 0 { return nil }
        if length % 4 == 1 { return nil }
        // The tables' bounds are known (indexed by a byte): read without a check per character.
        return decodeTable.withUnsafeBufferPointer { table in
            groupTables.withUnsafeBufferPointer { groups in decode(input, length: length, table: table, groups: groups) }
        }
    }

    private static func decode(_ input: UnsafeBufferPointer<UInt8>, length: Int, table: UnsafeBufferPointer<UInt8>,
                               groups: UnsafeBufferPointer<UInt32>) -> [UInt8]? {
        let whole = length / 4
        let tail = length % 4
        let count = whole * 3 + (tail == 0 ? 0 : tail - 1)
        var valid = true
        // Four characters at a time into storage sized once: a per-byte append cost ~20 instructions a
        // character on the assert route's headers.
        let output = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var out = 0
            var index = 0
            var bad: UInt32 = 0
            for _ in 0..<whole {
                let chunk = groups[Int(input[index])] | groups[256 + Int(input[index + 1])]
                    | groups[512 + Int(input[index + 2])] | groups[768 + Int(input[index + 3])]
                // Checked once at the end: a bad character only wastes the rest of the pass.
                bad |= chunk
                buffer[out] = UInt8(truncatingIfNeeded: chunk >> 16)
                buffer[out + 1] = UInt8(truncatingIfNeeded: chunk >> 8)
                buffer[out + 2] = UInt8(truncatingIfNeeded: chunk)
                out += 3
                index += 4
            }
            valid = bad & (1 << 31) == 0
            if valid, tail > 0 {
                var chunk: UInt32 = 0
                for offset in 0..<tail {
                    let value = table[Int(input[index + offset])]
                    if value == invalid { valid = false }
                    chunk = chunk << 6 | UInt32(value & 0x3F)
                }
                chunk <<= UInt32(6 * (4 - tail))
                // Leftover bits must be zero, otherwise two encodings would decode to the same bytes.
                if chunk & (tail == 2 ? 0xFFFF : 0xFF) != 0 { valid = false }
                if valid {
                    buffer[out] = UInt8(truncatingIfNeeded: chunk >> 16)
                    if tail == 3 { buffer[out + 1] = UInt8(truncatingIfNeeded: chunk >> 8) }
                    out += tail - 1
                }
            }
            initialized = valid ? out : 0
        }
        return valid ? output : nil
    }

    /// Standard alphabet with padding (what Apple's APIs and Foundation produce).
    public static func encode(_ bytes: [UInt8]) -> String {
        encode(bytes[...], alphabet: standardAlphabet, pad: true)
    }

    /// URL-safe alphabet without padding.
    public static func encodeURLSafe(_ bytes: [UInt8]) -> String {
        encode(bytes[...], alphabet: urlAlphabet, pad: false)
    }

    public static func encodeURLSafe(_ bytes: ArraySlice<UInt8>) -> String {
        encode(bytes, alphabet: urlAlphabet, pad: false)
    }

    /// Four characters per three bytes written into storage sized once (appending them one by one through a
    /// stride cost about 200 instructions a character: two key ids a request on the assert route).
    private static func encode(_ bytes: ArraySlice<UInt8>, alphabet: [UInt8], pad: Bool) -> String {
        let whole = bytes.count / 3, rest = bytes.count % 3
        let length = whole * 4 + (rest == 0 ? 0 : pad ? 4 : rest + 1)
        return bytes.withUnsafeBufferPointer { bytes in
            alphabet.withUnsafeBufferPointer { alphabet in
                String(unsafeUninitializedCapacity: length) { output in
                    func character(_ chunk: UInt32, _ shift: UInt32) -> UInt8 { alphabet[Int((chunk >> shift) & 0x3F)] }
                    var out = 0
                    for group in 0..<whole {
                        let index = group * 3
                        let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
                        output[out] = character(chunk, 18)
                        output[out + 1] = character(chunk, 12)
                        output[out + 2] = character(chunk, 6)
                        output[out + 3] = character(chunk, 0)
                        out += 4
                    }
                    if rest > 0 {
                        let index = whole * 3
                        var chunk = UInt32(bytes[index]) << 16
                        if rest == 2 { chunk |= UInt32(bytes[index + 1]) << 8 }
                        output[out] = character(chunk, 18)
                        output[out + 1] = character(chunk, 12)
                        if rest == 2 { output[out + 2] = character(chunk, 6) }
                        if pad {
                            if rest == 1 { output[out + 2] = UInt8(ascii: "=") }
                            output[out + 3] = UInt8(ascii: "=")
                        }
                    }
                    return length
                }
            }
        }
    }
}
