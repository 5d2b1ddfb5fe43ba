/// One JSON object built field by field, in the order written: the request log's encoder. Foundation's
/// JSONSerialization (boxing, dynamic casts, sorted keys) cost a third of a pass-through request.
/// Keys are literals that need no escaping: copied as they are. Each field is written with one append, into
/// capacity reserved for its longest form, through an `OutputSpan` (bounds-checked), runs of bytes copied at
/// once: an `Array.append` per piece (comma, quotes, key, colon, value) was 6 % of a relayed request.
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

    /// `"time":…,"level":…,"event":…`, what every line of the log starts with, in one append; the time is
    /// now, RFC 3339 UTC with milliseconds.
    @inline(__always) mutating func opening(clock: inout LogClock, level: String, event: String) {
        let first = isFirst
        let longest = 3 * JSONLine.keyRoom("level") + LogClock.width + 2 + JSONLine.quotedRoom(level) + JSONLine.quotedRoom(event)
        bytes.append(addingCapacity: longest) { out in
            JSONLine.key("time", first: first, to: &out)
            out.append(UInt8(ascii: "\""))
            clock.write(to: &out)
            out.append(UInt8(ascii: "\""))
            JSONLine.key("level", first: false, to: &out)
            JSONLine.quoted(level, to: &out)
            JSONLine.key("event", first: false, to: &out)
            JSONLine.quoted(event, to: &out)
        }
    }

    @inline(__always) mutating func string(_ key: StaticString, _ value: String) {
        let first = isFirst
        bytes.append(addingCapacity: JSONLine.keyRoom(key) + JSONLine.quotedRoom(value)) { out in
            JSONLine.key(key, first: first, to: &out)
            JSONLine.quoted(value, to: &out)
        }
    }

    @inline(__always) mutating func int(_ key: StaticString, _ value: Int) {
        let first = isFirst
        bytes.append(addingCapacity: JSONLine.keyRoom(key) + 20) { out in
            JSONLine.key(key, first: first, to: &out)
            if value < 0 { out.append(UInt8(ascii: "-")) }
            JSONLine.digits(value.magnitude, to: &out)
        }
    }

    /// Milliseconds and the like, rounded to three decimals and written as Swift prints that Double ("0.25",
    /// "12.0"): digit by digit for the usual magnitudes (a String per number was 2 % of a relayed request).
    mutating func number(_ key: StaticString, _ value: Double) {
        let first = isFirst
        let thousandths = (value * 1000).rounded()
        guard thousandths.sign == .plus, thousandths < 1e15 else {  // -0.0 too prints its sign
            let rounded = thousandths / 1000
            let text = rounded.isFinite ? String(rounded) : "null"
            return bytes.append(addingCapacity: JSONLine.keyRoom(key) + text.utf8.count) { out in
                JSONLine.key(key, first: first, to: &out)
                text.utf8.forEach { out.append($0) }
            }
        }
        bytes.append(addingCapacity: JSONLine.keyRoom(key) + 20) { out in
            JSONLine.key(key, first: first, to: &out)
            let whole = UInt(thousandths)
            JSONLine.digits(whole / 1000, to: &out)
            out.append(UInt8(ascii: "."))
            let fraction = whole % 1000  // three digits, trailing zeros dropped, one kept
            out.append(UInt8(ascii: "0") + UInt8(fraction / 100))
            if fraction % 100 != 0 { out.append(UInt8(ascii: "0") + UInt8(fraction / 10 % 10)) }
            if fraction % 10 != 0 { out.append(UInt8(ascii: "0") + UInt8(fraction % 10)) }
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

    /// No field written yet.
    private var isFirst: Bool { bytes.count == start + 1 }

    /// Room for `,"key":`.
    @inline(__always) private static func keyRoom(_ key: StaticString) -> Int { key.utf8CodeUnitCount + 4 }

    /// `"key":`, after a comma unless first.
    @inline(__always) private static func key(_ key: StaticString, first: Bool, to out: inout OutputSpan<UInt8>) {
        if !first { out.append(UInt8(ascii: ",")) }
        out.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { out.append(copying: $0) }
        out.append(UInt8(ascii: "\""))
        out.append(UInt8(ascii: ":"))
    }

    /// Room for `value` quoted: every byte escaped as \u00XX is the longest form (utf8.count is stored in a
    /// native string).
    @inline(__always) private static func quotedRoom(_ value: String) -> Int { value.utf8.count * 6 + 2 }

    @inline(__always) private static func quoted(_ value: String, to out: inout OutputSpan<UInt8>) {
        out.append(UInt8(ascii: "\""))
        let copied: Void? = value.utf8.withContiguousStorageIfAvailable { escaping($0, to: &out) }
        if copied == nil { Array(value.utf8).withUnsafeBufferPointer { escaping($0, to: &out) } }
        out.append(UInt8(ascii: "\""))
    }

    /// The magnitude's decimal digits, zero-padded to `width`.
    @inline(__always) static func digits(_ value: UInt, width: Int = 1, to out: inout OutputSpan<UInt8>) {
        var divisor: UInt = 1, places = 1
        let tenth = value / 10  // divisor <= tenth: another digit (value / divisor >= 10, without a division)
        while divisor <= tenth || places < width { divisor *= 10; places += 1 }
        while divisor > 0 {
            out.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
            divisor /= 10
        }
    }

    /// RFC 8259 string content: quote, backslash and control characters escaped; the rest is UTF-8 as is.
    /// Runs of bytes that need no escape (usually the whole value) are copied at once; the leading run is
    /// found eight bytes at a time (a byte-by-byte test was a tenth of the line).
    @inline(__always) private static func escaping(_ utf8: UnsafeBufferPointer<UInt8>, to out: inout OutputSpan<UInt8>) {
        var run = 0
        for index in utf8.indices[cleanPrefix(of: utf8)...] {
            let byte = utf8[index]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
            out.append(copying: UnsafeBufferPointer(rebasing: utf8[run..<index]))
            run = index + 1
            out.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(byte)
            case UInt8(ascii: "\n"): out.append(UInt8(ascii: "n"))
            default:
                out.append(UInt8(ascii: "u"))
                out.append(UInt8(ascii: "0"))
                out.append(UInt8(ascii: "0"))
                out.append(hexDigit(byte >> 4))
                out.append(hexDigit(byte & 0x0F))
            }
        }
        out.append(copying: UnsafeBufferPointer(rebasing: utf8[run...]))
    }

    /// How many leading bytes, in whole words of eight, surely need no escape.
    @inline(__always) private static func cleanPrefix(of utf8: UnsafeBufferPointer<UInt8>) -> Int {
        let bytes = UnsafeRawBufferPointer(utf8)
        var offset = 0
        while offset + 8 <= bytes.count, !mayNeedEscape(bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) { offset += 8 }
        return offset
    }

    /// Whether any byte of `word` is below 0x20, a quote or a backslash (the zero-byte test: a borrow
    /// can blur which byte it was, never whether there is one).
    @inline(__always) static func mayNeedEscape(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        func hasZeroByte(_ word: UInt64) -> Bool { (word &- ones) & ~word & highs != 0 }
        let belowSpace = (word &- ones &* 0x20) & ~word & highs != 0
        return belowSpace || hasZeroByte(word ^ (ones &* UInt64(UInt8(ascii: "\""))))
            || hasZeroByte(word ^ (ones &* UInt64(UInt8(ascii: "\\"))))
    }

    @inline(__always) private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}

extension OutputSpan<UInt8> {
    /// Appends `bytes` with one copy (the span has no bulk append of its own); traps, as `append` does,
    /// if they do not fit.
    @inline(__always) mutating func append(copying bytes: UnsafeBufferPointer<UInt8>) {
        withUnsafeMutableBufferPointer { buffer, initialized in
            _ = UnsafeMutableBufferPointer(rebasing: buffer[initialized...]).initialize(fromContentsOf: bytes)
            initialized += bytes.count
        }
    }
}
