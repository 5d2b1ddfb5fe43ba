@testable import HTTPServer
import XCTest

/// The raw head check on its own, case by case, down to the message (HeadBytesTests put every byte in every place).
final class HeadScanTests: XCTestCase {
    private func scan(_ text: String) -> HeadScan.Outcome {
        scan(Array(text.utf8))
    }

    private func scan(_ bytes: [UInt8]) -> HeadScan.Outcome {
        bytes.withUnsafeBytes { HeadScan.findEnd($0, from: 0) }
    }

    private func assertRefused(_ bytes: [UInt8], _ reason: String, _ message: String, file: StaticString = #filePath, line: UInt = #line) {
        guard case .invalid(let violation) = scan(bytes) else {
            return XCTFail("accepted: \(String(decoding: bytes, as: UTF8.self).debugDescription)", file: file, line: line)
        }
        XCTAssertEqual(violation.reason, reason, file: file, line: line)
        XCTAssertEqual(violation.message, message, file: file, line: line)
    }

    private func assertRefused(_ text: String, _ reason: String, _ message: String, file: StaticString = #filePath, line: UInt = #line) {
        assertRefused(Array(text.utf8), reason, message, file: file, line: line)
    }

    func testPartsSayWhereTheTargetAndFieldsLie() {
        // The server reads the request's fields from here: names as sent, values without the blanks around them.
        let head = Array("\r\nGET /a?b=1 HTTP/1.1\r\nHost:  t \r\nX-Empty:\r\nX-Blank: \t \r\nX-Tab:\ta\tb \r\nx-lower:v\r\n\r\n".utf8)
        var parts = HeadScan.Parts()
        let outcome = head.withUnsafeBytes { HeadScan.findEnd($0, from: 0, parts: &parts) }
        guard case .complete(let start, let end) = outcome else { return XCTFail("refused: \(outcome)") }
        let text = { (range: Range<Int>) in String(decoding: head[start..<end][(start + range.lowerBound)..<(start + range.upperBound)], as: UTF8.self) }
        XCTAssertEqual(text(parts.target), "/a?b=1")
        XCTAssertEqual(parts.fields.map { text($0.name) }, ["Host", "X-Empty", "X-Blank", "X-Tab", "x-lower"])
        XCTAssertEqual(parts.fields.map { text($0.value) }, ["t", "", "", "a\tb", "v"])
        // Scanned again (the next request on the connection), the parts are the new head's alone.
        let next = Array("GET / HTTP/1.0\r\n\r\n".utf8)
        _ = next.withUnsafeBytes { HeadScan.findEnd($0, from: 0, parts: &parts) }
        XCTAssertEqual(parts.target, 4..<5)
        XCTAssertTrue(parts.fields.isEmpty)
    }

    /// A head arriving in pieces (the scan resumed where the last one stopped, as a connection does) is judged as
    /// when read at once, whatever the split: its lines are checked from its start once its end is found.
    func testAHeadReadInPiecesIsJudgedAsWhole() {
        let heads = [
            "\r\nGET /a?b=1 HTTP/1.1\r\nHost:  t \r\nX-Empty:\r\nX-Tab:\ta\tb \r\n\r\n",
            "GET /x HTTP/1.1\r\nHost: t\r\nX-A: a\u{7F}\r\n\r\n", "GET /x HTTP/1.1\r\nX(A): b\r\nHost: t\r\n\r\n",
            "GET /x HTTP/1.1\r\nHost: a b\r\n\r\n", "GET /x HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", "GET /x HTTP/1.1\r\n\r\n",
            "GET /x HTTP/1.2\r\nHost: t\r\n\r\n", "GET /x\u{1} HTTP/1.1\r\nHost: t\r\n\r\n", " GET /x HTTP/1.1\r\n\r\n",
            "GET /x HTTP/1.1\r\nHost : t\r\nA\nB\r\n\r\n",
        ]
        for text in heads {
            let bytes = Array(text.utf8)
            var whole = HeadScan.Parts()
            let expected = bytes.withUnsafeBytes { HeadScan.findEnd($0, from: 0, parts: &whole) }
            for split in 1..<bytes.count {
                var parts = HeadScan.Parts()
                var outcome = bytes[..<split].withUnsafeBytes { HeadScan.findEnd($0, from: 0, parts: &parts) }
                if case .incomplete(let scanned) = outcome {
                    outcome = bytes.withUnsafeBytes { HeadScan.findEnd($0, from: scanned, parts: &parts) }
                }
                XCTAssertEqual(outcome, expected, "\(text.debugDescription) split at \(split)")
                if case .complete = expected {
                    XCTAssertEqual(parts.target, whole.target, "\(text.debugDescription) split at \(split)")
                    XCTAssertEqual(parts.fields.map { [$0.name, $0.value] }, whole.fields.map { [$0.name, $0.value] })
                }
            }
        }
    }

    func testWellFormedHeadsAreAccepted() {
        let head = "GET /x HTTP/1.1\r\nHost: t\r\nX-Empty:\r\nX-Tab:\ta\tb \r\nAccept: */*\r\n\r\n"
        XCTAssertEqual(scan(head), .complete(start: 0, end: head.utf8.count))
        XCTAssertEqual(scan("\r\nGET /x HTTP/1.0\r\n\r\n"), .complete(start: 2, end: 21), "a leading empty line; 1.0 needs no Host")
        XCTAssertEqual(scan(Array("GET /x HTTP/1.1\r\nHost: t\r\nX-Text: caf".utf8) + [0xC3, 0xA9] + Array("\r\n\r\n".utf8)),
                       .complete(start: 0, end: 43), "obs-text in a value")
        XCTAssertEqual(scan("GET /x HTTP/1.1\r\nHost: t\r\n"), .incomplete(scanned: 25))
    }

    func testEachFieldLineViolationHasItsReasonAndMessage() {
        let noColon = "a header line has no colon"
        let whitespace = "whitespace between a header name and its colon"
        let notToken = "a header name holds a byte that is not a token character"
        let control = "a header value holds a control character"
        assertRefused("GET /x HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n", "obs_fold", "a header line starts with whitespace (obsolete line folding)")
        assertRefused("GET /x HTTP/1.1\r\nHost: t\r\nX-No-Colon\r\n\r\n", "bad_header", noColon)
        assertRefused("GET /x HTTP/1.1\r\nHost : t\r\n\r\n", "bad_header", whitespace)
        assertRefused("GET /x HTTP/1.1\r\nX\tY: t\r\nHost: t\r\n\r\n", "bad_header", whitespace)
        assertRefused("GET /x HTTP/1.1\r\nHost: t\r\nX(A): b\r\n\r\n", "bad_header", notToken)
        assertRefused("GET /x HTTP/1.1\r\nHost: t\r\n: b\r\n\r\n", "bad_header", notToken)
        assertRefused("GET /x HTTP/1.1\r\nHost: t\r\nX\rA: b\r\n\r\n", "bad_header", notToken)
        assertRefused("GET /x HTTP/1.1\r\nHost: t\r\nX\rA\r\n\r\n", "bad_header", noColon)
        assertRefused("GET /x HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n", "bad_header", control)
        assertRefused("GET /x HTTP/1.1\r\nHost: t\r\nX-A: a\u{7F}\r\n\r\n", "bad_header", control)
        assertRefused(Array("GET /x HTTP/1.1\r\nHost: t\r\nX-A: a".utf8) + [0] + Array("\r\n\r\n".utf8), "bad_header", control)
        assertRefused("GET /x HTTP/1.1\r\nX(A) b\r\nHost: t\r\n\r\n", "bad_header", noColon)  // told before the name
    }

    func testHostMustBeHostAndPort() {
        for value in ["example.com", "example.com:8443", "127.0.0.1:80", "[::1]:8080", "[2001:db8::1]", "a-b_c~d.e", "%41pi.example",
                      " padded.example\t", "host:"] {
            let head = "GET /x HTTP/1.1\r\nHost: \(value)\r\n\r\n"
            XCTAssertEqual(scan(head), .complete(start: 0, end: head.utf8.count), value)
        }
        for value in ["", " ", "a b", "user@example.com", "example.com/path", "example.com:80x", "example.com:80:81", "[::1",
                      "[]", "[::1]x", "[g::1]", "%4", "%zz.example", ":80", "exa\"mple", "exa<mple"] {
            assertRefused("GET /x HTTP/1.1\r\nHost: \(value)\r\n\r\n", "bad_host", "the Host header is not host[:port]")
        }
        assertRefused("GET /x HTTP/1.0\r\nHost: a b\r\n\r\n", "bad_host", "the Host header is not host[:port]")
    }

    func testHostIsCountedWhateverItsCase() {
        assertRefused("GET /x HTTP/1.1\r\nHost: a\r\nhOsT: b\r\n\r\n", "duplicate_host", "more than one Host header")
        assertRefused("GET /x HTTP/1.1\r\nHosts: a\r\n\r\n", "missing_host", "an HTTP/1.1 request must carry a Host header")
        assertRefused("GET /x HTTP/1.1\r\nX-Host: a\r\n\r\n", "missing_host", "an HTTP/1.1 request must carry a Host header")
    }
}
