@testable import HTTPServer
import XCTest

/// The byte classes the head check looks up, every byte in every place: the table against the RFCs' definitions
/// written out here, and the head check's verdict on each byte in a method, a target, a field name, a Host and a
/// field value (at each offset of a long value: values are checked sixteen bytes at a time, the tail overlapping).
final class HeadBytesTests: XCTestCase {
    private static let digits = "0123456789", letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    /// RFC 9110 §5.6.2.
    private static let tchar = Set((digits + letters + "!#$%&'*+-.^_`|~").utf8)
    /// RFC 3986 unreserved / sub-delims.
    private static let regName = Set((digits + letters + "-._~!$&'()*+,;=").utf8)
    private static let hexDigit = Set((digits + "abcdefABCDEF").utf8)
    private static let allBytes = (0...255).map { UInt8($0) }

    private static func isFieldValue(_ byte: UInt8) -> Bool { byte == 0x09 || byte == 0x20 || (0x21...0x7E).contains(byte) || byte >= 0x80 }

    private func scan(_ bytes: [UInt8]) -> HeadScan.Outcome {
        bytes.withUnsafeBytes { HeadScan.findEnd($0, from: 0) }
    }

    private func reason(_ bytes: [UInt8]) -> String {
        switch scan(bytes) {
        case .complete: "accepted"
        case .incomplete: "incomplete"
        case .invalid(let violation): violation.message
        }
    }

    func testTheTableHoldsEachClassAsTheRFCsDefineIt() {
        for byte in Self.allBytes {
            let hex = String(byte, radix: 16)
            XCTAssertEqual(HeadBytes.byte(byte, is: .token), Self.tchar.contains(byte), "token 0x\(hex)")
            XCTAssertEqual(HeadBytes.byte(byte, is: .fieldValue), Self.isFieldValue(byte), "field value 0x\(hex)")
            XCTAssertEqual(HeadBytes.byte(byte, is: .visible), (0x21...0x7E).contains(byte), "visible 0x\(hex)")
            XCTAssertEqual(HeadBytes.byte(byte, is: .regName), Self.regName.contains(byte), "reg-name 0x\(hex)")
            XCTAssertEqual(HeadBytes.byte(byte, is: .hexDigit), Self.hexDigit.contains(byte), "hex digit 0x\(hex)")
            XCTAssertEqual(HeadBytes.byte(byte, is: .digit), Self.digits.utf8.contains(byte), "digit 0x\(hex)")
        }
    }

    func testEachByteInAMethodOrTargetIsJudgedByItsClass() {
        for byte in Self.allBytes where byte != 0x0A && byte != 0x0D {
            let hex = String(byte, radix: 16)
            let method = Array("G".utf8) + [byte] + Array("T /x HTTP/1.1\r\nHost: h\r\n\r\n".utf8)
            XCTAssertEqual(reason(method), Self.tchar.contains(byte) ? "accepted" : badRequestLine, "method byte 0x\(hex)")
            let target = Array("GET /a".utf8) + [byte] + Array("b HTTP/1.1\r\nHost: h\r\n\r\n".utf8)
            let expected = byte == 0x20 ? badRequestLine : (0x21...0x7E).contains(byte) ? "accepted" : "the request target must be visible ASCII"
            XCTAssertEqual(reason(target), expected, "target byte 0x\(hex)")
        }
        XCTAssertEqual(reason(Array("GET /a\rb HTTP/1.1\r\nHost: h\r\n\r\n".utf8)), "the request target must be visible ASCII")
        XCTAssertEqual(reason(Array("GET /a\nb HTTP/1.1\r\nHost: h\r\n\r\n".utf8)), "a line ends in LF without CR")
        XCTAssertEqual(reason(Array("GET /a\u{7F} HTTP/1.1 x\r\nHost: h\r\n\r\n".utf8)), badRequestLine, "a third space is told first")
        XCTAssertEqual(reason(Array("GET /a HTTP/1.2\r\nHost: h\r\n\r\n".utf8)), "only HTTP/1.0 and HTTP/1.1 are accepted")
    }

    func testEachByteInAFieldNameIsJudgedByItsClass() {
        for byte in Self.allBytes where byte != 0x0A && byte != UInt8(ascii: ":") {
            let head = Array("GET /x HTTP/1.1\r\nHost: h\r\nX-".utf8) + [byte] + Array("A: v\r\n\r\n".utf8)
            let expected = Self.tchar.contains(byte) ? "accepted"
                : byte == 0x20 || byte == 0x09 ? "whitespace between a header name and its colon"
                : "a header name holds a byte that is not a token character"
            XCTAssertEqual(reason(head), expected, "name byte 0x\(String(byte, radix: 16))")
        }
        XCTAssertEqual(reason(Array("GET /x HTTP/1.1\r\nHost: h\r\nX-\nA: v\r\n\r\n".utf8)), "a line ends in LF without CR")
        XCTAssertEqual(reason(Array("GET /x HTTP/1.1\r\nHost: h\r\nX-:A: v\r\n\r\n".utf8)), "accepted", "a colon ends the name")
        XCTAssertEqual(reason(Array("GET /x HTTP/1.1\r\nHost: h\r\n:A: v\r\n\r\n".utf8)), "a header name holds a byte that is not a token character")
    }

    func testEachByteAtEachOffsetOfAValueIsJudgedByItsClass() {
        let value = Array("0123456789abcdefghijklmnopqrstuvwxyzABCD".utf8)  // 40 bytes: two blocks and an overlapping tail
        for byte in Self.allBytes where byte != 0x0A {
            let hex = String(byte, radix: 16)
            for offset in value.indices {
                var bytes = value
                bytes[offset] = byte
                let head = Array("GET /x HTTP/1.1\r\nHost: h\r\nX-Long: ".utf8) + bytes + Array("\r\nX-Next: 1\r\n\r\n".utf8)
                let expected = Self.isFieldValue(byte) ? "accepted" : "a header value holds a control character"
                XCTAssertEqual(reason(head), expected, "value byte 0x\(hex) at \(offset)")
            }
            for short in ["", "a", "abcdefg"] {  // values shorter than a block
                let head = Array("GET / HTTP/1.0\r\nA:".utf8) + Array(short.utf8) + [byte] + Array("\r\n\r\n".utf8)
                let expected = Self.isFieldValue(byte) ? "accepted" : "a header value holds a control character"
                XCTAssertEqual(reason(head), expected, "value byte 0x\(hex) after \(short.debugDescription)")
            }
        }
        // A control byte just before a clean value's last block, and a tab in every block, end to end.
        XCTAssertEqual(reason(Array("GET /x HTTP/1.1\r\nHost: h\r\nX: a\u{1}bcdefghijklmnopq\r\n\r\n".utf8)), "a header value holds a control character")
        XCTAssertEqual(reason(Array("GET /x HTTP/1.1\r\nHost: h\r\nX: a\tbcdefghijklmno\tpqrstuvwxyz0123\t456\r\n\r\n".utf8)), "accepted")
    }

    func testEachByteInAHostIsJudgedByItsClass() {
        for byte in Self.allBytes where byte != 0x0A {
            let hex = String(byte, radix: 16)
            let host = Array("GET /x HTTP/1.1\r\nHost: a".utf8) + [byte] + Array("b.test\r\n\r\n".utf8)
            let expected = !Self.isFieldValue(byte) ? "a header value holds a control character"
                : Self.regName.contains(byte) ? "accepted" : "the Host header is not host[:port]"
            XCTAssertEqual(reason(host), expected, "host byte 0x\(hex)")
            let port = Array("GET /x HTTP/1.1\r\nHost: a.test:8".utf8) + [byte] + Array("0\r\n\r\n".utf8)
            let expectedPort = !Self.isFieldValue(byte) ? "a header value holds a control character"
                : Self.digits.utf8.contains(byte) ? "accepted" : "the Host header is not host[:port]"
            XCTAssertEqual(reason(port), expectedPort, "port byte 0x\(hex)")
            let escape = Array("GET /x HTTP/1.1\r\nHost: a%4".utf8) + [byte] + Array("b\r\n\r\n".utf8)
            let expectedEscape = !Self.isFieldValue(byte) ? "a header value holds a control character"
                : Self.hexDigit.contains(byte) ? "accepted" : "the Host header is not host[:port]"
            XCTAssertEqual(reason(escape), expectedEscape, "escape byte 0x\(hex)")
        }
    }

    private let badRequestLine = "the request line is not: method, one space, target, one space, version"
}
