/// Tests on eight bytes at once (a little-endian word read from a buffer), for scans of heads, values and log
/// fields: each gives the high bit of every byte that passes. They subtract, so a borrow may also mark bytes
/// after the first marked one, never before it and never in a word where no byte passes: exact for "is there
/// one" and "where is the first".
public enum ByteWord {
    @inlinable public static var ones: UInt64 { 0x0101_0101_0101_0101 }
    @inlinable public static var highs: UInt64 { 0x8080_8080_8080_8080 }

    /// Bytes below `limit` (at most 0x80).
    @inlinable @inline(__always)
    public static func below(_ limit: UInt8, _ word: UInt64) -> UInt64 {
        (word &- ones &* UInt64(limit)) & ~word & highs
    }

    /// Bytes equal to `byte`.
    @inlinable @inline(__always)
    public static func equal(_ byte: UInt8, _ word: UInt64) -> UInt64 {
        below(1, word ^ (ones &* UInt64(byte)))
    }

    /// Control bytes: below 0x20, or DEL (obs-text, 0x80 and up, is not).
    @inlinable @inline(__always)
    public static func controls(_ word: UInt64) -> UInt64 {
        below(0x20, word) | equal(0x7F, word)
    }

    /// The first byte from `start` that `marks` marks, read eight at a time while whole words fit; when none of
    /// those is marked, where the bytes left over start (the caller reads them one by one).
    @inlinable @inline(__always)
    public static func firstMarked(in bytes: UnsafeRawBufferPointer, from start: Int, by marks: (UInt64) -> UInt64) -> Int {
        var index = start
        while index + 8 <= bytes.count {
            let marked = marks(bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            if marked != 0 { return index + marked.trailingZeroBitCount >> 3 }
            index += 8
        }
        return index
    }
}
