@testable import HTTPServer
import Upstream
import XCTest

/// HeadVerdict against libhttp-parser, head by head: every head HeadScan accepts is read both ways (the parser fed
/// the whole head, and `readHead`, which uses the verdict when it has one) and the readings must be the same —
/// refusal and its detail, method, version, keep-alive, upgrade, chunked, and where the body ends.
final class HeadVerdictTests: XCTestCase {
    private static let parserMethods = [
        "DELETE", "GET", "HEAD", "POST", "PUT", "CONNECT", "OPTIONS", "TRACE", "COPY", "LOCK", "MKCOL", "MOVE",
        "PROPFIND", "PROPPATCH", "SEARCH", "UNLOCK", "BIND", "REBIND", "UNBIND", "ACL", "REPORT", "MKACTIVITY",
        "CHECKOUT", "MERGE", "M-SEARCH", "NOTIFY", "SUBSCRIBE", "UNSUBSCRIBE", "PATCH", "PURGE", "MKCALENDAR",
        "LINK", "UNLINK", "SOURCE",
    ]
    private static let otherMethods = ["get", "Get", "GETS", "GE", "BREW", "POSTX", "X", "PRI", "QUERY"]
    private static let targets = ["/", "/items/1?a=b&c", "/a#frag", "/a?b?c#d#e", "/\"<>\\^`{|}", "*", "http://h.test/x",
                                  "HTTP://h.test:80/x?y", "http:/x", "h.test:443", "[::1]:443", "foo", "//x", "/%zz"]
    /// Connection and Proxy-Connection values, mixed case, lists, blanks, near misses.
    private static let connectionValues = [
        "close", "Close", "CLOSE", "keep-alive", "Keep-Alive", "KEEP-ALIVE", "upgrade", "Upgrade", "", "foo", "clos",
        "closed", "keep-alives", "keep-alive ", "close  ", "close\t", "\tclose", "close, foo", "foo, close", "foo,close",
        ",close", ", close", "keep-alive, close", "close,keep-alive", "Keep-Alive, Upgrade", "upgrade, keep-alive",
        "keep-alive,", "close x", "x close", "te, close", "close;", "kEeP-aLiVe", "c", "k",
    ]
    private static let fieldSets: [[String]] = {
        var sets: [[String]] = [[], ["User-Agent: x", "Accept: */*"]]
        for value in connectionValues {
            sets.append(["Connection: \(value)"])
            sets.append(["Proxy-Connection: \(value)"])
            sets.append(["Connection: \(value)", "Upgrade: websocket"])
        }
        sets += [
            ["Connection: close", "Connection: keep-alive"], ["Connection: keep-alive", "Proxy-Connection: close"],
            ["Upgrade: h2c"], ["Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings"], ["upgrade: x", "connection: UPGRADE"],
            ["Connectionx: close"], ["Connectio: close"], ["X-Connection: close"], ["Proxy-Connections: close"],
        ]
        let lengths = ["0", "5", "00", "007", " 5", "5 ", "5\t", "5 5", "", "-1", "+5", "5x", "0x5", "18446744073709551615",
                       "18446744073709551616", "99999999999999999999", "123456789012345678", "1234567890123456789"]
        for length in lengths { sets.append(["Content-Length: \(length)"]) }
        sets += [
            ["Content-Length: 5", "Content-Length: 5"], ["Content-Length: 5", "Content-Length: 6"], ["Content-Length: 5, 5"],
            ["content-length: 3"], ["CONTENT-LENGTH: 3"], ["Content-Lengths: 3"],
        ]
        let encodings = ["chunked", "Chunked", "gzip", "gzip, chunked", "chunked, gzip", "chunked ", "chunked\t", "chunkedx",
                         "identity", ""]
        for encoding in encodings {
            sets.append(["Transfer-Encoding: \(encoding)"])
            sets.append(["Transfer-Encoding: \(encoding)", "Content-Length: 5"])
        }
        sets += [["Transfer-Encoding: gzip", "Transfer-Encoding: chunked"], ["Transfer-Encoding: chunked", "Transfer-Encoding: gzip"]]
        sets += [["Content-Length: 4", "Connection: close", "Expect: 100-continue"], ["Content-Type: a", "Content-Length: 2"]]
        return sets
    }()

    private static var corpus: [String] {
        var heads: [String] = []
        for method in parserMethods + otherMethods {
            for target in targets {
                for version in ["1.0", "1.1"] {
                    heads.append("\(method) \(target) HTTP/\(version)\r\nHost: h.test\r\n\r\n")
                    heads.append("\(method) \(target) HTTP/\(version)\r\nHost: h.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\n")
                }
            }
        }
        for method in ["GET", "POST", "CONNECT", "PUT"] {
            for target in ["/", "/p?q", "h.test:443"] {
                for version in ["1.0", "1.1"] {
                    for fields in fieldSets {
                        heads.append((["\(method) \(target) HTTP/\(version)", "Host: h.test"] + fields).joined(separator: "\r\n") + "\r\n\r\n")
                    }
                }
            }
        }
        // A head past the parser's own limit, and leading empty lines.
        heads.append("GET / HTTP/1.1\r\nHost: h\r\nX-Big: \(String(repeating: "b", count: HeadVerdict.parserHeadLimit))\r\n\r\n")
        heads.append("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        return heads
    }

    /// What a parser says of a head: its fed outcome, its readings, and, when a body follows, how it frames one.
    private struct Reading: Equatable {
        var fed = ""
        var method = "", minor = -1, keepAlive = false, upgrade = false, chunked = false
        /// Bytes of body fed (one at a time, up to 24) before the message completed; nil if it did not.
        var bodyEnd: Int?
    }

    private final class Completion: RequestParserDelegate {
        var complete = false
        func parsedBody(_ bytes: UnsafeRawBufferPointer) {}
        func parsedMessageComplete() { complete = true }
    }

    private func read(_ head: [UInt8], start: Int, parts: HeadScan.Parts, fields: [HTTPField], verdict: Bool) -> Reading {
        let parser = RequestParser()
        let completion = Completion()
        parser.delegate = completion
        var reading = Reading()
        let fed = head[start...].withUnsafeBytes { verdict ? parser.readHead($0, parts: parts, fields: fields) : parser.feed($0) }
        switch fed {
        case .consumed: reading.fed = "consumed"
        case .messageComplete(let consumed): reading.fed = "complete \(consumed)"
        case .failed(let detail): reading.fed = "failed \(detail)"; return reading
        }
        (reading.method, reading.minor, reading.keepAlive) = (parser.method, parser.minorVersion, parser.shouldKeepAlive)
        (reading.upgrade, reading.chunked) = (parser.isUpgrade, parser.isChunked)
        guard !completion.complete, !reading.upgrade else { return reading }
        for count in 1...24 {
            _ = [UInt8(ascii: "x")].withUnsafeBytes { parser.feed($0) }
            if completion.complete { reading.bodyEnd = count; break }
        }
        return reading
    }

    func testTheVerdictReadsHeadsAsLibhttpParserDoes() {
        var compared = 0, byVerdict = 0
        for text in Self.corpus {
            let head = Array(text.utf8)
            var parts = HeadScan.Parts()
            guard case .complete(let start, let end) = head.withUnsafeBytes({ HeadScan.findEnd($0, from: 0, parts: &parts) }),
                  end == head.count else { continue }
            let fields = head[start...].withUnsafeBytes { bytes in
                parts.fields.map { HTTPField(name: UnsafeRawBufferPointer(rebasing: bytes[$0.name]),
                                             value: String(decoding: bytes[$0.value], as: UTF8.self)) }
            }
            compared += 1
            if head[start...].withUnsafeBytes({ HeadVerdict(head: $0, parts: parts, fields: fields) }) != nil { byVerdict += 1 }
            let parser = read(head, start: start, parts: parts, fields: fields, verdict: false)
            let verdict = read(head, start: start, parts: parts, fields: fields, verdict: true)
            XCTAssertEqual(verdict, parser, text.prefix(200).debugDescription)
        }
        // Not vacuous: most heads were compared, and a good share of them read by the verdict.
        XCTAssertGreaterThan(compared, 2000)
        XCTAssertGreaterThan(byVerdict, 400)
    }

    /// The verdict on a head as "METHOD 1.minor keepAlive Bool length N"; nil when it leaves the head to the parser.
    private func verdict(_ text: String) -> String? {
        let head = Array(text.utf8)
        var parts = HeadScan.Parts()
        guard case .complete(let start, _) = head.withUnsafeBytes({ HeadScan.findEnd($0, from: 0, parts: &parts) }) else {
            XCTFail("HeadScan refused \(text.debugDescription)")
            return nil
        }
        return head[start...].withUnsafeBytes { bytes in
            let fields = parts.fields.map { HTTPField(name: UnsafeRawBufferPointer(rebasing: bytes[$0.name]),
                                                      value: String(decoding: bytes[$0.value], as: UTF8.self)) }
            return HeadVerdict(head: bytes, parts: parts, fields: fields).map {
                "\($0.method) 1.\($0.minorVersion) keepAlive \($0.keepAlive) length \($0.contentLength)"
            }
        }
    }

    func testCommonHeadsAreReadByTheVerdictAndTheRestLeftToTheParser() {
        XCTAssertEqual(verdict("GET /pass/items/1 HTTP/1.1\r\nHost: h\r\nUser-Agent: wrk\r\n\r\n"),
                       "GET 1.1 keepAlive true length 0")
        XCTAssertEqual(verdict("POST /a HTTP/1.0\r\nContent-Length:  12  \r\nConnection: Keep-Alive\r\n\r\n"),
                       "POST 1.0 keepAlive true length 12")
        XCTAssertEqual(verdict("DELETE /a HTTP/1.1\r\nHost: h\r\nproxy-connection: CLOSE\r\n\r\n"),
                       "DELETE 1.1 keepAlive false length 0")
        for head in ["GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: x\r\n\r\n",
                     "CONNECT h:1 HTTP/1.1\r\nHost: h\r\n\r\n", "GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n",
                     "TRACE / HTTP/1.1\r\nHost: h\r\n\r\n", "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, close\r\n\r\n",
                     "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
                     "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\t\r\n\r\n"] {
            XCTAssertNil(verdict(head), head.debugDescription)
        }
    }
}
