/// Arguments of a command in RESP (`$len\r\n…\r\n` each), written in place as they are added: no array of
/// arguments, no String per number (a script call built from `[[UInt8]]` and `String(Int)` arguments cost
/// thousands of instructions a request in allocations).
public struct RedisArguments: Sendable, Equatable {
    public fileprivate(set) var bytes: [UInt8] = []
    public private(set) var count = 0

    /// `capacity`: the bytes expected, so the buffer is allocated once.
    public init(capacity: Int = 64) {
        bytes.reserveCapacity(capacity)
    }

    public mutating func append(_ argument: [UInt8]) {
        begin(argument.count)
        bytes += argument
        end()
    }

    /// One argument made of parts (a key's common start and its own end), without joining them first.
    public mutating func append(_ start: [UInt8], _ middle: String, _ last: String = "") {
        begin(start.count + middle.utf8.count + last.utf8.count)
        bytes += start
        bytes += middle.utf8
        bytes += last.utf8
        end()
    }

    /// A decimal argument, written digit by digit.
    public mutating func append(_ value: Int) {
        begin(Self.digits(value.magnitude) + (value < 0 ? 1 : 0))
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        decimal(value.magnitude)
        end()
    }

    fileprivate mutating func line(_ marker: UInt8, _ value: Int) {
        bytes.append(marker)
        decimal(UInt(value))
        end()
    }

    private mutating func begin(_ length: Int) {
        count += 1
        line(UInt8(ascii: "$"), length)
    }

    private mutating func end() {
        bytes.append(0x0D)
        bytes.append(0x0A)
    }

    private mutating func decimal(_ value: UInt) {
        var divisor: UInt = 1
        while value / divisor >= 10 { divisor *= 10 }
        repeat {
            bytes.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
            divisor /= 10
        } while divisor > 0
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
        var command = RedisArguments(capacity: 16 + start.bytes.count + rest.bytes.count)
        command.line(UInt8(ascii: "*"), start.count + rest.count)
        command.bytes += start.bytes
        command.bytes += rest.bytes
        bytes = command.bytes
    }

    public init(_ arguments: [[UInt8]]) {
        var bytes: [UInt8] = []
        RESP.encode(arguments, into: &bytes)
        self.bytes = bytes
    }
}
