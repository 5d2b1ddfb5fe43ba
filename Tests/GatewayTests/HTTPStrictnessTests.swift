import EventLoop
import Foundation
import HTTPServer
import TestSupport
import Upstream
import XCTest

/// RFC 9112 strictness, timeouts and limits of the event-loop server: what a lenient upstream could read
/// differently is refused with 400 before any handler runs; slow, idle and non-reading clients are cut off.
final class HTTPStrictnessTests: XCTestCase {
    private func start(_ handler: TestHandler, limits: ServerLimits = ServerLimits(workers: 1)) throws -> HTTPServer {
        try startServer(handler, limits: limits)
    }

    func testResponseHeaderValuesWithALineBreakOrNULAreUnsafeAtEveryOffset() {
        // The check reads eight bytes at a time: every offset, in whole words and in the tail, and bytes next to
        // the forbidden ones (0x8D, 0x0B, 0x01, 0x80) that a lane test could mistake for them.
        for length in 0...25 {
            let clean = (0..<length).map { UInt8([0x61, 0x8D, 0x0B, 0x01, 0x80, 0x20, 0x09, 0xC3][$0 % 8]) }
            XCTAssertTrue([HTTPField("X-Value", String(decoding: clean, as: UTF8.self))].areSafeToSend, "length \(length)")
            for offset in 0..<length {
                for forbidden: UInt8 in [0x0D, 0x0A, 0x00] {
                    var bytes = Array(repeating: UInt8(ascii: "v"), count: length)
                    bytes[offset] = forbidden
                    XCTAssertFalse([HTTPField("X-Value", String(decoding: bytes, as: UTF8.self))].areSafeToSend, "\(forbidden) at \(offset) of \(length)")
                }
            }
        }
    }

    func testEachStrictnessViolationIs400AndNeverReachesTheHandler() throws {
        let handler = TestHandler()
        let server = try start(handler)
        let cases: [(request: [UInt8], reason: String)] = [
            (Array("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n 0\r\n\r\nabcd".utf8), "obs_fold"),
            (Array("GET /x HTTP/1.1\r\nHost: t\r\nX-A: a".utf8) + [0] + Array("b\r\n\r\n".utf8), "bad_header"),
            (Array("GET /x HTTP/1.1\r\nHost: t\r\nX-A: a\u{1}b\r\n\r\n".utf8), "bad_header"),
            (Array("GET /x HTTP/1.1\r\nHost : t\r\n\r\n".utf8), "bad_header"),
            (Array("GET /x HTTP/1.1\r\nHost: t\r\nX(A): b\r\n\r\n".utf8), "bad_header"),
            (Array("GET /x HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n".utf8), "duplicate_host"),
            (Array("GET /x HTTP/1.1\r\n\r\n".utf8), "missing_host"),
            (Array("GET /x HTTP/1.1\r\nHost: user@t\r\n\r\n".utf8), "bad_host"),
            (Array("GET /x HTTP/1.2\r\nHost: t\r\n\r\n".utf8), "unsupported_http_version"),
            (Array("GET /x HTTP/2.0\r\nHost: t\r\n\r\n".utf8), "unsupported_http_version"),
            (Array("GET /x HTTP/1.1\nHost: t\n\n".utf8), "bare_lf"),
            (Array("GET /x HTTP/1.1\r\nHost: t\nX: y\r\n\r\n".utf8), "bare_lf"),
            (Array("GET  /x HTTP/1.1\r\nHost: t\r\n\r\n".utf8), "bad_request_line"),
            // Thousands of names in Connection only make the header rules work (a real request lists one or two).
            (Array("GET /x HTTP/1.1\r\nHost: t\r\nConnection: \((0...32).map { "x-\($0)" }.joined(separator: ","))\r\n\r\n".utf8),
             "bad_header"),
        ]
        for (request, reason) in cases {
            let client = try RawHTTPClient(port: server.port)
            try client.send(request)
            let response = try client.readResponse()
            XCTAssertEqual(response.status, 400, reason)
            XCTAssertEqual(errorReason(response), reason, String(decoding: request, as: UTF8.self))
            XCTAssertEqual(response.header("Connection"), "close")
            XCTAssertTrue(client.peerClosed(), reason)
        }
        XCTAssertTrue(handler.requests.isEmpty)
        XCTAssertEqual(handler.rejected.count, cases.count, "each refusal is reported for the log and metrics")
    }

    /// libhttp-parser (non-strict) accepts each of these; a front proxy passing chunked bodies through as they
    /// are could read them otherwise. Each is 400 bad_chunked_body and the handler never gets a body.
    func testChunkedFramingOutsideTheGrammarIs400AndNeverReachesTheHandler() throws {
        let handler = TestHandler()
        let server = try start(handler)
        let head = Array("POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        let bodies: [[UInt8]] = [
            Array("5\r\nhelloXY5\r\nworldZZ0\r\n\r\n".utf8),  // the two bytes after chunk data are not CRLF
            Array("5\r\nhello\rX0\r\n\r\n".utf8),
            Array("5\r\nhello\n0\r\n\r\n".utf8),
            Array("5\nhello\r\n0\r\n\r\n".utf8),  // bare LF after the size
            Array("5;ext=a".utf8) + [0] + Array("b\r\nhello\r\n0\r\n\r\n".utf8),  // NUL in an extension
            Array("5;ext=\u{1}\r\nhello\r\n0\r\n\r\n".utf8),
            Array("5 \r\nhello\r\n0\r\n\r\n".utf8),  // whitespace with no extension after it
            Array(" 5\r\nhello\r\n0\r\n\r\n".utf8),
            Array("0x5\r\nhello\r\n0\r\n\r\n".utf8),
            Array("\r\n0\r\n\r\n".utf8),  // an empty size
            Array("0\r\nX-T: a\r\n folded\r\n\r\n".utf8),  // obs-fold in a trailer
            Array("0\r\nX T: a\r\n\r\n".utf8),  // a space in a trailer name
            Array("0\r\nX-T : a\r\n\r\n".utf8),
            Array("0\r\nX-T: a\nX-U: b\r\n\r\n".utf8),  // bare LF in trailers
            Array("0\r\nX-T: a\u{1}\r\n\r\n".utf8),
            Array("0\r\n\r\r".utf8),
        ]
        for body in bodies {
            let client = try RawHTTPClient(port: server.port)
            try client.send(head + body)
            let response = try client.readResponse()
            let shown = String(decoding: body, as: UTF8.self).debugDescription
            XCTAssertEqual(response.status, 400, shown)
            XCTAssertEqual(errorReason(response), "bad_chunked_body", shown)
        }
        XCTAssertTrue(handler.requests.isEmpty)
        // Well-framed: extensions, trailers, upper-case hex, arriving a byte per read; then a pipelined request.
        let client = try RawHTTPClient(port: server.port)
        try client.send(head)
        for byte in Array("A;name=\"v a\"\r\n0123456789\r\n2 ;x\r\nab\r\n0\r\nX-Sum: 1\r\n\r\n".utf8) {
            try client.send([byte])
            usleep(200)
        }
        try client.send("GET /next HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try client.readResponse().status, 200)
        XCTAssertEqual(try client.readResponse().status, 200)
        XCTAssertEqual(handler.requests.map(\.body), [Array("0123456789ab".utf8), []])
    }

    func testTransferEncodingWithTrailingSpaceIsFramedOneWayOnly() throws {
        let handler = TestHandler()
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        // Either both the judge and the parser read it as chunked, or the request is refused: never a
        // body framed one way by the check and another by the parser (and a pipelined request swallowed).
        try client.send("POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked \r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n")
        let first = try client.readResponse()
        if first.status == 200 {
            XCTAssertEqual(handler.requests.first?.body, Array("hello".utf8))
            XCTAssertEqual(try client.readResponse().status, 200)
            XCTAssertEqual(handler.requests.map(\.path), ["/a", "/b"])
        } else {
            XCTAssertEqual(first.status, 400)
            XCTAssertTrue(handler.requests.isEmpty)
        }
    }

    /// Over `max_header_bytes`: a long field is 431, a long request target 414 (what it is the client can fix).
    func testHeadsOverTheLimitGet431OrForALongTarget414() throws {
        let server = try start(TestHandler(), limits: ServerLimits(workers: 1, maxHeaderBytes: 2048))
        let long = String(repeating: "a", count: 4096)
        for (head, status, reason) in [("GET /x HTTP/1.1\r\nHost: t\r\nX-Big: \(long)\r\n\r\n", 431, "headers_too_large"),
                                       ("GET /\(long) HTTP/1.1\r\nHost: t\r\n\r\n", 414, "uri_too_long")] {
            let client = try RawHTTPClient(port: server.port)
            try client.send(head)
            let response = try client.readResponse()
            XCTAssertEqual(response.status, status)
            XCTAssertEqual(errorReason(response), reason)
        }
    }

    func testBigHeadsInFlightCountAgainstTheMemoryBudget() throws {
        let release = Gate()
        let handler = TestHandler { _ in
            _ = await release.wait()
            return HTTPResponse(status: 200)
        }
        let server = try start(handler, limits: ServerLimits(workers: 1, maxHeaderBytes: 65_536, maxBufferedBodyBytes: 65_536))
        let big = "GET /x HTTP/1.1\r\nHost: t\r\nX-Big: \(String(repeating: "a", count: 40_000))\r\n\r\n"
        let first = try RawHTTPClient(port: server.port)
        try first.send(big)
        XCTAssertTrue(waitUntil { server.inFlightRequests == 1 })
        let second = try RawHTTPClient(port: server.port)
        try second.send(big)
        let refused = try second.readResponse()
        XCTAssertEqual(refused.status, 503, "two 40 KB heads do not fit a 64 KiB budget")
        XCTAssertEqual(errorReason(refused), "server_busy")
        XCTAssertNotNil(refused.header("Retry-After"))
        release.release()
        XCTAssertEqual(try first.readResponse().status, 200)
        let third = try RawHTTPClient(port: server.port)
        try third.send(big)
        XCTAssertEqual(try third.readResponse().status, 200, "the first head's bytes were given back")
    }

    /// Heads still arriving count too (beyond their first 4 KiB): 12,000 connections each holding 32 KiB of an
    /// unfinished head took 260 MiB, bounded only by their number.
    func testUnfinishedHeadsCountAgainstTheMemoryBudget() throws {
        let server = try start(TestHandler(), limits: ServerLimits(workers: 1, maxHeaderBytes: 65_536, maxBufferedBodyBytes: 65_536))
        let partial = "GET /x HTTP/1.1\r\nHost: t\r\nX-Big: \(String(repeating: "a", count: 30_000))"
        let holding = try (0..<2).map { _ in try RawHTTPClient(port: server.port) }
        for client in holding { try client.send(partial) }
        XCTAssertTrue(waitUntil { server.bufferedBytes == 2 * 28 * 1024 }, "both heads read: \(server.bufferedBytes)")
        let third = try RawHTTPClient(port: server.port)
        try third.send(partial)
        let refused = try third.readResponse()
        XCTAssertEqual(refused.status, 503, "three unfinished 30 KB heads do not fit a 64 KiB budget")
        XCTAssertEqual(errorReason(refused), "server_busy")
        holding.forEach { $0.disconnect() }
        XCTAssertTrue(waitUntil { server.activeConnections == 0 })
        XCTAssertEqual(server.bufferedBytes, 0, "every reservation given back")
        let fourth = try RawHTTPClient(port: server.port)
        try fourth.send(partial + "\r\n\r\n")
        XCTAssertEqual(try fourth.readResponse().status, 200, "the closed connections gave their heads' bytes back")
    }

    /// Bytes pipelined behind a running exchange count as well: they hold memory just like a head does.
    func testPipelinedBytesCountAgainstTheMemoryBudget() throws {
        let release = Gate()
        let handler = TestHandler { _ in
            _ = await release.wait()
            return HTTPResponse(status: 200)
        }
        let server = try start(handler, limits: ServerLimits(workers: 1, maxHeaderBytes: 65_536, maxBufferedBodyBytes: 65_536))
        let busy = try RawHTTPClient(port: server.port)
        try busy.send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertTrue(waitUntil { server.inFlightRequests == 1 })
        try busy.send("GET /next HTTP/1.1\r\nHost: t\r\nX-Pad: \(String(repeating: "p", count: 50_000))")
        // The first head's bytes, and the pipelined bytes beyond 4 KiB, read while the first exchange runs.
        XCTAssertTrue(waitUntil { server.bufferedBytes >= 44 * 1024 }, "\(server.bufferedBytes)")
        let other = try RawHTTPClient(port: server.port)
        try other.send("GET /x HTTP/1.1\r\nHost: t\r\nX-Big: \(String(repeating: "a", count: 30_000))")
        let refused = try other.readResponse()
        XCTAssertEqual(refused.status, 503, "48 KiB pipelined and a 28 KiB unfinished head do not fit a 64 KiB budget")
        XCTAssertEqual(errorReason(refused), "server_busy")
        release.release()
        XCTAssertEqual(try busy.readResponse().status, 200)
        try busy.send("\r\n\r\n")
        XCTAssertEqual(try busy.readResponse().status, 200, "the pipelined request is served once its turn comes")
        XCTAssertTrue(waitUntil { server.bufferedBytes == 0 }, "every reservation given back: \(server.bufferedBytes)")
    }

    func testSlowHeadIsCutOffAtTheHeaderTimeoutEvenWhileBytesTrickle() throws {
        let handler = TestHandler()
        let server = try start(handler, limits: ServerLimits(workers: 1, headerTimeoutMs: 400))
        let client = try RawHTTPClient(port: server.port)
        let started = Date()
        var refused: RawHTTPClient.Response?
        // One byte every 50 ms (each would reset an idle timeout): the head's deadline still holds.
        for byte in Array("GET /x HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".utf8) {
            do { try client.send([byte]) } catch { break }
            usleep(50_000)
            if Date().timeIntervalSince(started) > 0.6 { break }
        }
        refused = try? client.readResponse()
        XCTAssertEqual(refused?.status, 408)
        XCTAssertEqual(refused.flatMap(errorReason), "header_timeout")
        XCTAssertTrue(client.peerClosed())
        XCTAssertLessThan(Date().timeIntervalSince(started), 3)
        XCTAssertTrue(handler.requests.isEmpty)
    }

    func testIdleKeepAliveConnectionIsClosedAfterItsTimeout() throws {
        let server = try start(TestHandler(), limits: ServerLimits(workers: 1, keepaliveTimeoutMs: 300))
        let client = try RawHTTPClient(port: server.port)
        try client.send("GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try client.readResponse().status, 200)
        XCTAssertEqual(server.activeConnections, 1)
        XCTAssertTrue(client.peerClosed(), "closed by the server, not by the client's receive timeout")
        XCTAssertTrue(waitUntil { server.activeConnections == 0 })
    }

    func testStalledBodyGets408AtTheBodyTimeout() throws {
        let handler = TestHandler()
        let server = try start(handler, limits: ServerLimits(workers: 1, bodyTimeoutMs: 300))
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly part")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 408)
        XCTAssertEqual(errorReason(response), "body_timeout")
        XCTAssertTrue(client.peerClosed())
    }

    func testConnectionsOverTheLimitGetA503NotAReset() throws {
        let handler = TestHandler()
        let server = try start(handler, limits: ServerLimits(workers: 1, connectionLimit: 2))
        let first = try RawHTTPClient(port: server.port)
        let second = try RawHTTPClient(port: server.port)
        XCTAssertTrue(waitUntil { server.activeConnections == 2 })
        let third = try RawHTTPClient(port: server.port)
        let response = try third.readResponse()
        XCTAssertEqual(response.status, 503)
        XCTAssertEqual(errorReason(response), "connection_limit")
        XCTAssertNotNil(response.header("Retry-After"))
        XCTAssertTrue(third.peerClosed())
        XCTAssertEqual(handler.rejected, ["connection_limit"])
        try first.send("GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try first.readResponse().status, 200, "the admitted ones are served")
        _ = second
    }

    /// A trusted proxy's connections carry many clients: the handler exempts its address from the limit.
    func testPerAddressLimitExemptsThePeersTheHandlerNames() throws {
        let handler = TestHandler()
        handler.exemptPeers = ["127.0.0.1"]
        let server = try start(handler, limits: ServerLimits(workers: 1, perIPConnectionLimit: 1))
        let clients = try (0..<3).map { _ in try RawHTTPClient(port: server.port) }
        for client in clients {
            try client.send("GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
            XCTAssertEqual(try client.readResponse().status, 200)
        }
    }

    func testPerAddressLimit() throws {
        let server = try start(TestHandler(), limits: ServerLimits(workers: 1, perIPConnectionLimit: 1))
        let first = try RawHTTPClient(port: server.port)
        XCTAssertTrue(waitUntil { server.activeConnections == 1 })
        let second = try RawHTTPClient(port: server.port)
        let response = try second.readResponse()
        XCTAssertEqual(response.status, 503)
        XCTAssertEqual(errorReason(response), "per_ip_connection_limit")
        first.disconnect()
        XCTAssertTrue(waitUntil { server.activeConnections == 0 })
        let third = try RawHTTPClient(port: server.port)
        try third.send("GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try third.readResponse().status, 200, "a closed connection gives its slot back")
    }

    func testClientThatNeverReadsIsCutOffAndTheProducerStops() throws {
        let produced = Counter()
        let stream = ClosureStream {
            guard produced.next() <= 4096 else { return nil }  // 256 MiB if nothing held it back
            return [UInt8](repeating: 0x61, count: 64 * 1024)
        }
        let server = try start(TestHandler { _ in HTTPResponse(status: 200, body: .stream(stream)) },
                               limits: ServerLimits(workers: 1, sendTimeoutMs: 500))
        let client = try RawHTTPClient(port: server.port, timeoutSeconds: 10)
        try client.send("GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        // Never reads: the server may queue a bounded amount, then the send timeout ends the exchange.
        XCTAssertEqual(stream.closed.wait(timeout: .now() + 10), .success, "the producer is told to stop")
        XCTAssertLessThan(produced.value, 600, "back-pressure: production stopped near what the socket buffers hold")
        XCTAssertTrue(waitUntil { server.inFlightRequests == 0 && server.activeConnections == 0 })
        XCTAssertEqual(stream.closeCount, 1)
    }
}
