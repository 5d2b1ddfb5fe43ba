/// A JSON object's fields, in order: what a log line holds. Written twice, so writing must change nothing:
/// once measured, then into capacity reserved for their longest form.
protocol JSONFields {
    func write<Line: JSONLineWriter & ~Copyable & ~Escapable>(to line: inout Line)
}

/// Where a `JSONFields` writes: `JSONLine.Measure`, then the line's bytes (an `OutputSpan`).
protocol JSONLineWriter: ~Copyable, ~Escapable {
    mutating func string(_ key: StaticString, _ value: String)
    mutating func int(_ key: StaticString, _ value: Int)
    /// Milliseconds and the like, rounded to three decimals and written as Swift prints that Double ("0.25",
    /// "12.0").
    mutating func number(_ key: StaticString, _ value: Double)
    /// A time, RFC 3339 UTC with milliseconds, as a string value.
    mutating func time(_ key: StaticString, _ time: LogTime)
}

/// One JSON object per line, the request log's encoder. Foundation's JSONSerialization (boxing, dynamic
/// casts, sorted keys) cost a third of a pass-through request. Keys are literals that need no escaping:
/// copied as they are. The whole line is one append into capacity reserved for its longest form, written
/// through an `OutputSpan` (bounds-checked), runs of bytes copied at once: an `Array.append` per piece
/// (comma, quotes, key, colon, value) was 6 % of a relayed request, an append per field 3 %.
enum JSONLine {
    /// Appends `{fields}` and a newline to `buffer` (a buffer of lines, or an empty one for one line).
    static func append(_ fields: some JSONFields, to buffer: inout [UInt8]) {
        var measure = Measure()
        fields.write(to: &measure)
        buffer.append(addingCapacity: measure.longest + 3) { out in
            out.append(UInt8(ascii: "{"))
            fields.write(to: &out)
            out.append(UInt8(ascii: "}"))
            out.append(UInt8(ascii: "\n"))
        }
    }

    /// The most bytes fields can take.
    struct Measure: JSONLineWriter {
        private(set) var longest = 0

        mutating func string(_ key: StaticString, _ value: String) { longest += keyRoom(key) + quotedRoom(value) }
        mutating func int(_ key: StaticString, _ value: Int) { longest += keyRoom(key) + 20 }
        /// Up to 15 digits and a point, or how Swift prints any other Double (at most 24 bytes).
        mutating func number(_ key: StaticString, _ value: Double) { longest += keyRoom(key) + 32 }
        mutating func time(_ key: StaticString, _ time: LogTime) { longest += keyRoom(key) + LogClock.width + 2 }
    }

    /// Room for `,"key":`.
    @inline(__always) static func keyRoom(_ key: StaticString) -> Int { key.utf8CodeUnitCount + 4 }

    /// Room for `value` quoted: every byte escaped as \u00XX is the longest form (utf8.count is stored in a
    /// native string).
    @inline(__always) static func quotedRoom(_ value: String) -> Int { value.utf8.count * 6 + 2 }

    @inline(__always) static func quoted(_ value: String, to out: inout OutputSpan<UInt8>) {
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

extension OutputSpan: JSONLineWriter where Element == UInt8 {
    @inline(__always) mutating func string(_ key: StaticString, _ value: String) {
        self.key(key)
        JSONLine.quoted(value, to: &self)
    }

    @inline(__always) mutating func int(_ key: StaticString, _ value: Int) {
        self.key(key)
        if value < 0 { append(UInt8(ascii: "-")) }
        JSONLine.digits(value.magnitude, to: &self)
    }

    /// Digit by digit for the usual magnitudes (a String per number was 2 % of a relayed request).
    mutating func number(_ key: StaticString, _ value: Double) {
        self.key(key)
        let thousandths = (value * 1000).rounded()
        guard thousandths.sign == .plus, thousandths < 1e15 else {  // -0.0 too prints its sign
            let rounded = thousandths / 1000
            return (rounded.isFinite ? String(rounded) : "null").utf8.forEach { append($0) }
        }
        let whole = UInt(thousandths)
        JSONLine.digits(whole / 1000, to: &self)
        append(UInt8(ascii: "."))
        let fraction = whole % 1000  // three digits, trailing zeros dropped, one kept
        append(UInt8(ascii: "0") + UInt8(fraction / 100))
        if fraction % 100 != 0 { append(UInt8(ascii: "0") + UInt8(fraction / 10 % 10)) }
        if fraction % 10 != 0 { append(UInt8(ascii: "0") + UInt8(fraction % 10)) }
    }

    @inline(__always) mutating func time(_ key: StaticString, _ time: LogTime) {
        self.key(key)
        append(UInt8(ascii: "\""))
        time.write(to: &self)
        append(UInt8(ascii: "\""))
    }

    /// `"key":`, after a comma unless it opens the object.
    @inline(__always) private mutating func key(_ key: StaticString) {
        if span[count - 1] != UInt8(ascii: "{") { append(UInt8(ascii: ",")) }
        append(UInt8(ascii: "\""))
        key.withUTF8Buffer { append(copying: $0) }
        append(UInt8(ascii: "\""))
        append(UInt8(ascii: ":"))
    }
}
