import RedisClient
import EventLoop
import AttestStore
import Foundation
import HTTPServer
import AssertionCheck
@testable import Gateway
import TestSupport
import Upstream
import XCTest

/// The proxy's small parts, each on its own: header rules, key cache bounds, metrics text, ids.
final class ProxyPartsTests: XCTestCase {
    func testRequestHeadersDropHopByHopGatewayOwnedAndAppAttestHeaders() {
        let incoming = [
            HTTPField("Host", "api.example"), HTTPField("Connection", "keep-alive, X-Hop"), HTTPField("X-Hop", "1"),
            HTTPField("Keep-Alive", "5"), HTTPField("Transfer-Encoding", "chunked"), HTTPField("Content-Length", "3"),
            HTTPField("Proxy-Authorization", "x"), HTTPField("X-Attest-Status", "verified"), HTTPField("x-attest-anything", "y"),
            HTTPField("X-App-Attest-Assertion", "a"), HTTPField("X-App-Assertion", "b"), HTTPField("X-Forwarded-For", "1.2.3.4"),
            HTTPField("Authorization", "Bearer t"), HTTPField("Cookie", "a=1"), HTTPField("Cookie", "b=2"),
        ]
        let kept = ForwardingRules.requestHeaders(incoming)
        XCTAssertEqual(kept, [HTTPField("Authorization", "Bearer t"), HTTPField("Cookie", "a=1"), HTTPField("Cookie", "b=2")])
    }

    func testHeaderRulesFoldCaseAndKeepUnicodeLowerCasingForOtherBytes() {
        let incoming = [HTTPField("HOST", "a"), HTTPField("X-ATTEST-KEY-ID", "k"), HTTPField("PROXY-Anything", "p"),
                        HTTPField("X-App-Attest-Future", "f"), HTTPField("X-Forwarded-Proto", "https"), HTTPField("Hostx", "kept"),
                        HTTPField("Te", "trailers"), HTTPField("Tex", "kept")]
        XCTAssertEqual(ForwardingRules.requestHeaders(incoming).map(\.name), ["Hostx", "Tex"])
        // A Kelvin sign lower-cases to "k": an upstream's "\u{212A}eep-Alive" is as hop-by-hop as "Keep-Alive".
        let upstream = [HTTPField("\u{212A}eep-Alive", "timeout=5"), HTTPField("Connection", "X-\u{212A}ey"), HTTPField("x-key", "1"),
                        HTTPField("Server", "nginx")]
        XCTAssertEqual(relayed(upstream).map(\.name), ["Server"])
    }

    func testConnectionNamesDropHeadersTheRulesKnowByCode() {
        // Names the rules classify (and would forward) are still hop-by-hop once Connection lists them.
        let incoming = [HTTPField("Connection", "authorization, USER-AGENT"), HTTPField("Authorization", "Bearer t"),
                        HTTPField("User-Agent", "app"), HTTPField("Accept", "*/*")]
        XCTAssertEqual(ForwardingRules.requestHeaders(incoming).map(\.name), ["Accept"])
        let upstream = [HTTPField("Date", "today"), HTTPField("Connection", "Date"), HTTPField("Server", "nginx")]
        XCTAssertEqual(relayed(upstream).map(\.name), ["Server"])
    }

    /// The upstream's fields a client gets, less the gateway's own X-Request-Id.
    private func relayed(_ upstream: [HTTPField]) -> [HTTPField] {
        Array(ForwardingRules.clientResponse(upstream, requestId: "g").headers.dropLast())
    }

    func testClientResponseCarriesOneRequestIdAndTheUpstreamsLength() {
        let upstream = [HTTPField("X-Request-Id", "upstream"), HTTPField("Content-Length", " 12 "), HTTPField("Connection", "close"),
                        HTTPField("Server", "nginx"), HTTPField("x-request-id", "again"), HTTPField("Content-Length", "13")]
        let (headers, length) = ForwardingRules.clientResponse(upstream, requestId: "gateway")
        XCTAssertEqual(headers, [HTTPField("Server", "nginx"), HTTPField("X-Request-Id", "gateway")])
        XCTAssertEqual(length, 12)
        XCTAssertNil(ForwardingRules.clientResponse([HTTPField("Server", "nginx")], requestId: "g").contentLength)
        XCTAssertNil(ForwardingRules.clientResponse([HTTPField("Content-Length", "x")], requestId: "g").contentLength)
    }

    /// The length read from bare digits is the one `Int` reads from the trimmed value, for every other form too.
    func testClientResponseLengthReadsAsIntReadsTheTrimmedValue() {
        for value in ["0", "11", "007", "123456789012345678", "1234567890123456789", "99999999999999999999", "+5", "-0", "-3",
                      "\t42 ", "", " ", "4x", "1 2", "٣"] {
            let length = ForwardingRules.clientResponse([HTTPField("Content-Length", value)], requestId: "g").contentLength
            XCTAssertEqual(length, Int(value.trimmingSpaces), value.debugDescription)
        }
    }

    func testForwardedElementQuotesIPv6Nodes() {
        XCTAssertEqual(ForwardingRules.forwardedElement(client: "203.0.113.9", scheme: "http"), "for=203.0.113.9;proto=http")
        XCTAssertEqual(ForwardingRules.forwardedElement(client: "2001:db8::17", scheme: "https"), "for=\"[2001:db8::17]\";proto=https")
        XCTAssertEqual(ForwardingRules.forwardedElement(client: "", scheme: "http"), "for=;proto=http")
    }

    func testResponseHeadersKeepRepeatsAndDropFraming() {
        let upstream = [HTTPField("Set-Cookie", "a=1"), HTTPField("Set-Cookie", "b=2"), HTTPField("Transfer-Encoding", "chunked"),
                        HTTPField("Connection", "close, X-Internal"), HTTPField("X-Internal", "secret"), HTTPField("Content-Type", "text/plain")]
        XCTAssertEqual(relayed(upstream),
                       [HTTPField("Set-Cookie", "a=1"), HTTPField("Set-Cookie", "b=2"), HTTPField("Content-Type", "text/plain")])
    }

    /// Work, not wall-clock: the thread's CPU time for 8 times the names and headers must grow about 8 times
    /// (linear), far below the 64 times a header-by-name comparison costs. The best of a few runs each.
    func testHeaderRulesAreLinearInConnectionNamesTimesHeaders() {
        func message(_ count: Int) -> [HTTPField] {
            [HTTPField("Connection", (0..<count).map { "X-Hop-\($0)" }.joined(separator: ", "))]
                + (0..<count).map { HTTPField("X-Other-\($0)", "v") }
        }
        func cost(_ headers: [HTTPField]) -> Double {
            (0..<3).map { _ in
                threadCPUSeconds {
                    XCTAssertEqual(ForwardingRules.requestHeaders(headers).count, headers.count - 1)
                    XCTAssertEqual(relayed(headers).count, headers.count - 1)
                }
            }.min()!
        }
        let small = message(500), large = message(4000)
        _ = cost(small)  // warm-up
        let ratio = cost(large) / max(cost(small), 1e-6)
        XCTAssertLessThan(ratio, 24, "8× the input cost \(ratio)× the work")
    }

    private func threadCPUSeconds(_ work: () -> Void) -> Double {
        var before = timespec(), after = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &before)
        work()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &after)
        return Double(after.tv_sec - before.tv_sec) + Double(after.tv_nsec - before.tv_nsec) / 1e9
    }

    /// (R, S) and (R, n − S) both verify: the gateway signs only the low-S spelling, so it can refuse the other.
    func testES256SignaturesAreMintedInTheirLowSSpellingOnly() throws {
        let key = try P256PrivateKey(pem: AppleTestKey.pem)
        for index in 0..<32 {
            let message = Array("message \(index)".utf8)
            let signature = try key.es256Signature(for: message)
            XCTAssertTrue(ECDSASignature.isLowS(signature), "signature \(index)")
            let twin = ECDSASignature.flippedS(signature)
            XCTAssertFalse(ECDSASignature.isLowS(twin))
            XCTAssertEqual(ECDSASignature.lowS(twin), signature)
            XCTAssertTrue(key.publicKey.isValidSignature(try XCTUnwrap(ECDSASignature.der(fromRaw: twin)), for: message), "the twin verifies")
        }
    }

    func testListValuesSplitCommasAcrossRepeatedHeaders() {
        let headers = [HTTPField("X-Forwarded-For", "1.1.1.1, 2.2.2.2"), HTTPField("x-forwarded-for", "3.3.3.3")]
        XCTAssertEqual(ForwardingRules.values("x-forwarded-for", in: headers), ["1.1.1.1", "2.2.2.2", "3.3.3.3"])
    }

    func testKeyCacheStaysBoundedAndKeepsRecentlyUsedKeys() throws {
        let point = try XCTUnwrap(Base64.decode("BCvFuttCS38ktPcKnn5vVDCdJoAMFs8Q7feIIBCcZKQppgMkTVfCrXFWoiE6R+tnSRDGMHBqVtFwzLN1joDVghg="))
        let entry = KeyCache.Entry(publicKey: try P256PublicKey(bytes: point), appID: AppID("TEAMID1234.com.example.app")!,
                                   environment: .production)
        let cache = KeyCache(capacity: 10)
        let hot: [UInt8] = [0xFF]
        cache.store(entry, for: hot)
        for index in 0..<100 {
            cache.store(entry, for: [UInt8(index)])
            XCTAssertNotNil(cache.entry(for: hot), "a key in use survives generation turnover (\(index))")
            XCTAssertLessThanOrEqual(cache.count, 10)
        }
        XCTAssertNil(cache.entry(for: [0]), "an old unused key is gone")
    }

    func testMetricsExposition() {
        let metrics = Metrics()
        metrics.increment("gateway_requests_total", ["route": "/v1/\"ai\"", "decision": "verified"], help: "Requests.")
        metrics.increment("gateway_requests_total", ["route": "/v1/\"ai\"", "decision": "verified"])
        metrics.observe("gateway_request_duration_seconds", ["route": "/"], seconds: 0.003, help: "Latency.")
        metrics.observe("gateway_request_duration_seconds", ["route": "/"], seconds: 20)
        let text = metrics.exposition(extra: [(name: "gateway_key_cache_entries", help: "Keys.", value: 3)])
        XCTAssertTrue(text.contains("# TYPE gateway_requests_total counter\n"))
        XCTAssertTrue(text.contains("gateway_requests_total{route=\"/v1/\\\"ai\\\"\",decision=\"verified\"} 2\n"), text)
        XCTAssertTrue(text.contains("gateway_request_duration_seconds_bucket{route=\"/\",le=\"0.0025\"} 0\n"), text)
        XCTAssertTrue(text.contains("gateway_request_duration_seconds_bucket{route=\"/\",le=\"0.005\"} 1\n"), text)
        XCTAssertTrue(text.contains("gateway_request_duration_seconds_bucket{route=\"/\",le=\"+Inf\"} 2\n"), text)
        XCTAssertTrue(text.contains("gateway_request_duration_seconds_count{route=\"/\"} 2\n"), text)
        XCTAssertTrue(text.contains("gateway_key_cache_entries 3\n"))
        XCTAssertEqual(metrics.counter("gateway_requests_total", ["route": "/v1/\"ai\"", "decision": "verified"]), 2)
    }

    func testRequestIdsAreKeptOnlyWhenSafe() {
        func offered(_ ids: [String]) -> [HTTPField] { [HTTPField("Host", "a")] + ids.map { HTTPField("x-request-ID", $0) } }
        XCTAssertEqual(RequestID.accept(offered(["abc-123_X.y"])), "abc-123_X.y")
        for bad in [["has space"], ["a\"b"], [String(repeating: "a", count: 129)], ["one", "two"], [""]] {
            let id = RequestID.accept(offered(bad))
            XCTAssertNotEqual(id, bad.first)
            XCTAssertEqual(id.count, 24)
            XCTAssertTrue(id.utf8.allSatisfy { Array("0123456789abcdef".utf8).contains($0) }, id)
        }
        XCTAssertNotEqual(RequestID.accept([]), RequestID.accept([]))
    }

    func testLogTimestampsAreRFC3339UTCWithMilliseconds() {
        XCTAssertEqual(EventLog.timestamp(secondsSinceEpoch: 0, milliseconds: 0), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(EventLog.timestamp(secondsSinceEpoch: 1_796_083_199, milliseconds: 7), "2026-11-30T23:59:59.007Z")
        XCTAssertEqual(EventLog.timestamp(secondsSinceEpoch: 951_782_400, milliseconds: 999), "2000-02-29T00:00:00.999Z")
        let now = EventLog.timestamp()
        let parsed = ISO8601DateFormatter.withFractionalSeconds.date(from: now)
        XCTAssertLessThan(abs(parsed?.timeIntervalSinceNow ?? 99), 5, now)
        // A request line's clock formats the second once and reuses it: each stamp still reads the time now,
        // also across a second's boundary.
        var clock = LogClock()
        var previous = Date.distantPast
        for _ in 0..<5 {
            var stamp: [UInt8] = []
            clock.append(to: &stamp)
            let text = String(decoding: stamp, as: UTF8.self)
            let date = try? XCTUnwrap(ISO8601DateFormatter.withFractionalSeconds.date(from: text), text)
            XCTAssertLessThan(abs(date?.timeIntervalSinceNow ?? 99), 5, text)
            XCTAssertGreaterThanOrEqual(date ?? .distantPast, previous, text)
            previous = date ?? previous
            usleep(400_000)
        }
    }

    /// The server's buffered log: lines from several threads, bursts past the pending bound (written by the
    /// logging thread itself) and quiet spells (the writer thread's batches) all reach the file whole, once,
    /// each thread's in order — also after the writer's buffers were swapped many times.
    func testBufferedLogWritesEveryLineWholeOnceAndInOrder() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("log-\(UUID().uuidString)").path
        defer { unlink(path) }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        XCTAssertGreaterThanOrEqual(descriptor, 0)
        defer { close(descriptor) }
        let log = EventLog(descriptor: descriptor, buffered: true)
        let threads = 4, linesPerThread = 3_000
        let padding = String(repeating: "p", count: 400)  // 12,000 lines of ~0.5 KiB: several 1 MiB bursts
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in 0..<linesPerThread {
                log.request(level: .info, TestFields([("thread", .int(thread)), ("index", .int(index)), ("padding", .string(padding))]))
                if index % 1_000 == 0 { usleep(20_000) }  // let the writer thread take a few batches
            }
        }
        log.close()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let lines = text.split(separator: "\n")
        XCTAssertEqual(lines.count, threads * linesPerThread)
        var next = [Int](repeating: 0, count: threads)
        for line in lines {
            let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let thread = try XCTUnwrap(object["thread"] as? Int), index = try XCTUnwrap(object["index"] as? Int)
            XCTAssertEqual(index, next[thread], "thread \(thread)'s lines out of order")
            next[thread] = index + 1
        }
        XCTAssertEqual(next, [Int](repeating: linesPerThread, count: threads))
    }

    func testSecureRandomBytesDiffer() {
        let first = SecureRandom.bytes(32), second = SecureRandom.bytes(32)
        XCTAssertEqual(first.count, 32)
        XCTAssertNotEqual(first, second)
        XCTAssertEqual(SecureRandom.bytes(0), [])
    }

    func testQueryStringKeepsPlusSigns() {
        XCTAssertEqual(QueryString.value(of: "key_id", in: "a=1&key_id=ab%2Bc/d=="), "ab+c/d==")
        XCTAssertEqual(QueryString.value(of: "key_id", in: "key_id=ab+c"), "ab+c")
        XCTAssertNil(QueryString.value(of: "key_id", in: "other=1"))
        XCTAssertNil(QueryString.value(of: "key_id", in: nil))
    }

    func testEveryErrorMapsToOneStatus() {
        let cases: [(GatewayError, Int, String)] = [
            (.verification(VerificationError(.badCBOR, "")), 400, "bad_cbor"),
            (.verification(VerificationError(.signatureInvalid, "")), 401, "signature_invalid"),
            (.verification(VerificationError(.counterNotIncreasing, "")), 409, "counter_not_increasing"),
            (.assertionMissing(""), 401, "assertion_missing"), (.challengeReused, 409, "challenge_reused"),
            (.keyRevoked, 403, "key_revoked"), (.methodNotAllowed(allowed: ["POST"]), 405, "method_not_allowed"),
            (.bodyTooLarge(limit: 1), 413, "body_too_large"), (.storeUnavailable(""), 503, "store_unavailable"),
            (.upstreamUnavailable(""), 502, "upstream_unavailable"), (.upstreamTimeout(""), 504, "upstream_timeout"),
            (GatewayError(UpstreamError.timeout("t")), 504, "upstream_timeout"),
            (GatewayError(StoreError.unavailable("down")), 503, "store_unavailable"),
            (GatewayError(CommitRejection.counterNotIncreasing), 409, "counter_not_increasing"),
            (.alreadyClaimed, 409, "already_claimed"), (.claimInProgress, 409, "claim_in_progress"),
        ]
        for (error, status, code) in cases {
            XCTAssertEqual(error.status, status, code)
            XCTAssertEqual(error.reasonCode, code)
        }
    }

    func testJSONLineEscapesAndParsesBack() throws {
        let bytes = TestFields([("path", .string("/a\"b\\c\nd\u{01}é")), ("status", .int(200)), ("total_ms", .number(1.23456))]).line
        XCTAssertEqual(bytes.last, UInt8(ascii: "\n"))
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(bytes.dropLast())) as? [String: Any])
        XCTAssertEqual(object["path"] as? String, "/a\"b\\c\nd\u{01}é")
        XCTAssertEqual(object["status"] as? Int, 200)
        XCTAssertEqual(object["total_ms"] as? Double, 1.235)
    }

    /// The exact bytes: quote, backslash and newline get their short escapes, other control bytes \u00XX (lower-case
    /// hex), DEL and non-ASCII stay as they are, also at a value's edges, between clean runs and back to back.
    func testJSONLineEscapesExactly() {
        let line = TestFields([("a", .string("\"x\\y\n\t\r\u{01}\u{1F}\u{7F}é😀z\"")), ("b", .string("")), ("c", .string("\u{00}\u{00}")),
                               ("d", .string(String(repeating: "clean/", count: 40))), ("e", .int(Int.min)),
                               ("f", .string("/a/long/path/with/\"/past/eight/bytes\\"))])
        let expected = #"{"a":"\"x\\y\n\u0009\u000d\u0001\u001f"# + "\u{7F}é😀z" + #"\"","b":"","c":"\u0000\u0000","d":""#
            + String(repeating: "clean/", count: 40) + #"","e":-9223372036854775808,"f":"/a/long/path/with/\"/past/eight/bytes\\"}"# + "\n"
        XCTAssertEqual(String(decoding: line.line, as: UTF8.self), expected)
    }

    /// Values are scanned for escapes eight bytes at a time: every byte value in every place of a word, beside
    /// ASCII and non-ASCII neighbours, is flagged exactly when it needs an escape.
    func testJSONLineWordScanFlagsExactlyTheBytesToEscape() {
        for neighbour: UInt8 in [0x21, 0x23, 0x5B, 0x5D, 0x61, 0x7F, 0x80, 0xC3, 0xFF] {
            for byte in UInt8.min...UInt8.max {
                for place in 0..<8 {
                    var word = UInt64(neighbour) &* 0x0101_0101_0101_0101
                    word &= ~(0xFF << (8 * UInt64(place)))
                    word |= UInt64(byte) << (8 * UInt64(place))
                    let needs = byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
                    XCTAssertEqual(JSONLine.mayNeedEscape(word), needs, "byte \(byte) at \(place) among \(neighbour)")
                }
            }
        }
    }

    /// The built-in endpoints are told apart by bytes in place: exactly their names after the prefix, nothing
    /// else (a longer or shorter path, another prefix, a character that continues the prefix's last one).
    func testBuiltinEndpointsAreExactlyTheirNamesAfterThePrefix() {
        for prefix in ["", "/gateway"] {
            for endpoint in BuiltinEndpoints.Endpoint.allCases {
                XCTAssertEqual(BuiltinEndpoints.named(prefix + endpoint.rawValue, after: prefix), endpoint)
                for other in [prefix + endpoint.rawValue + "/", prefix + String(endpoint.rawValue.dropLast()), prefix + endpoint.rawValue.uppercased(),
                              "/x" + prefix + endpoint.rawValue, prefix + "\u{301}" + endpoint.rawValue, prefix + endpoint.rawValue + "\u{301}"] {
                    XCTAssertNil(BuiltinEndpoints.named(other, after: prefix), other)
                }
            }
            XCTAssertNil(BuiltinEndpoints.named(prefix, after: prefix))
            XCTAssertNil(BuiltinEndpoints.named("/pass/items/1", after: prefix))
            XCTAssertNil(BuiltinEndpoints.named("/assert/tokem", after: prefix))
        }
        XCTAssertNil(BuiltinEndpoints.named("/attest/challenge", after: "/gateway"))
        XCTAssertNil(BuiltinEndpoints.named("/gatewax/attest/challenge", after: "/gateway"))
        XCTAssertNil(BuiltinEndpoints.named("/gateway\u{301}/attest/challenge", after: "/gateway"))
        // Not a native string: its bytes are copied out first.
        XCTAssertEqual(BuiltinEndpoints.named(NSString(string: "/gateway/attest/challenge") as String, after: "/gateway"), .attestChallenge)
    }

    /// Durations end on the clock they start on: a start taken with DispatchTime (as some callers do) and the
    /// record's own reading agree.
    func testRequestDurationsReadTheClockDispatchTimeReads() {
        let before = DispatchTime.now().uptimeNanoseconds
        let reading = RequestRecord.uptimeNanoseconds()
        let after = DispatchTime.now().uptimeNanoseconds
        XCTAssertLessThanOrEqual(before, reading)
        XCTAssertLessThanOrEqual(reading, after)
        XCTAssertGreaterThanOrEqual(RequestRecord.milliseconds(since: before), 0)
        XCTAssertLessThan(RequestRecord.milliseconds(since: before), 60_000)
    }

    /// A value is scanned as words (whole ones, the last overlapping; under eight bytes, overlapping halves) and
    /// copied at once when clean: at every length up to three words, a byte that needs an escape is caught in
    /// every place, and clean values (ASCII and non-ASCII bytes) come out as they went in.
    func testJSONLineFindsAnEscapeAtEveryLengthAndPlace() {
        func expected(_ bytes: [UInt8]) -> String {
            bytes.map { byte -> String in
                switch byte {
                case UInt8(ascii: "\""): return #"\""#
                case UInt8(ascii: "\\"): return #"\\"#
                case UInt8(ascii: "\n"): return #"\n"#
                case ..<0x20: return String(format: "\\u%04x", byte)
                default: return String(decoding: [byte], as: UTF8.self)
                }
            }.joined()
        }
        for length in 0...24 {
            let clean = (0..<length).map { UInt8(ascii: "a") + UInt8($0 % 26) }
            XCTAssertEqual(String(decoding: TestFields([("v", .string(String(decoding: clean, as: UTF8.self)))]).line, as: UTF8.self),
                           "{\"v\":\"\(expected(clean))\"}\n")
            for place in 0..<length {
                for byte: UInt8 in [0x00, 0x0A, 0x1F, UInt8(ascii: "\""), UInt8(ascii: "\\")] {
                    var bytes = clean
                    bytes[place] = byte
                    let line = TestFields([("v", .string(String(decoding: bytes, as: UTF8.self)))]).line
                    XCTAssertEqual(String(decoding: line, as: UTF8.self), "{\"v\":\"\(expected(bytes))\"}\n", "byte \(byte) at \(place) of \(length)")
                }
            }
            let wide = String(repeating: "é", count: length)  // bytes 0xC3 0xA9: high bit set, never escaped
            XCTAssertEqual(String(decoding: TestFields([("v", .string(wide))]).line, as: UTF8.self), "{\"v\":\"\(wide)\"}\n")
        }
    }

    /// Numbers are written digit by digit as Swift prints the Double rounded to three decimals (the log's
    /// format before), including the edges: whole numbers, trailing zeros, half-way cases, huge, negative.
    func testJSONLineNumbersReadAsSwiftPrintsTheRoundedDouble() throws {
        var generator = SystemRandomNumberGenerator()
        let edges: [Double] = [0, 0.0004, 0.0005, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.9995, 1, 2, 10, 12.3, 12.05, 100.007,
                               999.9999, 1_234_567.891, 99_999_999_999.999, 1e12, 1e17, -0.0001, -0.5, -12.25, .infinity, .nan]
        let random = (0..<2_000).map { _ in Double.random(in: 0..<100_000, using: &generator) }
            + (0..<2_000).map { _ in Double(Int.random(in: 0..<10_000_000, using: &generator)) / 1000 }
        for value in edges + random {
            let line = TestFields([("n", .number(value))])
            let rounded = (value * 1000).rounded() / 1000
            let expected = rounded.isFinite ? String(rounded) : "null"
            XCTAssertEqual(String(decoding: line.line, as: UTF8.self), "{\"n\":\(expected)}\n", "\(value)")
        }
    }

    func testRequestLinesStartWithTimeLevelAndEvent() throws {
        var descriptors: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&descriptors), 0)
        defer { close(descriptors[0]) }
        let log = EventLog(descriptor: descriptors[1])
        log.request(level: .error, TestFields([("status", .int(502)), ("bytes_in", .int(0)), ("counter", .int(-12)), ("route", .string("/v1/"))]))
        close(descriptors[1])
        let text = String(decoding: FileHandle(fileDescriptor: descriptors[0]).readDataToEndOfFile(), as: UTF8.self)
        let time = try XCTUnwrap(text.firstMatch(of: /^\{"time":"([0-9T:.Z-]{24})",/)?.output.1)
        XCTAssertEqual(text, "{\"time\":\"\(time)\",\"level\":\"error\",\"event\":\"request\",\"status\":502,\"bytes_in\":0,\"counter\":-12,"
                       + "\"route\":\"/v1/\"}\n")
    }

    /// A request line's level and event are one pre-rendered piece per level: each says its level's name.
    func testRequestLinesSayTheirLevelAtEveryLevel() throws {
        for level in LogConfig.Level.allCases {
            XCTAssertEqual(level.requestEvent.description, #""level":""# + level.rawValue + #"","event":"request""#)
            var descriptors: [Int32] = [0, 0]
            XCTAssertEqual(pipe(&descriptors), 0)
            defer { close(descriptors[0]) }
            EventLog(descriptor: descriptors[1]).request(level: level, TestFields([("status", .int(200))]))
            close(descriptors[1])
            let text = String(decoding: FileHandle(fileDescriptor: descriptors[0]).readDataToEndOfFile(), as: UTF8.self)
            XCTAssertNotNil(text.wholeMatch(of: /\{"time":"[0-9T:.Z-]{24}","level":"(\w+)","event":"request","status":200\}\n/), text)
            XCTAssertTrue(text.contains(#""level":"\#(level.rawValue)","#), text)
        }
    }

    func testHeaderNamesCompareIgnoringASCIICaseOnly() {
        XCTAssertTrue(HTTPField("x-app-attest-KEY-id", "").hasName("X-App-Attest-Key-Id"))
        XCTAssertFalse(HTTPField("X-App-Attest-Key-I", "").hasName("X-App-Attest-Key-Id"))
        XCTAssertFalse(HTTPField("X-App-Attest-Key_Id", "").hasName("X-App-Attest-Key-Id"))
        XCTAssertFalse(HTTPField("[", "").hasName("{"), "only letters fold")
    }
}

private extension ISO8601DateFormatter {
    static var withFractionalSeconds: ISO8601DateFormatter {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }
}

/// Fields for the log's tests: keys and values as listed.
private struct TestFields: JSONFields {
    enum Value {
        case string(String)
        case int(Int)
        case number(Double)
    }

    let fields: [(StaticString, Value)]

    init(_ fields: [(StaticString, Value)]) {
        self.fields = fields
    }

    /// The fields as one line.
    var line: [UInt8] {
        var bytes: [UInt8] = []
        JSONLine.append(self, to: &bytes)
        return bytes
    }

    func write<Line: JSONLineWriter & ~Copyable & ~Escapable>(to line: inout Line) {
        for (key, value) in fields {
            switch value {
            case .string(let text): line.string(key, text)
            case .int(let number): line.int(key, number)
            case .number(let number): line.number(key, number)
            }
        }
    }
}
