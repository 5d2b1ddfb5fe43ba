import RedisClient
import XCTest

/// The protocol codec on its own: commands out, replies in, whole or in pieces, and hostile input refused.
final class RESPTests: XCTestCase {
    func testCommandsAreBinarySafeArraysOfBulkStrings() {
        var buffer: [UInt8] = []
        RESP.encode([Array("SET".utf8), [0, 13, 10, 255]], into: &buffer)
        XCTAssertEqual(buffer, Array("*2\r\n$3\r\nSET\r\n$4\r\n".utf8) + [0, 13, 10, 255] + Array("\r\n".utf8))
        // Lengths of every width, and an empty argument.
        for length in [0, 9, 10, 99, 100, 1_000, 65_536] {
            var encoded: [UInt8] = [1]
            RESP.encode(Array(repeating: [UInt8](repeating: 7, count: length), count: 12), into: &encoded)
            let head = Array("*12\r\n$\(length)\r\n".utf8)
            XCTAssertEqual(Array(encoded[1..<(1 + head.count)]), head, "length \(length)")
            XCTAssertEqual(encoded.count, 1 + 5 + 12 * (String(length).count + 3 + length + 2))
        }
    }

    func testArgumentsWrittenInPlaceAreTheEncodingOfTheSameWords() {
        let numbers = [0, 7, 9, 10, 99, 100, 1_000_000, -1, -10, Int.max, Int.min]
        var start = RedisArguments(capacity: 0)
        start.append(Array("EVALSHA".utf8))
        start.append([0, 13, 10, 255])
        var rest = RedisArguments()
        for number in numbers { rest.append(number) }
        rest.append(Array("aag:{k}:".utf8), "production", ":key")
        rest.append([], "", "")
        let words = [Array("EVALSHA".utf8), [0, 13, 10, 255]] + numbers.map { Array(String($0).utf8) }
            + [Array("aag:{k}:production:key".utf8), []]
        XCTAssertEqual(RedisCommand(start, rest), RedisCommand(words))
        XCTAssertEqual(RedisCommand(start, rest).bytes.prefix(5), Array("*15\r\n".utf8)[...])
        XCTAssertEqual(RedisCommand(rest).bytes, RedisCommand(Array(words.dropFirst(2))).bytes)
        XCTAssertEqual(RedisCommand(RedisArguments()).bytes, Array("*0\r\n".utf8))
        XCTAssertEqual(rest.count, numbers.count + 2)
    }

    func testEveryReplyTypeParsesAndIncompleteInputWaits() throws {
        let wire = Array("+OK\r\n-ERR no\r\n:-42\r\n$3\r\na\r\n\r\n$-1\r\n*2\r\n$1\r\nx\r\n*1\r\n:1\r\n*-1\r\n".utf8)
        var replies: [RedisReply] = []
        var position = 0
        while let (reply, end) = try RESP.parse(wire, from: position) {
            replies.append(reply)
            position = end
        }
        XCTAssertEqual(replies, [.status("OK"), .error("ERR no"), .integer(-42), .string(Array("a\r\n".utf8)), .null,
                                 .array([.string([UInt8(ascii: "x")]), .array([.integer(1)])]), .null])
        XCTAssertEqual(position, wire.count)
        // Every proper prefix of a reply is "not yet", never an error or a wrong reply.
        let one = Array("*2\r\n$5\r\nhello\r\n:7\r\n".utf8)
        for cut in 0..<one.count { XCTAssertNil(try RESP.parse(Array(one[..<cut]), from: 0), "prefix \(cut)") }
        XCTAssertEqual(try RESP.parse(one, from: 0)?.reply, .array([.string(Array("hello".utf8)), .integer(7)]))
    }

    func testMalformedRepliesAreErrorsNotCrashes() {
        for bad in ["?x\r\n", ":abc\r\n", "$-2\r\n", "$3\r\nabcd\r\n", "*-5\r\n", "$99999999999\r\n", "*99999999\r\n"] {
            XCTAssertThrowsError(try RESP.parse(Array(bad.utf8), from: 0), bad)
        }
        let deep = Array((String(repeating: "*1\r\n", count: 40) + ":1\r\n").utf8)
        XCTAssertThrowsError(try RESP.parse(deep, from: 0), "nesting is bounded")
    }

    /// Lengths and integers are read from the bytes, as Int64(String) reads them: signs, overflow and
    /// anything that is not a digit alike.
    func testDecimalsReadAsInt64ReadsThem() {
        let cases = ["0", "7", "-42", "+5", "-0", "007", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
                     "-9223372036854775809", "", "-", "+", "1 ", " 1", "1.0", "0x10", "١", "--1", "+-1", "99999999999999999999"]
        for text in cases { XCTAssertEqual(RESP.decimal(Array(text.utf8)[...]), Int64(text), "\(text)") }
    }
}
