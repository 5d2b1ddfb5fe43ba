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

    /// A command's start, `*N` for `count` arguments, appended to `buffer` with room for `room` bytes more.
    fileprivate static func count(_ count: Int, room: Int, to bytes: inout [UInt8]) {
        bytes.append(addingCapacity: framing + room) { out in
            out.withUnsafeMutableBufferPointer { buffer, initialized in
                line(UInt8(ascii: "*"), UInt(count), into: buffer, at: &initialized)
            }
        }
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

/// One command in RESP (`*N\r\n` and its arguments), written where it goes (the connection's outgoing
/// buffer) without being joined first; sent again unchanged after a Cluster redirect.
public struct RedisCommand: Sendable, Equatable {
    private let start: RedisArguments
    private let rest: RedisArguments

    /// `start`'s arguments then `rest`'s (a script's EVALSHA and digest, then its keys and arguments).
    public init(_ start: RedisArguments, _ rest: RedisArguments = RedisArguments(capacity: 0)) {
        self.start = start
        self.rest = rest
    }

    public init(_ arguments: [[UInt8]]) {
        var start = RedisArguments(capacity: arguments.reduce(0) { $0 + $1.count + 16 })
        for argument in arguments { start.append(argument) }
        self.init(start)
    }

    /// Appends the command's bytes to `buffer`.
    public func write(to buffer: inout [UInt8]) {
        RedisArguments.count(start.count + rest.count, room: start.bytes.count + rest.bytes.count, to: &buffer)
        buffer += start.bytes
        buffer += rest.bytes
    }

    public var bytes: [UInt8] {
        var bytes: [UInt8] = []
        write(to: &bytes)
        return bytes
    }

    public static func == (left: RedisCommand, right: RedisCommand) -> Bool { left.bytes == right.bytes }
}
