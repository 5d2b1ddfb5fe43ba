/// One JSON object built field by field, in the order written: the request log's encoder. Foundation's
/// JSONSerialization (boxing, dynamic casts, sorted keys) cost a third of a pass-through request.
/// Keys are literals that need no escaping: copied as they are.
struct JSONLine {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]
    /// Where this object's "{" is in `bytes` (after the lines of a buffer it continues).
    private var start = 0

    init() {
        bytes.reserveCapacity(512)
    }

    /// An object appended to `buffer`'s lines, built in its storage (no buffer of its own, no copy):
    /// `buffer` is empty until `close(into:)` gives it back with the line.
    init(continuing buffer: inout [UInt8]) {
        bytes = []
        swap(&bytes, &buffer)
        start = bytes.count
        bytes.append(UInt8(ascii: "{"))
    }

    /// The time now, RFC 3339 UTC with milliseconds, as a string value.
    mutating func timestamp(_ key: StaticString, clock: inout LogClock) {
        self.key(key)
        bytes.append(UInt8(ascii: "\""))
        clock.append(to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func string(_ key: StaticString, _ value: String) {
        self.key(key)
        quoted(value)
    }

    mutating func int(_ key: StaticString, _ value: Int) {
        self.key(key)
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        digits(value)
    }

    /// Milliseconds and the like, rounded to three decimals and written as Swift prints that Double ("0.25",
    /// "12.0"): digit by digit for the usual magnitudes (a String per number was 2 % of a relayed request).
    mutating func number(_ key: StaticString, _ value: Double) {
        self.key(key)
        let thousandths = (value * 1000).rounded()
        guard thousandths.sign == .plus, thousandths < 1e15 else {  // -0.0 too prints its sign
            let rounded = thousandths / 1000
            bytes.append(contentsOf: (rounded.isFinite ? String(rounded) : "null").utf8)
            return
        }
        let whole = Int(thousandths)
        digits(whole / 1000)
        bytes.append(UInt8(ascii: "."))
        var fraction = whole % 1000, width = 3  // trailing zeros dropped, one digit kept
        while width > 1 && fraction % 10 == 0 { fraction /= 10; width -= 1 }
        digits(fraction, width: width)
    }

    /// The magnitude's decimal digits, zero-padded to `width`.
    private mutating func digits(_ value: Int, width: Int = 1) {
        let magnitude = value.magnitude
        var divisor: UInt = 1, places = 1
        while magnitude / divisor >= 10 || places < width { divisor *= 10; places += 1 }
        while divisor > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(magnitude / divisor % 10))
            divisor /= 10
        }
    }

    /// The object, closed, with a newline: one log line.
    var line: [UInt8] {
        var line = self
        return line.close()
    }

    /// Closes the object and hands its bytes over (the line is not copied again).
    mutating func close() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        bytes.append(UInt8(ascii: "\n"))
        defer { bytes = [] }
        return bytes
    }

    /// Closes an object begun with `init(continuing:)` and gives the buffer back, the line appended.
    mutating func close(into buffer: inout [UInt8]) {
        bytes.append(UInt8(ascii: "}"))
        bytes.append(UInt8(ascii: "\n"))
        swap(&bytes, &buffer)
    }

    private mutating func key(_ key: StaticString) {
        if bytes.count > start + 1 { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    private mutating func quoted(_ text: String) {
        // Most values are native strings with their bytes at hand, and need no escape: copied whole
        // (byte-by-byte appends were 5 % of a request).
        let copied: Void? = text.utf8.withContiguousStorageIfAvailable { quoted(utf8: $0) }
        if copied == nil { quoted(utf8: Array(text.utf8)) }
    }

    /// RFC 8259 string: quote, backslash and control characters escaped; the rest is UTF-8 as is.
    private mutating func quoted(utf8: some Collection<UInt8>) {
        bytes.append(UInt8(ascii: "\""))
        if !utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            bytes.append(contentsOf: utf8)
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in utf8 {
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
