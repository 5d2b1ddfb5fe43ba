@testable import Upstream
import XCTest

/// Bad configuration and requests are refused with a typed error before anything is sent.
final class UpstreamValidationTests: XCTestCase {
    private func reasonCode(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return (error as? UpstreamError)?.reasonCode
        }
    }

    func testTargetsMustBeHTTPBaseURLsWithPositiveTimeouts() throws {
        for url in ["ftp://127.0.0.1", "http://", "127.0.0.1:8080", "http://h/p?q=1", "http://h/a b", "http://h/#x"] {
            XCTAssertEqual(reasonCode { _ = try UpstreamTarget(baseURL: url, connectTimeoutMs: 100, timeoutMs: 100) },
                           "upstream_invalid_target", url)
        }
        XCTAssertEqual(reasonCode { _ = try UpstreamTarget(baseURL: "http://h", connectTimeoutMs: 0, timeoutMs: 100) },
                       "upstream_invalid_target")
        XCTAssertEqual(reasonCode { _ = try UpstreamTarget(baseURL: "http://h", connectTimeoutMs: 10, timeoutMs: -1) },
                       "upstream_invalid_target")
        let target = try UpstreamTarget(baseURL: "HTTPS://api.example:8443/v2/", connectTimeoutMs: 10, timeoutMs: 10)
        XCTAssertEqual(target.baseURL, "HTTPS://api.example:8443/v2")
    }

    func testMalformedRequestsAreRefused() throws {
        // Port 9 on loopback: nothing is sent, validation fails first.
        let client = UpstreamClient(target: try UpstreamTarget(
            baseURL: "http://127.0.0.1:9", connectTimeoutMs: 100, timeoutMs: 100))
        let requests = [
            UpstreamRequest(method: "GE T", pathAndQuery: "/"),
            UpstreamRequest(method: "", pathAndQuery: "/"),
            UpstreamRequest(method: "GET", pathAndQuery: "no-slash"),
            UpstreamRequest(method: "GET", pathAndQuery: "/a b"),
            UpstreamRequest(method: "GET", pathAndQuery: "/a\r\nX-Injected: 1"),
            UpstreamRequest(method: "GET", pathAndQuery: "/", headers: [HTTPField("X-A", "1\r\nX-Injected: 1")]),
            UpstreamRequest(method: "GET", pathAndQuery: "/", headers: [HTTPField("Bad Name", "1")]),
            UpstreamRequest(method: "GET", pathAndQuery: "/", headers: [HTTPField("X-Nul", "a\u{0}b")]),
            UpstreamRequest(method: "HEAD", pathAndQuery: "/", body: [1]),
        ]
        for request in requests {
            XCTAssertEqual(reasonCode { _ = try client.send(request) }, "upstream_invalid_request", "\(request)")
        }
    }

    /// A bad byte is found at every place of a long target or value, and the bytes around it alone pass.
    func testABadByteIsFoundAnywhereInALongTargetOrValue() throws {
        let client = UpstreamClient(target: try UpstreamTarget(baseURL: "http://127.0.0.1:9", connectTimeoutMs: 100, timeoutMs: 100))
        let clean = "/abcdefghijklmnopqrstuvw"
        for place in 1..<clean.utf8.count {
            for bad in [" ", "#", "\u{7F}", "\u{1F}", "é", "\r"] {
                var target = Array(clean.utf8)
                target.replaceSubrange(place...place, with: Array(bad.utf8))
                let request = UpstreamRequest(method: "GET", pathAndQuery: String(decoding: target, as: UTF8.self))
                XCTAssertEqual(reasonCode { try request.validate() }, "upstream_invalid_request", "\(place) \(bad.debugDescription)")
            }
            for bad in ["\r", "\n", "\u{0}"] {
                var value = Array(clean.utf8)
                value.replaceSubrange(place...place, with: Array(bad.utf8))
                let request = UpstreamRequest(method: "GET", pathAndQuery: "/", headers: [HTTPField("X-A", String(decoding: value, as: UTF8.self))])
                XCTAssertEqual(reasonCode { try request.validate() }, "upstream_invalid_request", "\(place) \(bad.debugDescription)")
            }
        }
        let fine = UpstreamRequest(method: "GET", pathAndQuery: clean + "?a=~!$&'()*+,;=:@%20",
                                   headers: [HTTPField("X-A", "\t tab, space, \u{7F} and é are fine in a value \u{1}")])
        XCTAssertNil(reasonCode { try fine.validate() })
        XCTAssertEqual(reasonCode { _ = try client.send(fine) }, "upstream_unavailable", "validation passed: nothing listens")
    }

    /// The word-at-a-time check agrees with the byte rule for every length around a word's and every place:
    /// CR, LF and NUL are refused, every other byte (tab and the other low controls included) passes.
    func testSendableValuesAreJudgedAtEveryLengthAndPlace() {
        for length in 1...20 {
            for place in 0..<length {
                for byte: UInt8 in [0x0D, 0x0A, 0x00, 0x09, 0x0B, 0x0C, 0x0E, 0x01, 0x7F, 0x80, 0xFF] {
                    var value = [UInt8](repeating: UInt8(ascii: "v"), count: length)
                    value[place] = byte
                    let text = String(decoding: value, as: UTF8.self)  // 0x80, 0xFF: U+FFFD, still sendable
                    XCTAssertEqual(HTTPField.isSendableValue(text), ![0x0D, 0x0A, 0x00].contains(byte), "\(length) \(place) \(byte)")
                }
            }
        }
        XCTAssertTrue(HTTPField.isSendableValue(""))
    }

    /// Numbers are written as `String(_:)` writes them, from one digit to the widest.
    func testDecimalDigitsAreWrittenAsStringWritesThem() {
        for number in [0, 7, 9, 10, 99, 100, 12_345, 1_000_000_007, Int.max, -1, -10, Int.min] {
            var bytes: [UInt8] = []
            bytes.append(addingCapacity: 21) { $0.append(decimal: number) }
            XCTAssertEqual(String(decoding: bytes, as: UTF8.self), String(number))
        }
    }
}
