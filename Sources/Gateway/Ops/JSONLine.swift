import Upstream

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
    /// Constant fields already in JSON (`"a":"b","c":1`), copied as they are: one copy for what would be
    /// several fields.
    mutating func fields(_ json: StaticString)
}

/// One JSON object per line, the request log's encoder. Foundation's JSONSerialization (boxing, dynamic
/// casts, sorted keys) cost a third of a pass-through request. Keys are literals that need no escaping:
/// copied as they are. The whole line is one append into capacity reserved for its longest form, written
/// through an `OutputSpan`, a whole field (`,"key":value`) at a time: one capacity check per field, then
/// its bytes stored in place (a bounds-checked append per byte cost the line ~1,300 instructions more).
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

        @inline(__always) mutating func string(_ key: StaticString, _ value: String) { longest += keyRoom(key) + quotedRoom(value.utf8.count) }
        @inline(__always) mutating func int(_ key: StaticString, _ value: Int) { longest += keyRoom(key) + intRoom }
        @inline(__always) mutating func number(_ key: StaticString, _ value: Double) { longest += keyRoom(key) + numberRoom }
        @inline(__always) mutating func time(_ key: StaticString, _ time: LogTime) { longest += keyRoom(key) + timeRoom }
        @inline(__always) mutating func fields(_ json: StaticString) { longest += json.utf8CodeUnitCount + 1 }
    }

    /// Room for `,"key":`.
    @inline(__always) static func keyRoom(_ key: StaticString) -> Int { key.utf8CodeUnitCount + 4 }

    /// Room for `count` bytes quoted: every byte escaped as \u00XX is the longest form (utf8.count is stored in
    /// a native string).
    @inline(__always) static func quotedRoom(_ count: Int) -> Int { count * 6 + 2 }

    /// A sign and 19 digits.
    static let intRoom = 20
    /// Up to 15 digits and a point, or how Swift prints any other Double (at most 24 bytes).
    static let numberRoom = 32
    static let timeRoom = LogClock.width + 2

    /// `bytes` quoted as RFC 8259 string content at `out`: quote, backslash and control characters escaped; the
    /// rest is UTF-8 as is. Scanned eight bytes at a time first: a value that needs no escape (nearly every
    /// one) is copied at once. Returns the bytes written (at most `quotedRoom(bytes.count)`).
    @inline(__always) static func quoted(_ bytes: UnsafeBufferPointer<UInt8>, at out: UnsafeMutablePointer<UInt8>) -> Int {
        out[0] = UInt8(ascii: "\"")
        var end = out + 1
        if let start = bytes.baseAddress, !needsEscape(UnsafeRawBufferPointer(bytes)) {
            end.initialize(from: start, count: bytes.count)
            end += bytes.count
        } else {
            for byte in bytes { end += escaped(byte, at: end) }
        }
        end[0] = UInt8(ascii: "\"")
        return end + 1 - out
    }

    /// `byte` at `out`, escaped if it must be; returns the bytes written.
    @inline(__always) private static func escaped(_ byte: UInt8, at out: UnsafeMutablePointer<UInt8>) -> Int {
        guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else {
            out[0] = byte
            return 1
        }
        out[0] = UInt8(ascii: "\\")
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): out[1] = byte
        case UInt8(ascii: "\n"): out[1] = UInt8(ascii: "n")
        default:
            out[1] = UInt8(ascii: "u")
            out[2] = UInt8(ascii: "0")
            out[3] = UInt8(ascii: "0")
            out[4] = hexDigit(byte >> 4)
            out[5] = hexDigit(byte & 0x0F)
            return 6
        }
        return 2
    }

    /// Whether any byte needs an escape, tested as words: whole ones from the start, the last overlapping the
    /// one before; under eight bytes, one word of overlapping halves (no byte-by-byte tail).
    @inline(__always) static func needsEscape(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let count = bytes.count
        switch count {
        case 0: return false
        case 1: return mayNeedEscape(UInt64(bytes[0]) &* ByteWord.ones)
        case 2..<4:
            let half = UInt64(bytes.loadUnaligned(as: UInt16.self)) | UInt64(bytes.loadUnaligned(fromByteOffset: count - 2, as: UInt16.self)) << 16
            return mayNeedEscape(half | half << 32)
        case 4..<8:
            return mayNeedEscape(UInt64(bytes.loadUnaligned(as: UInt32.self))
                                 | UInt64(bytes.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)) << 32)
        default:
            var offset = 0
            while offset < count - 8 {
                if mayNeedEscape(bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) { return true }
                offset += 8
            }
            return mayNeedEscape(bytes.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self))
        }
    }

    /// Whether any byte of `word` is below 0x20, a quote or a backslash. The three tests' flags are joined
    /// before one branch: a word is tested for every value the log writes.
    @inline(__always) static func mayNeedEscape(_ word: UInt64) -> Bool {
        ByteWord.below(0x20, word) | ByteWord.equal(UInt8(ascii: "\""), word) | ByteWord.equal(UInt8(ascii: "\\"), word) != 0
    }

    /// `value`'s decimal digits at `out`; returns how many.
    @inline(__always) static func digits(_ value: UInt, at out: UnsafeMutablePointer<UInt8>) -> Int {
        var count = 1, rest = value / 10
        while rest > 0 { count += 1; rest /= 10 }
        var left = value
        for place in stride(from: count - 1, through: 0, by: -1) {
            out[place] = UInt8(ascii: "0") + UInt8(left % 10)
            left /= 10
        }
        return count
    }

    /// `value` at `out` ("-" and its magnitude's digits); returns the bytes written (at most `intRoom`).
    @inline(__always) static func decimal(_ value: Int, at out: UnsafeMutablePointer<UInt8>) -> Int {
        guard value < 0 else { return digits(value.magnitude, at: out) }
        out[0] = UInt8(ascii: "-")
        return 1 + digits(value.magnitude, at: out + 1)
    }

    /// `value` rounded to three decimals, written as Swift prints that Double ("0.25", "12.0"), digit by digit
    /// for the usual magnitudes (a String per number was 2 % of a relayed request); returns the bytes written
    /// (at most `numberRoom`).
    @inline(__always) static func number(_ value: Double, at out: UnsafeMutablePointer<UInt8>) -> Int {
        let thousandths = (value * 1000).rounded()
        guard thousandths.sign == .plus, thousandths < 1e15 else {  // -0.0 too prints its sign
            let rounded = thousandths / 1000
            var written = 0
            for byte in (rounded.isFinite ? String(rounded) : "null").utf8 {
                out[written] = byte
                written += 1
            }
            return written
        }
        let whole = UInt(thousandths)
        var end = out + digits(whole / 1000, at: out)
        end[0] = UInt8(ascii: ".")
        let fraction = whole % 1000  // three digits, trailing zeros dropped, one kept
        end[1] = UInt8(ascii: "0") + UInt8(fraction / 100)
        end += 2
        if fraction % 100 != 0 {
            end[0] = UInt8(ascii: "0") + UInt8(fraction / 10 % 10)
            end += 1
            if fraction % 10 != 0 {
                end[0] = UInt8(ascii: "0") + UInt8(fraction % 10)
                end += 1
            }
        }
        return end - out
    }

    @inline(__always) private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}

extension OutputSpan<UInt8> {
    /// Appends `,"key":` (no comma first in the object) and the value `body` writes at the address it is given
    /// (returning how many bytes it wrote, at most `room`), after one check that all of it fits: traps, as
    /// `append` does, if not.
    @inline(__always) mutating func field(_ key: StaticString, room: Int, _ body: (UnsafeMutablePointer<UInt8>) -> Int) {
        pieces(room: JSONLine.keyRoom(key) + room) { end in
            end[0] = UInt8(ascii: "\"")
            (end + 1).initialize(from: key.utf8Start, count: key.utf8CodeUnitCount)
            end += key.utf8CodeUnitCount + 1
            end[0] = UInt8(ascii: "\"")
            end[1] = UInt8(ascii: ":")
            end += 2
            end += body(end)
        }
    }

    /// Appends a comma (not first in the object) and what `body` writes from the address it moves on, after one
    /// check that `room` bytes fit: traps, as `append` does, if not.
    @inline(__always) private mutating func pieces(room: Int, _ body: (inout UnsafeMutablePointer<UInt8>) -> Void) {
        withUnsafeMutableBufferPointer { buffer, initialized in
            precondition(buffer.count - initialized >= room, "JSONLine: a field past its measured room")
            var end = buffer.baseAddress! + initialized
            if initialized > 0, end[-1] != UInt8(ascii: "{") {
                end[0] = UInt8(ascii: ",")
                end += 1
            }
            body(&end)
            initialized = end - buffer.baseAddress!
        }
    }
}

extension OutputSpan: JSONLineWriter where Element == UInt8 {
    @inline(__always) mutating func string(_ key: StaticString, _ value: String) {
        let written: Void? = value.utf8.withContiguousStorageIfAvailable { bytes in
            field(key, room: JSONLine.quotedRoom(bytes.count)) { JSONLine.quoted(bytes, at: $0) }
        }
        if written == nil {  // a bridged or shared string: its bytes copied out first
            Array(value.utf8).withUnsafeBufferPointer { bytes in
                field(key, room: JSONLine.quotedRoom(bytes.count)) { JSONLine.quoted(bytes, at: $0) }
            }
        }
    }

    @inline(__always) mutating func int(_ key: StaticString, _ value: Int) {
        field(key, room: JSONLine.intRoom) { JSONLine.decimal(value, at: $0) }
    }

    @inline(__always) mutating func number(_ key: StaticString, _ value: Double) {
        field(key, room: JSONLine.numberRoom) { JSONLine.number(value, at: $0) }
    }

    @inline(__always) mutating func fields(_ json: StaticString) {
        pieces(room: json.utf8CodeUnitCount + 1) { end in
            end.initialize(from: json.utf8Start, count: json.utf8CodeUnitCount)
            end += json.utf8CodeUnitCount
        }
    }

    @inline(__always) mutating func time(_ key: StaticString, _ time: LogTime) {
        field(key, room: JSONLine.timeRoom) { out in
            out[0] = UInt8(ascii: "\"")
            let count = time.write(at: out + 1)
            out[count + 1] = UInt8(ascii: "\"")
            return count + 2
        }
    }
}
