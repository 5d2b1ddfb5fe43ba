/// Byte helpers shared by the verifiers.
public enum Bytes {
    /// Constant-time equality: the time taken does not depend on where the inputs differ.
    public static func constantTimeEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        constantTimeEqual(lhs[...], rhs[...])
    }

    public static func constantTimeEqual(_ lhs: ArraySlice<UInt8>, _ rhs: ArraySlice<UInt8>) -> Bool {
        // Over the buffers: a zip of the slices cost ~300 instructions for 32 bytes.
        lhs.withUnsafeBytes { left in
            rhs.withUnsafeBytes { right in constantTimeEqual(left, right) }
        }
    }

    static func constantTimeEqual(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in 0..<lhs.count { difference |= lhs[index] ^ rhs[index] }
        return difference == 0
    }

    /// Whether `bytes` (UTF-8) is the same text as `text` as Swift compares Strings: byte-equal, or — only
    /// where the bytes differ — canonically equivalent ("é" as one scalar or as "e" and an accent).
    public static func sameText(_ bytes: ArraySlice<UInt8>, _ text: String) -> Bool {
        var text = text
        let same = text.withUTF8 { own in
            bytes.withUnsafeBufferPointer { Bytes.equal(own, $0) }
        }
        return same || String(decoding: bytes, as: UTF8.self) == text
    }

    /// Byte equality by index (Sequence.elementsEqual walks iterators: ~25 instructions a byte). Not constant-time.
    static func equal(_ lhs: UnsafeBufferPointer<UInt8>, _ rhs: UnsafeBufferPointer<UInt8>) -> Bool {
        guard lhs.count == rhs.count else { return false }
        for index in 0..<lhs.count where lhs[index] != rhs[index] { return false }
        return true
    }

    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var output = [UInt8]()
        output.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            output.append(digits[Int(byte >> 4)])
            output.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    static func bigEndianUInt32(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        bytes.reduce(0) { $0 << 8 | UInt32($1) }
    }
}
