import Glibc
import Upstream

/// What a byte of a request head may be, one table lookup per byte, and the searches the head check runs.
/// A chain of compares per byte (and a line-feed search a byte at a time) made the head check cost about
/// 20 instructions a byte; App Attest requests carry heads of 600 bytes and more.
enum HeadBytes {
    struct Class: OptionSet {
        let rawValue: UInt8
        /// tchar (RFC 9110 §5.6.2): methods and field names.
        static let token = Class(rawValue: 1)
        /// A field value's bytes (RFC 9110 §5.5): visible ASCII, space, tab and obs-text (0x80–0xFF).
        static let fieldValue = Class(rawValue: 2)
        /// Visible ASCII (0x21–0x7E): a request target's bytes.
        static let visible = Class(rawValue: 4)
        /// unreserved / sub-delims (RFC 3986): a Host's reg-name.
        static let regName = Class(rawValue: 8)
        static let hexDigit = Class(rawValue: 16)
        static let digit = Class(rawValue: 32)
    }

    /// Each byte's classes (the sum of their raw values: token 1, fieldValue 2, visible 4, regName 8, hexDigit 16, digit 32),
    /// as a literal: a computed table is initialised lazily, and the check of that cost a call per byte.
    /// HeadBytesTests check every entry against the RFC definitions.
    private static let table: [UInt8] = [
         0,  0,  0,  0,  0,  0,  0,  0,  0,  2,  0,  0,  0,  0,  0,  0,  // 0x00
         0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  // 0x10
         2, 15,  6,  7, 15,  7, 15, 15, 14, 14, 15, 15, 14, 15, 15,  6,  // 0x20
        63, 63, 63, 63, 63, 63, 63, 63, 63, 63,  6, 14,  6, 14,  6,  6,  // 0x30
         6, 31, 31, 31, 31, 31, 31, 15, 15, 15, 15, 15, 15, 15, 15, 15,  // 0x40
        15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  6,  6,  6,  7, 15,  // 0x50
         7, 31, 31, 31, 31, 31, 31, 15, 15, 15, 15, 15, 15, 15, 15, 15,  // 0x60
        15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  6,  7,  6, 15,  0,  // 0x70
         2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  // 0x80
         2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  // 0x90
         2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  // 0xA0
         2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  // 0xB0
         2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  // 0xC0
         2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  // 0xD0
         2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  // 0xE0
         2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  // 0xF0
    ]

    static func byte(_ byte: UInt8, is byteClass: Class) -> Bool {
        table[Int(byte)] & byteClass.rawValue != 0
    }

    /// Whether every byte of `range` is of `byteClass`.
    static func all(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, are byteClass: Class) -> Bool {
        var index = range.lowerBound
        while index < range.upperBound, byte(bytes[index], is: byteClass) { index += 1 }
        return index == range.upperBound
    }

    /// Whether every byte of `range` may be in a field value: sixteen at a time (two words), a block holding no byte
    /// under 0x20 and no DEL (the only bytes a value may not hold, and tab) being accepted whole, any other checked
    /// byte by byte. The last block ends where the range does, overlapping the one before (or the bytes before the
    /// range: a flagged byte there only costs the byte-by-byte check of the range's tail). (Swift's SIMD16 compares
    /// compile to a loop over the lanes here: plain words are faster.)
    static func allFieldValue(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        var index = range.lowerBound
        while range.upperBound &- index >= 16 {
            if mayHoldControl(bytes, at: index), !all(bytes, index..<(index &+ 16), are: .fieldValue) { return false }
            index &+= 16
        }
        if index < range.upperBound, range.upperBound >= 16, !mayHoldControl(bytes, at: range.upperBound &- 16) { return true }
        return all(bytes, index..<range.upperBound, are: .fieldValue)
    }

    /// False only when none of the sixteen bytes at `offset` is under 0x20 or 0x7F. The borrow tests are exact in
    /// saying whether a word holds such a byte (a borrow only starts at one); which bytes they flag past the first
    /// does not matter here.
    private static func mayHoldControl(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        ByteWord.controls(bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            | ByteWord.controls(bytes.loadUnaligned(fromByteOffset: offset &+ 8, as: UInt64.self)) != 0
    }

    /// Where `target` first occurs in `range` (glibc's memchr is vectorised).
    static func find(_ target: UInt8, in bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int? {
        guard !range.isEmpty, let base = bytes.baseAddress,
              let found = memchr(base + range.lowerBound, Int32(target), range.count) else { return nil }
        return UnsafeRawPointer(found) - base
    }
}
