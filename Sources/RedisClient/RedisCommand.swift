/// Arguments of a command in RESP (`$len\r\n…\r\n` each), written in place as they are added: no array of
/// arguments, no String per number (a script call built from `[[UInt8]]` and `String(Int)` arguments cost
/// thousands of instructions a request in allocations). Each argument is one append into capacity
/// reserved for it, written as `RESP.encode` writes (an `Array.append` per byte cost ~700 instructions a
/// key name; an array of arguments encoded in one pass, twice as much as this).
public struct RedisArguments: Sendable, Equatable {
    public private(set) var bytes: [UInt8] = []
    public private(set) var count = 0

    /// `capacity`: the bytes expected, so the buffer is allocated once.
    public init(capacity: Int = 64) {
        bytes.reserveCapacity(capacity)
    }

    public mutating func append(_ argument: [UInt8]) {
        append(length: argument.count) { buffer, at in
            argument.withUnsafeBufferPointer { Self.copy($0, into: buffer, at: &at) }
        }
    }

    /// One argument made of parts (a key's common start and its own end), without joining them first.
    public mutating func append(_ start: [UInt8], _ middle: String, _ last: String = "") {
        var middle = middle, last = last
        append(length: start.count + middle.utf8.count + last.utf8.count) { buffer, at in
            start.withUnsafeBufferPointer { Self.copy($0, into: buffer, at: &at) }
            middle.withUTF8 { Self.copy($0, into: buffer, at: &at) }
            last.withUTF8 { Self.copy($0, into: buffer, at: &at) }
        }
    }

    /// A decimal argument.
    public mutating func append(_ value: Int) {
        append(length: Self.digits(value.magnitude) + (value < 0 ? 1 : 0)) { buffer, at in
            if value < 0 {
                buffer[at] = UInt8(ascii: "-")
                at += 1
            }
            Self.decimal(value.magnitude, into: buffer, at: &at)
        }
    }

    /// One argument of `length` bytes that `content` writes: its `$length` line, the bytes, CRLF, with one
    /// capacity check.
    private mutating func append(length: Int, _ content: (UnsafeMutableBufferPointer<UInt8>, inout Int) -> Void) {
        count += 1
        bytes.append(addingCapacity: length + Self.framing) { out in
            out.withUnsafeMutableBufferPointer { buffer, initialized in
                var at = initialized
                Self.line(UInt8(ascii: "$"), UInt(length), into: buffer, at: &at)
                content(buffer, &at)
                Self.end(into: buffer, at: &at)
                initialized = at
            }
        }
    }

    /// Room for a `$len` line (20 digits at most) and the CRLF after the argument.
    private static let framing = 25

    /// A command's start, `*N` for `count` arguments, in a buffer with room for `room` bytes more.
    fileprivate static func command(count: Int, room: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(framing + room)
        bytes.append(addingCapacity: framing) { out in
            out.withUnsafeMutableBufferPointer { buffer, initialized in
                line(UInt8(ascii: "*"), UInt(count), into: buffer, at: &initialized)
            }
        }
        return bytes
    }

    private static func line(_ marker: UInt8, _ value: UInt, into buffer: UnsafeMutableBufferPointer<UInt8>, at: inout Int) {
        buffer[at] = marker
        at += 1
        decimal(value, into: buffer, at: &at)
        end(into: buffer, at: &at)
    }

    private static func end(into buffer: UnsafeMutableBufferPointer<UInt8>, at: inout Int) {
        buffer[at] = 0x0D
        buffer[at + 1] = 0x0A
        at += 2
    }

    /// The digits, written from the last (divisions by the constant 10 only).
    private static func decimal(_ value: UInt, into buffer: UnsafeMutableBufferPointer<UInt8>, at: inout Int) {
        at += digits(value)
        var index = at
        var rest = value
        repeat {
            index -= 1
            buffer[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
        } while rest > 0
    }

    private static func copy(_ bytes: UnsafeBufferPointer<UInt8>, into buffer: UnsafeMutableBufferPointer<UInt8>, at: inout Int) {
        _ = UnsafeMutableBufferPointer(rebasing: buffer[at..<(at + bytes.count)]).initialize(fromContentsOf: bytes)
        at += bytes.count
    }

    private static func digits(_ value: UInt) -> Int {
        var count = 1
        var rest = value
        while rest >= 10 {
            rest /= 10
            count += 1
        }
        return count
    }
}

/// One command in RESP (`*N\r\n` and its arguments), as it goes on the wire; sent again unchanged after a
/// Cluster redirect.
public struct RedisCommand: Sendable, Equatable {
    public let bytes: [UInt8]

    /// `start`'s arguments then `rest`'s, in one buffer (a script's EVALSHA and digest, then its keys and
    /// arguments).
    public init(_ start: RedisArguments, _ rest: RedisArguments = RedisArguments(capacity: 0)) {
        var bytes = RedisArguments.command(count: start.count + rest.count, room: start.bytes.count + rest.bytes.count)
        bytes += start.bytes
        bytes += rest.bytes
        self.bytes = bytes
    }

    public init(_ arguments: [[UInt8]]) {
        var bytes: [UInt8] = []
        RESP.encode(arguments, into: &bytes)
        self.bytes = bytes
    }
}
