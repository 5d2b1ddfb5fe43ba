/// Byte helpers shared by the verifiers.
public enum Bytes {
    /// Constant-time equality: the time taken does not depend on where the inputs differ.
    public static func constantTimeEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in 0..<lhs.count { difference |= lhs[index] ^ rhs[index] }
        return difference == 0
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
