import CHTTPParser
import TestSupport
@testable import Upstream
import XCTest

/// ResponseScan and ChunkedBody against libhttp-parser (which framed upstream responses before them), head by head
/// and body by body: whatever the scan accepts, the parser reads the same way (status, framing, keep-alive; the
/// same data and end of a chunked body), and nothing the parser refuses is accepted. The scan may refuse more
/// (it is strict where the parser is lenient): those refusals are checked against expectations.
final class ResponseScanTests: XCTestCase {
    // MARK: - The corpus

    private static let fieldSets: [[String]] = {
        var sets: [[String]] = [[], ["Server: nginx/1.22.1", "Date: Sat, 05 Dec 2026 02:00:31 GMT", "Content-Type: application/json"],
                                ["X-Empty:", "X-Blanks: \t a b \t", "X-Obs: caf\u{e9}", "x-lower: 1", "X-Colon: a:b"]]
        let connectionValues = ["close", "Close", "CLOSE", "keep-alive", "Keep-Alive", "upgrade", "", "foo", "clos", "closed",
                                "keep-alives", "close, foo", "foo, close", "foo,close", ",close", "keep-alive, close",
                                "close,keep-alive", "Keep-Alive, Upgrade", "keep-alive,", "te, close", "kEeP-aLiVe", " close "]
        for value in connectionValues {
            sets.append(["Connection: \(value)", "Content-Length: 3"])
            sets.append(["Proxy-Connection: \(value)", "Content-Length: 3"])
            sets.append(["Connection: \(value)"])
        }
        let lengths = ["0", "5", "00", "007", " 5", "5 ", "5\t", "", "-1", "+5", "5x", "0x5", "3 3", "123456789012345678",
                       "1234567890123456789", "99999999999999999999", "24"]
        for length in lengths {
            sets.append(["Content-Length: \(length)"])
            sets.append(["Content-Length: \(length)", "Connection: close"])
        }
        sets += [["Content-Length: 5", "Content-Length: 5"], ["Content-Length: 5", "Content-Length: 6"], ["Content-Length: 5, 5"],
                 ["content-length: 3"], ["CONTENT-LENGTH: 3"], ["Content-Lengths: 3"], ["Content-Lengt: 3"]]
        let encodings = ["chunked", "Chunked", "CHUNKED", "gzip", "gzip, chunked", "chunked, gzip", "chunked ", "chunked\t", "chunkedx",
                         "identity", "", "chunked, chunked", "gzip,chunked", ", chunked", "chunked,"]
        for encoding in encodings {
            sets.append(["Transfer-Encoding: \(encoding)"])
            sets.append(["Transfer-Encoding: \(encoding)", "Content-Length: 5"])
            sets.append(["Transfer-Encoding: \(encoding)", "Connection: keep-alive"])
        }
        sets += [["Transfer-Encoding: gzip", "Transfer-Encoding: chunked"], ["Transfer-Encoding: chunked", "Transfer-Encoding: gzip"],
                 ["Transfer-Encodings: chunked"], ["Upgrade: websocket", "Connection: upgrade", "Content-Length: 2"],
                 ["Keep-Alive: timeout=5", "Content-Length: 1"]]
        return sets
    }()

    private static let statuses = ["200", "201", "204", "304", "100", "103", "404", "500", "599", "999"]

    /// Every status, version and field set, for GET and HEAD.
    private static var generated: [(head: String, bodyless: Bool)] {
        var heads: [(String, Bool)] = []
        for version in ["1.1", "1.0"] {
            for status in statuses {
                for fields in fieldSets {
                    let head = (["HTTP/\(version) \(status) Reason"] + fields).joined(separator: "\r\n") + "\r\n\r\n"
                    heads.append((head, false))
                    heads.append((head, true))
                }
            }
        }
        let statusLines = ["HTTP/1.1 200 OK", "HTTP/1.1 200", "HTTP/1.1 200 ", "HTTP/1.1 200  two  spaces", "HTTP/1.1 200 \t",
                           "HTTP/1.1 200 caf\u{e9}", "HTTP/1.1 200 a\u{01}b", "HTTP/1.1  200 OK", "HTTP/1.1 20 OK", "HTTP/1.1 2000 OK",
                           "HTTP/1.1 20x OK", "HTTP/1.1 099 OK", "HTTP/1.1 000 OK", "HTTP/1.1 101 Switching Protocols", "HTTP/1.2 200 OK",
                           "HTTP/2.0 200 OK", "HTTP/0.9 200 OK", "HTTP/1.10 200 OK", "http/1.1 200 OK", "HTTP/1.1\t200 OK", "HTTP/1.1 200\tOK",
                           "XTTP/1.1 200 OK", "HTTP/11 200 OK", " HTTP/1.1 200 OK"]
        for line in statusLines {
            heads.append((line + "\r\nContent-Length: 2\r\n\r\n", false))
            heads.append((line + "\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", false))
        }
        return heads
    }

    /// Valid heads with one byte deleted, inserted, replaced or a line doubled, from a fixed seed.
    private static var mutated: [(head: String, bodyless: Bool)] {
        let bases = ["HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: keep-alive\r\n\r\n",
                     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n",
                     "HTTP/1.0 200 OK\r\nContent-Length: 4\r\nConnection: keep-alive\r\n\r\n",
                     "HTTP/1.1 204 No Content\r\nDate: x\r\n\r\n", "HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\n\r\n",
                     "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", "HTTP/1.1 100 Continue\r\n\r\n"].map { Array($0.utf8) }
        let inserted: [UInt8] = [0x0D, 0x0A, 0x20, 0x09, 0x00, 0x3A, 0x2C, 0x7F, 0x80, 0x61, 0x30, 0x22, 0x28]
        var random = Lehmer(seed: 26)
        var heads: [(String, Bool)] = []
        for round in 0..<4000 {
            var bytes = bases[random.next(bases.count)]
            let at = random.next(bytes.count - 2)
            switch random.next(4) {
            case 0: bytes.remove(at: at)
            case 1: bytes.insert(inserted[random.next(inserted.count)], at: at)
            case 2: bytes[at] = inserted[random.next(inserted.count)]
            default:
                let lineStart = bytes[..<at].lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
                let lineEnd = (bytes[at...].firstIndex(of: 0x0A) ?? bytes.count - 1) + 1
                bytes.insert(contentsOf: bytes[lineStart..<lineEnd], at: lineStart)
            }
            heads.append((String(decoding: bytes, as: UTF8.self), round % 5 == 0))
        }
        return heads
    }

    /// A fixed pseudo-random sequence (the corpus is the same every run).
    private struct Lehmer {
        var state: UInt64
        init(seed: UInt64) { state = seed }
        mutating func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
    }

    // MARK: - The readings

    /// What a reader makes of a response head: refused, not whole, or its status, framing and keep-alive.
    private enum Reading: Equatable {
        case refused
        case incomplete
        case read(status: Int, framing: String, keepAlive: Bool)
    }

    private func scanned(_ head: [UInt8], bodyless: Bool) -> (Reading, detail: String) {
        var scan = ResponseScan()
        var fields = ResponseHead()
        switch head.withUnsafeBytes({ scan.scan($0, into: &fields) }) {
        case .invalid(let reason): return (.refused, reason)
        case .incomplete: return (.incomplete, "")
        case .complete(let end):
            XCTAssertEqual(end, head.count)
            let framing = scan.framing(bodyless: bodyless)
            let described: String
            switch framing {
            case .none, .length(0): described = "none"
            case .length(let length): described = "length \(length)"
            case .chunked: described = "chunked"
            case .untilClose: described = "until close"
            }
            // As the parser keeps a connection: not after a body read to its close, nor after an interim head.
            let keepAlive = scan.status >= 200 && scan.keepAlive && framing != .untilClose
            return (.read(status: scan.status, framing: described, keepAlive: keepAlive), "")
        }
    }

    private func parsed(_ head: [UInt8], bodyless: Bool) -> Reading {
        let oracle = Oracle(bodyless: bodyless)
        defer { oracle.close() }
        guard oracle.feed(head) else { return .refused }
        guard let status = oracle.status else { return .incomplete }
        let framing: String
        if oracle.messageComplete {
            framing = "none"
        } else if oracle.isChunked {
            framing = "chunked"
            guard oracle.feed(Array("0\r\n\r\n".utf8)), oracle.messageComplete else { return .refused }
        } else if let length = oracle.contentLength {
            framing = "length \(length)"
            guard length < 1 << 20 else { return .read(status: status, framing: framing, keepAlive: oracle.keepAliveSoFar) }
            guard oracle.feed([UInt8](repeating: 0x78, count: Int(length))), oracle.messageComplete else { return .refused }
        } else {
            framing = "until close"
            guard oracle.feed(Array("xyz".utf8)), !oracle.messageComplete, oracle.feedEnd(), oracle.messageComplete else { return .refused }
        }
        return .read(status: status, framing: framing, keepAlive: status >= 200 && oracle.keepAlive)
    }

    func testTheScanReadsWhatLibhttpParserReadsTheSameWayAndAcceptsNothingItRefuses() {
        var accepted = 0, strict: [String: Int] = [:]
        for (text, bodyless) in Self.generated + Self.mutated {
            let head = Array(text.utf8)
            let (mine, detail) = scanned(head, bodyless: bodyless)
            let theirs = parsed(head, bodyless: bodyless)
            switch (mine, theirs) {
            case (.read(let status, let framing, false), .read(let theirStatus, let theirFraming, true))
                where status == theirStatus && framing == theirFraming:
                // Only ever this way (a connection the parser kept, dropped): the scan reads every element of a Connection
                // list (the parser misses a "close" after a comma or a keep-alive) and keeps no connection whose
                // Connection value is not a plain list of tokens, nor an HTTP/1.0 one whose response had a
                // Transfer-Encoding (RFC 9112 §6.1).
                accepted += 1
                XCTAssertTrue(text.lowercased().contains("connection:") || text.hasPrefix("HTTP/1.0"),
                              "the scan drops a connection the parser keeps: \(text.debugDescription)")
            case (.read, _):
                accepted += 1
                XCTAssertEqual(mine, theirs, "\(text.debugDescription) bodyless \(bodyless)")
            case (.refused, .refused), (.incomplete, .incomplete), (.incomplete, .refused):
                break
            case (.refused, _):
                strict[detail, default: 0] += 1
            case (.incomplete, .read):
                XCTFail("the parser read a head the scan waits on: \(text.debugDescription)")
            }
        }
        // Not vacuous: most heads were read by both; the scan's extra refusals are its strict rules, each seen.
        XCTAssertGreaterThan(accepted, 3000)
        for rule in ["a header line starts with whitespace (obsolete line folding)", "a line ends in LF without CR",
                     "a CR is not followed by LF", "a header value holds a control character", "chunked is not the last transfer coding",
                     "only HTTP/1.0 and HTTP/1.1 responses are read", "the upstream switched protocols, which the gateway does not relay"] {
            XCTAssertNotNil(strict[rule], "no head in the corpus was refused for: \(rule); refused: \(strict)")
        }
        let expected: Set = [
            "a header line starts with whitespace (obsolete line folding)", "a line ends in LF without CR", "a CR is not followed by LF",
            "a header value holds a control character", "more than one Content-Length", "both Transfer-Encoding and Content-Length",
            "chunked is not the last transfer coding", "only HTTP/1.0 and HTTP/1.1 responses are read",
            "the upstream switched protocols, which the gateway does not relay", "a Transfer-Encoding names no coding",
            "a Transfer-Encoding value is not a list of codings", "the Content-Length is not a number of bytes",
            "the status line is not: HTTP/1.x, a space, three digits, a reason", "whitespace between a header name and its colon",
            "a header line has no name or no colon", "a header name holds a byte that is not a token character",
            "a Content-Length or Transfer-Encoding value holds a tab",
        ]
        XCTAssertEqual(Set(strict.keys).subtracting(expected), [], "refusals the parser does not make, for no rule listed")
    }

    /// Each rule, by the reason the exchange's error carries.
    func testEachStrictRuleRefusesItsHead() {
        let ok = "HTTP/1.1 200 OK\r\n"
        for (head, reason) in [
            ("HTTP/1.1 200 OK\r\nX-A: 1\r\n b\r\n\r\n", "a header line starts with whitespace (obsolete line folding)"),
            ("HTTP/1.1 200 OK\nX: 1\r\n\r\n", "a line ends in LF without CR"), (ok + "X: 1\n\r\n", "a line ends in LF without CR"),
            (ok + "X: 1\rY: 2\r\n\r\n", "a CR is not followed by LF"), (ok + "X: a\u{0}b\r\n\r\n", "a header value holds a control character"),
            (ok + "X : 1\r\n\r\n", "whitespace between a header name and its colon"), (ok + ": 1\r\n\r\n", "a header line has no name or no colon"),
            (ok + "X\r\n\r\n", "a header line has no name or no colon"), (ok + "B(d): 1\r\n\r\n", "a header name holds a byte that is not a token character"),
            (ok + "Content-Length: 1\r\nContent-Length: 1\r\n\r\n", "more than one Content-Length"),
            (ok + "Content-Length: 1, 1\r\n\r\n", "the Content-Length is not a number of bytes"),
            (ok + "Content-Length: 1234567890123456789\r\n\r\n", "the Content-Length is not a number of bytes"),
            (ok + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", "both Transfer-Encoding and Content-Length"),
            (ok + "Transfer-Encoding: chunked, gzip\r\n\r\n", "chunked is not the last transfer coding"),
            (ok + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "chunked is not the last transfer coding"),
            (ok + "Transfer-Encoding: chunked,\r\n\r\n", "a Transfer-Encoding value is not a list of codings"),
            (ok + "Transfer-Encoding: \r\n\r\n", "a Transfer-Encoding names no coding"),
            (ok + "Transfer-Encoding: chunked\t\r\n\r\n", "a Content-Length or Transfer-Encoding value holds a tab"),
            ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "the upstream switched protocols, which the gateway does not relay"),
            ("HTTP/1.2 200 OK\r\n\r\n", "only HTTP/1.0 and HTTP/1.1 responses are read"),
            ("HTTP/2.0 200 OK\r\n\r\n", "the status line is not: HTTP/1.x, a space, three digits, a reason"),
            ("HTTP/1.1 20 OK\r\n\r\n", "the status line is not: HTTP/1.x, a space, three digits, a reason"),
            ("HTTP/1.1 099 OK\r\n\r\n", "the status line is not: HTTP/1.x, a space, three digits, a reason"),
            ("HTTP/1.1 200 O\u{1}K\r\n\r\n", "the status line is not: HTTP/1.x, a space, three digits, a reason"),
            ("\r\nHTTP/1.1 200 OK\r\n\r\n", "the status line is not: HTTP/1.x, a space, three digits, a reason"),
            ("this is not HTTP\r\n\r\n", "the status line is not: HTTP/1.x, a space, three digits, a reason"),
        ] {
            XCTAssertEqual(scanned(Array(head.utf8), bodyless: false).detail, reason, head.debugDescription)
        }
        // Nothing is waited for once the start cannot be a status line.
        XCTAssertEqual(scanned(Array("HTTP/1".utf8), bodyless: false).0, .incomplete)
        XCTAssertEqual(scanned(Array("HTTP/2".utf8), bodyless: false).0, .refused)
    }

    /// The eight-at-a-time checks against their byte-by-byte definitions, every byte in every place of a word.
    func testWordChecksAgreeWithTheBytesDefinitions() {
        let plain = Set(Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-".utf8))
        for base in [Array("Content-".utf8), Array("x-9Z-a0M".utf8)] {
            for place in 0..<8 {
                for byte in UInt8.min...UInt8.max {
                    var bytes = base
                    bytes[place] = byte
                    let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                    let other = ~ResponseScan.plainNameBytes(word) & ByteWord.highs
                    XCTAssertEqual(other == 0 ? nil : other.trailingZeroBitCount >> 3, bytes.firstIndex { !plain.contains($0) }, "\(byte) at \(place)")
                    let first = bytes.firstIndex { !ResponseScan.isFieldByte($0) || $0 == 0x09 }
                    let marked = ByteWord.controls(word)
                    XCTAssertEqual(marked == 0 ? nil : marked.trailingZeroBitCount >> 3, first, "\(byte) at \(place)")
                }
            }
        }
    }

    func testHTTPVersionWordsAreThoseOfTheirBytes() {
        for (word, text) in [(ResponseScan.http11, "HTTP/1.1"), (ResponseScan.http10, "HTTP/1.0")] {
            XCTAssertEqual(Array(text.utf8).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }, word)
        }
    }

    /// A head read line by line as it arrives: the same reading as whole, wherever the reads split it.
    func testAHeadReadInPiecesIsReadAsWhole() {
        let text = Array("HTTP/1.1 200 OK\r\nServer: s\r\nContent-Length: 12\r\nConnection: keep-alive\r\nX-Long: caf\u{e9} au lait\r\n\r\n".utf8)
        for split in 1..<text.count {
            var scan = ResponseScan()
            var head = ResponseHead()
            var outcome = ResponseScan.Outcome.incomplete
            for end in [split, text.count] {
                outcome = text[..<end].withUnsafeBytes { scan.scan($0, into: &head) }
                if end == split && split < text.count { XCTAssertEqual(outcome, .incomplete, "split at \(split)") }
            }
            XCTAssertEqual(outcome, .complete(end: text.count), "split at \(split)")
            XCTAssertEqual(scan.framing(bodyless: false), .length(12))
            XCTAssertEqual(head.fields.map(\.value), ["s", "12", "keep-alive", "caf\u{e9} au lait"], "split at \(split)")
        }
    }

    // MARK: - Chunked bodies

    private static var chunkedBodies: [String] {
        let valid = ["0\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", "5;ext=1\r\nhello\r\n6 ;a\r\n world\r\n0\r\n\r\n",
                     "A\r\n0123456789\r\n0\r\nX-T: t\r\nY: \r\n\r\n", "00005\r\nhello\r\n000\r\n\r\n", "1\r\nx\r\n1\r\ny\r\n0;z\r\n\r\n",
                     "f\r\n0123456789abcde\r\n0\r\n\r\n"].map { Array($0.utf8) }
        let inserted: [UInt8] = [0x0D, 0x0A, 0x20, 0x09, 0x00, 0x3B, 0x3A, 0x7F, 0x61, 0x30, 0x67]
        var random = Lehmer(seed: 7)
        var bodies = valid.map { String(decoding: $0, as: UTF8.self) }
        for _ in 0..<3000 {
            var bytes = valid[random.next(valid.count)]
            let at = random.next(bytes.count)
            switch random.next(3) {
            case 0: bytes.remove(at: at)
            case 1: bytes.insert(inserted[random.next(inserted.count)], at: at)
            default: bytes[at] = inserted[random.next(inserted.count)]
            }
            bodies.append(String(decoding: bytes, as: UTF8.self))
        }
        return bodies
    }

    func testChunkedBodiesAreDecodedAsLibhttpParserDecodesThemAndNothingItRefusesIsAccepted() {
        var decodedByBoth = 0
        for text in Self.chunkedBodies {
            let body = Array(text.utf8)
            // Fed whole and a byte a read: the same outcome.
            let mine = decode(body, split: body.count), trickled = decode(body, split: 1)
            XCTAssertEqual(mine.data, trickled.data, text.debugDescription)
            XCTAssertEqual(mine.end, trickled.end, text.debugDescription)
            let oracle = Oracle(bodyless: false)
            defer { oracle.close() }
            let accepted = oracle.feed(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8))
                && oracle.feed(Array(body[..<(mine.end ?? body.count)]))
            if mine.end != nil {
                // Fed up to the decoder's end, the parser ends there too, with the same data.
                XCTAssertTrue(accepted && oracle.messageComplete, "the parser refuses what the decoder accepts: \(text.debugDescription)")
                XCTAssertEqual(mine.data, oracle.body, text.debugDescription)
                decodedByBoth += 1
            } else if !accepted {
                XCTAssertTrue(mine.refused, "the decoder waits on what the parser refuses: \(text.debugDescription)")
            }
        }
        XCTAssertGreaterThan(decodedByBoth, 300)
    }

    private func decode(_ body: [UInt8], split: Int) -> (data: [UInt8], end: Int?, refused: Bool) {
        let (data, outcome) = readChunked(body, split: split, maxTrailerBytes: 64)
        switch outcome {
        case .ended(let end): return (data, end, false)
        case .invalid: return (data, nil, true)
        case .more, .data: return (data, nil, false)
        }
    }

    func testChunkedFramingRefusals() {
        for (body, problem) in [("5\r\nhelloX\r\n0\r\n\r\n", "chunk data is not followed by CRLF"), ("5\nhello\r\n", "a chunk-size line ends in LF without CR"),
                                ("FFFFFFFFFFFFFFFFF\r\n", "a chunk size overflows"), ("5 x\r\n", "a space after a chunk size is not followed by an extension"),
                                ("0;a\u{01}\r\n", "a chunk extension holds a control character"), ("0\r\n a: b\r\n\r\n", "a trailer line starts with whitespace (obsolete line folding)"),
                                ("0\r\nX: \(String(repeating: "t", count: 80))\r\n\r\n", "the trailers exceed 64 bytes"), ("g\r\n", "a chunk-size line does not start with a hex digit"),
                                ("1;\(String(repeating: "a", count: 4100))\r\n", "a chunk-size line is too long")] {
            var chunks = ChunkedBody(maxTrailerBytes: 64)
            var index = 0
            let bytes = Array(body.utf8)
            var outcome = bytes.withUnsafeBytes { chunks.next($0, from: &index) }
            while case .data = outcome { outcome = bytes.withUnsafeBytes { chunks.next($0, from: &index) } }
            XCTAssertEqual(outcome, .invalid(problem), body.debugDescription)
        }
    }
}

/// libhttp-parser in response mode, as the gateway used it: told after each head whether the response has no body
/// (a HEAD request; 1xx, 204, 304), keeping the body bytes and the readings at the end of the message.
private final class Oracle {
    private let parser = UnsafeMutablePointer<http_parser>.allocate(capacity: 1)
    let bodyless: Bool
    private(set) var status: Int?
    private(set) var isChunked = false
    private(set) var contentLength: UInt64?
    private(set) var messageComplete = false
    private(set) var keepAlive = false
    fileprivate(set) var body: [UInt8] = []

    init(bodyless: Bool) {
        self.bodyless = bodyless
        http_parser_init(parser, HTTP_RESPONSE)
        parser.pointee.data = Unmanaged.passUnretained(self).toOpaque()
    }

    func close() { parser.deallocate() }

    /// False when the parser refuses the bytes (or stops before their end).
    func feed(_ bytes: [UInt8]) -> Bool {
        let consumed = bytes.withUnsafeBytes { http_parser_execute(parser, &oracleSettings, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
        guard chp_errno(parser) != HPE_PAUSED.rawValue else { return parser.pointee.upgrade == 0 }  // the message ended
        return chp_errno(parser) == HPE_OK.rawValue && consumed == bytes.count && parser.pointee.upgrade == 0
    }

    func feedEnd() -> Bool {
        _ = http_parser_execute(parser, &oracleSettings, nil, 0)
        return chp_errno(parser) == HPE_OK.rawValue || chp_errno(parser) == HPE_PAUSED.rawValue
    }

    /// Before the end of the message (a long body is not fed).
    var keepAliveSoFar: Bool { http_should_keep_alive(parser) != 0 }

    fileprivate static func of(_ parser: UnsafeMutablePointer<http_parser>?) -> Oracle {
        Unmanaged<Oracle>.fromOpaque(parser!.pointee.data).takeUnretainedValue()
    }

    fileprivate func headersComplete() -> Bool {
        let status = Int(parser.pointee.status_code)
        self.status = status
        isChunked = chp_is_chunked(parser) != 0
        contentLength = parser.pointee.content_length == UInt64.max ? nil : parser.pointee.content_length
        return bodyless || status < 200 || status == 204 || status == 304
    }

    fileprivate func completed() {
        messageComplete = true
        keepAlive = http_should_keep_alive(parser) != 0
        http_parser_pause(parser, 1)  // one message: what follows is not read
    }
}

nonisolated(unsafe) private var oracleSettings: http_parser_settings = {
    var settings = http_parser_settings()
    settings.on_headers_complete = { Oracle.of($0).headersComplete() ? 1 : 0 }
    settings.on_body = { parser, at, length in
        Oracle.of(parser).body += UnsafeRawBufferPointer(start: at, count: length)
        return 0
    }
    settings.on_message_complete = { parser in
        Oracle.of(parser).completed()
        return 0
    }
    return settings
}()
