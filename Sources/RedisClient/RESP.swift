/// The Redis protocol (RESP2) both ways, over bytes: commands out as arrays of bulk strings, replies in
/// parsed incrementally as the socket delivers them.
public enum RESP {
    /// `*N\r\n$len\r\narg\r\n…`: binary-safe, every argument with its length (see `RedisCommand`).
    public static func encode(_ arguments: [[UInt8]], into buffer: inout [UInt8]) {
        RedisCommand(arguments).write(to: &buffer)
    }

    public struct ProtocolError: Error, Equatable {
        public let message: String
    }

    /// Limits that keep a hostile or broken peer from making the gateway allocate without bound.
    static let maxBulkBytes = 64 * 1024 * 1024
    static let maxElements = 1_000_000
    static let maxDepth = 16

    /// One complete reply at the start of `bytes[from...]`, and where it ends; nil when more bytes are needed.
    public static func parse(_ bytes: [UInt8], from start: Int) throws(ProtocolError) -> (reply: RedisReply, end: Int)? {
        try parse(bytes, at: start, depth: 0)
    }

    private static func parse(_ bytes: [UInt8], at start: Int, depth: Int) throws(ProtocolError) -> (reply: RedisReply, end: Int)? {
        guard depth <= maxDepth else { throw ProtocolError(message: "replies nested too deep") }
        guard start < bytes.count, let (line, next) = lineEnd(bytes, from: start + 1) else { return nil }
        let text = bytes[(start + 1)..<line]
        switch bytes[start] {
        case UInt8(ascii: "+"): return (.status(String(decoding: text, as: UTF8.self)), next)
        case UInt8(ascii: "-"): return (.error(String(decoding: text, as: UTF8.self)), next)
        case UInt8(ascii: ":"):
            guard let value = decimal(text) else { throw ProtocolError(message: "bad integer") }
            return (.integer(value), next)
        case UInt8(ascii: "$"):
            guard let length = decimal(text).map(Int.init), length >= -1, length <= maxBulkBytes else {
                throw ProtocolError(message: "bad bulk length")
            }
            if length == -1 { return (.null, next) }
            guard bytes.count >= next + length + 2 else { return nil }
            guard bytes[next + length] == 0x0D, bytes[next + length + 1] == 0x0A else { throw ProtocolError(message: "bulk not followed by CRLF") }
            return (.string(Array(bytes[next..<(next + length)])), next + length + 2)
        case UInt8(ascii: "*"):
            guard let count = decimal(text).map(Int.init), count >= -1, count <= maxElements else {
                throw ProtocolError(message: "bad array length")
            }
            if count == -1 { return (.null, next) }
            var items: [RedisReply] = []
            items.reserveCapacity(count)
            var position = next
            for _ in 0..<count {
                guard let (item, end) = try parse(bytes, at: position, depth: depth + 1) else { return nil }
                items.append(item)
                position = end
            }
            return (.array(items), position)
        default:
            throw ProtocolError(message: "unknown reply type byte \(bytes[start])")
        }
    }

    /// An optionally signed decimal, read as Int64(String) reads one but without making the String (a String
    /// and a parse per length line were most of a short reply's cost).
    public static func decimal(_ text: ArraySlice<UInt8>) -> Int64? {
        var digits = text
        let negative = digits.first == UInt8(ascii: "-")
        if negative || digits.first == UInt8(ascii: "+") { digits = digits.dropFirst() }
        guard !digits.isEmpty else { return nil }
        var value: Int64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (shifted, overflow) = value.multipliedReportingOverflow(by: 10)
            let digit = Int64(byte - UInt8(ascii: "0"))
            let (next, carry) = negative ? shifted.subtractingReportingOverflow(digit) : shifted.addingReportingOverflow(digit)
            guard !overflow, !carry else { return nil }
            value = next
        }
        return value
    }

    /// The index of the CR of the first CRLF from `from`, and the index after the LF.
    private static func lineEnd(_ bytes: [UInt8], from: Int) -> (Int, Int)? {
        var index = from
        while index + 1 < bytes.count {
            if bytes[index] == 0x0D && bytes[index + 1] == 0x0A { return (index, index + 2) }
            index += 1
        }
        return nil
    }
}
