/// One JSON object built field by field, in the order written: the request log's encoder. Foundation's
/// JSONSerialization (boxing, dynamic casts, sorted keys) cost a third of a pass-through request.
struct JSONLine {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]

    init() {
        bytes.reserveCapacity(512)
    }

    mutating func string(_ key: String, _ value: String) {
        self.key(key)
        quoted(value)
    }

    mutating func int(_ key: String, _ value: Int) {
        self.key(key)
        bytes.append(contentsOf: String(value).utf8)
    }

    /// Milliseconds and the like, rounded to three decimals.
    mutating func number(_ key: String, _ value: Double) {
        self.key(key)
        let rounded = (value * 1000).rounded() / 1000
        bytes.append(contentsOf: (rounded.isFinite ? String(rounded) : "null").utf8)
    }

    /// The object, closed, with a newline: one log line.
    var line: [UInt8] {
        var line = bytes
        line.append(UInt8(ascii: "}"))
        line.append(UInt8(ascii: "\n"))
        return line
    }

    /// Appends `other`'s fields after this object's own.
    mutating func merge(_ other: JSONLine) {
        guard other.bytes.count > 1 else { return }
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        bytes.append(contentsOf: other.bytes.dropFirst())
    }

    private mutating func key(_ key: String) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        quoted(key)
        bytes.append(UInt8(ascii: ":"))
    }

    /// RFC 8259 string: quote, backslash and control characters escaped; the rest is UTF-8 as is.
    private mutating func quoted(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        // Most values need no escape: copied whole (byte-by-byte appends were 5 % of a request).
        let plain = text.utf8.withContiguousStorageIfAvailable { utf8 -> Bool in
            guard !utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if plain == true {
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case UInt8(ascii: "\n"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
