import EventLoop
import Foundation
import HTTPServer
import Upstream
import Gateway
import TestSupport
import XCTest

/// The event-loop server over real loopback sockets, driven by a raw client so framing is exact.
final class HTTPServerTests: XCTestCase {
    private func start(_ handler: TestHandler, limits: ServerLimits = ServerLimits(workers: 2)) throws -> HTTPServer {
        try startServer(handler, limits: limits)
    }

    // MARK: - What reaches the handler

    func testPortZeroBindsAFreePort() throws {
        let server = try start(TestHandler())
        XCTAssertGreaterThan(server.port, 0)
        let client = try RawHTTPClient(port: server.port)
        try client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try client.readResponse().text, "ok")
    }

    func testRawPathAndQueryArriveUndecoded() throws {
        let handler = TestHandler()
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        for target in ["/a%2Fb?x=%20", "/plain", "/empty?"] {
            try client.send("GET \(target) HTTP/1.1\r\nHost: t\r\n\r\n")
            XCTAssertEqual(try client.readResponse().status, 200)
        }
        let seen = handler.requests.map { [$0.path, $0.query ?? "<nil>"] }
        XCTAssertEqual(seen, [["/a%2Fb", "x=%20"], ["/plain", "<nil>"], ["/empty", ""]])
    }

    func testRequestPartsArriveAndResponsePartsLeave() throws {
        let handler = TestHandler { request in
            HTTPResponse(status: 201, headers: [HTTPField("X-Reply", "yes"),
                                                HTTPField("Content-Length", "999")],
                         body: .bytes(Array("echo:".utf8) + request.body))
        }
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /p HTTP/1.1\r\nHost: t\r\nX-One: 1\r\nx-one: 2\r\nContent-Length: 5\r\n\r\nhello")
        let response = try client.readResponse()

        XCTAssertEqual(response.status, 201)
        XCTAssertEqual(response.header("X-Reply"), "yes")
        XCTAssertEqual(response.text, "echo:hello")
        XCTAssertEqual(response.header("Content-Length"), "10", "the server frames the body; the handler's length is dropped")
        let request = try XCTUnwrap(handler.requests.first)
        XCTAssertEqual(request.method, "POST")
        XCTAssertEqual(request.httpVersion, "HTTP/1.1")
        XCTAssertEqual(request.clientAddress, "127.0.0.1")
        XCTAssertEqual(request.body, Array("hello".utf8))
        XCTAssertEqual(request.headers.values(named: "X-ONE"), ["1", "2"])
        XCTAssertEqual(request.headers.map(\.name), ["Host", "X-One", "x-one", "Content-Length"])
    }

    func testChunkedUploadWithinLimitArrivesWhole() throws {
        let handler = TestHandler(defaultLimit: 16)
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        XCTAssertEqual(try client.readResponse().status, 200)
        XCTAssertEqual(handler.requests.first?.body, Array("hello world".utf8))
    }

    func testKeepAliveServesTwoRequestsOnOneSocket() throws {
        let handler = TestHandler { request in HTTPResponse(status: 200, body: .bytes(Array(request.path.utf8))) }
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("GET /one HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try client.readResponse().text, "/one")
        try client.send("POST /two HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi")
        XCTAssertEqual(try client.readResponse().text, "/two")
        XCTAssertEqual(handler.requests.map(\.path), ["/one", "/two"])
    }

    func testConnectionCloseAndHTTP10KeepAliveAreHonoured() throws {
        let server = try start(TestHandler())
        let closing = try RawHTTPClient(port: server.port)
        try closing.send("GET /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        XCTAssertEqual(try closing.readResponse().header("Connection"), "close")
        XCTAssertTrue(closing.peerClosed())
        let old = try RawHTTPClient(port: server.port)
        try old.send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        XCTAssertEqual(try old.readResponse().header("Connection"), "keep-alive", "HTTP/1.0 closes unless told otherwise")
        try old.send("GET /b HTTP/1.0\r\n\r\n")
        let last = try old.readResponse()
        XCTAssertEqual(last.status, 200, "an HTTP/1.0 client that asked for keep-alive gets its second answer")
        XCTAssertEqual(last.header("Connection"), "close")
        XCTAssertTrue(old.peerClosed(), "without keep-alive, HTTP/1.0 ends with the response")
    }

    func testPipelinedRequestsAreAnsweredInOrder() throws {
        let handler = TestHandler { request in HTTPResponse(status: 200, body: .bytes(Array(request.path.utf8))) }
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("GET /a HTTP/1.1\r\nHost: t\r\n\r\nPOST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhiGET /c HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try (0..<3).map { _ in try client.readResponse().text }, ["/a", "/b", "/c"])
    }

    func testFiftyConnectionsAreServedConcurrently() throws {
        let arrived = Counter()
        // Each handler waits for all 50 to be inside at once, on two loop threads: no thread per request.
        let handler = TestHandler { _ in
            _ = arrived.next()
            let deadline = Date().addingTimeInterval(10)
            while arrived.value < 50, Date() < deadline { try? await Task.sleep(nanoseconds: 2_000_000) }
            return HTTPResponse(status: arrived.value >= 50 ? 200 : 503)
        }
        let server = try start(handler)
        let clients = try (0..<50).map { _ in try RawHTTPClient(port: server.port, timeoutSeconds: 15) }
        for (index, client) in clients.enumerated() {
            try client.send("GET /c\(index) HTTP/1.1\r\nHost: t\r\n\r\n")
        }
        let statuses = try clients.map { try $0.readResponse().status }
        XCTAssertEqual(statuses, Array(repeating: 200, count: 50))
    }

    // MARK: - Refused before the handler

    func testOversizedContentLengthGets413WithoutReadingTheBody() throws {
        let handler = TestHandler(defaultLimit: 16)
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 413)
        XCTAssertEqual(response.header("Content-Type"), "application/json")
        XCTAssertEqual(errorReason(response), "body_too_large")
        XCTAssertTrue(client.peerClosed(), "the unread body cannot be skipped, so the connection ends")
        XCTAssertTrue(handler.requests.isEmpty)
    }

    func testOversizedUploadAwaitingContinueGets413InsteadOf100() throws {
        let handler = TestHandler(defaultLimit: 16)
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /big HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n\r\n")
        XCTAssertEqual(try client.readResponse().status, 413, "the client learns before sending the body")
        XCTAssertTrue(handler.requests.isEmpty)
    }

    func testOversizedChunkedUploadGets413() throws {
        let handler = TestHandler(defaultLimit: 16)
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        let chunk = "a\r\n0123456789\r\n"
        try client.send("POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\(chunk)\(chunk)\(chunk)0\r\n\r\n")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 413)
        XCTAssertEqual(errorReason(response), "body_too_large")
        XCTAssertTrue(handler.requests.isEmpty)
    }

    func testEndlessChunkedUploadIsCutOff() throws {
        let handler = TestHandler(defaultLimit: 16)
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        let chunk = Array("4000\r\n".utf8) + [UInt8](repeating: 0x61, count: 0x4000) + Array("\r\n".utf8)
        var sendFailed = false
        for _ in 0..<64 where !sendFailed {  // 1 MiB, far past the drain allowance
            do { try client.send(chunk) } catch { sendFailed = true }
        }
        if !sendFailed {  // the kernel took it all: the answer is waiting, then the end
            XCTAssertEqual(try client.readResponse().status, 413)
            XCTAssertTrue(client.peerClosed(), "the server hangs up instead of reading on")
        }
        XCTAssertTrue(handler.requests.isEmpty)
    }

    func testHandlerLimitTightensTheBodyLimitPerPath() throws {
        let handler = TestHandler(bodyLimits: ["/small": 4])
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /large HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
        XCTAssertEqual(try client.readResponse().status, 200)
        try client.send("POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
        XCTAssertEqual(try client.readResponse().status, 413)
        XCTAssertEqual(handler.requests.map(\.path), ["/large"])
    }

    func testAmbiguousFramingNeverReachesTheHandler() throws {
        let handler = TestHandler()
        let server = try start(handler)
        let cases: [(head: String, status: Int, reason: String?)] = [
            ("Content-Length: 5\r\nTransfer-Encoding: chunked", 400, "ambiguous_framing"),
            ("Content-Length: 5\r\nContent-Length: 6", 400, "ambiguous_framing"),
            ("Transfer-Encoding: gzip, chunked", 501, "unsupported_transfer_encoding"),
            ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", 501, "unsupported_transfer_encoding"),
            ("Content-Length: 5, 6", 400, "ambiguous_framing"),
            ("Content-Length: +5", 400, "ambiguous_framing"),
            ("Transfer-Encoding: chunked, chunked", 501, "unsupported_transfer_encoding"),
        ]
        for (head, status, reason) in cases {
            let client = try RawHTTPClient(port: server.port)
            try client.send("POST /f HTTP/1.1\r\nHost: t\r\n\(head)\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
            let response = try client.readResponse()
            XCTAssertEqual(response.status, status, head)
            if let reason { XCTAssertEqual(errorReason(response), reason, head) }
        }
        XCTAssertTrue(handler.requests.isEmpty)
        XCTAssertTrue(waitUntil { server.inFlightRequests == 0 }, "every request's state is released")
    }

    func testRepeatedIdenticalContentLengthIsRefused() throws {
        // RFC 9112 lets a server accept identical repeats; libhttp-parser refuses them, and so does the gateway.
        let handler = TestHandler()
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("POST /f HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 400)
        XCTAssertEqual(errorReason(response), "ambiguous_framing")
        XCTAssertTrue(handler.requests.isEmpty)
    }

    func testAbsoluteFormFragmentAndNonASCIITargetsAreRefused() throws {
        let handler = TestHandler()
        let server = try start(handler)
        for target in ["http://elsewhere/x", "/a#frag", "/caf\u{E9}"] {
            let client = try RawHTTPClient(port: server.port)
            try client.send("GET \(target) HTTP/1.1\r\nHost: t\r\n\r\n")
            let response = try client.readResponse()
            XCTAssertEqual(response.status, 400, target)
            XCTAssertEqual(errorReason(response), "bad_request_target", target)
        }
        XCTAssertTrue(handler.requests.isEmpty)
    }

    // MARK: - Responses

    func testStreamingBodyArrivesChunkByChunk() throws {
        let release = Gate()
        let step = Counter()
        let stream = ClosureStream {
            switch step.next() {
            case 1: return Array("first".utf8)
            case 2:
                _ = await release.wait()
                return Array("second".utf8)
            default: return nil
            }
        }
        let server = try start(TestHandler { _ in HTTPResponse(status: 200, body: .stream(stream)) })
        let client = try RawHTTPClient(port: server.port)
        try client.send("GET /s HTTP/1.1\r\nHost: t\r\n\r\n")

        let head = try client.readHead()
        XCTAssertEqual(head.status, 200)
        XCTAssertEqual(head.headers.first { $0.name.lowercased() == "transfer-encoding" }?.value, "chunked")
        XCTAssertEqual(try client.readChunk(), Array("first".utf8), "sent while the second is still held back")
        release.release()
        XCTAssertEqual(try client.readChunk(), Array("second".utf8))
        XCTAssertNil(try client.readChunk())
        XCTAssertEqual(stream.closed.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(stream.closeCount, 1)
    }

    func testStreamClosedOnceWhenClientDisconnectsMidStream() throws {
        let sent = Counter()
        let stream = ClosureStream {
            guard sent.next() < 5000 else { return nil }  // bounded: ~10 s at most
            try? await Task.sleep(nanoseconds: 2_000_000)
            return [UInt8](repeating: 0x61, count: 1024)
        }
        let server = try start(TestHandler { _ in HTTPResponse(status: 200, body: .stream(stream)) })
        let client = try RawHTTPClient(port: server.port)
        try client.send("GET /endless HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try client.readHead().status, 200)
        XCTAssertNotNil(try client.readChunk())
        client.disconnect()

        XCTAssertEqual(stream.closed.wait(timeout: .now() + 5), .success)
        XCTAssertLessThan(sent.value, 5000, "the stream stopped because the client left, not because it ended")
        XCTAssertTrue(waitUntil { server.inFlightRequests == 0 })
        XCTAssertEqual(stream.closeCount, 1)
    }

    func testStreamFailureAbortsInsteadOfEndingCleanly() throws {
        struct UpstreamBroke: Error {}
        let step = Counter()
        let stream = ClosureStream {
            guard step.next() == 1 else { throw UpstreamBroke() }
            return Array("partial".utf8)
        }
        let server = try start(TestHandler { _ in HTTPResponse(status: 200, body: .stream(stream)) })
        let client = try RawHTTPClient(port: server.port)
        try client.send("GET /broken HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try client.readHead().status, 200)
        XCTAssertEqual(try client.readChunk(), Array("partial".utf8))
        XCTAssertThrowsError(try client.readChunk(), "no terminating chunk: the client must see a truncated body")
        XCTAssertEqual(stream.closed.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(stream.closeCount, 1)
    }

    func testTheBodyOfOneReadReachesTheConsumerInOnePiece() throws {
        // One-byte chunks are one parser callback each; passed on one by one, each was a write upstream.
        let loops = try (0..<1).map { try EventLoop(name: "pieces-\($0)") }
        loops.forEach { $0.start() }
        let server = try HTTPServer(address: "127.0.0.1:0", limits: ServerLimits(workers: 1), handler: PieceCounter(), loops: loops)
        defer {
            server.closeAll()
            loops.forEach { $0.stop() }
        }
        let client = try RawHTTPClient(port: server.port)
        let chunks = String(repeating: "1\r\na\r\n", count: 20_000)
        try client.send("POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\(chunks)0\r\n\r\n")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 200)
        let counts = response.text.split(separator: " ").compactMap { Int($0) }
        XCTAssertEqual(counts.last, 20_000, "every byte arrived")
        XCTAssertLessThanOrEqual(counts.first ?? .max, 50, "a piece per read (\(response.text)), not per chunk")
    }

    func testInvalidResponseHeaderBecomesJSON500() throws {
        let handler = TestHandler { _ in
            HTTPResponse(status: 200, headers: [HTTPField("X-Bad", "a\r\nInjected: yes")])
        }
        let server = try start(handler)
        let client = try RawHTTPClient(port: server.port)
        try client.send("GET /h HTTP/1.1\r\nHost: t\r\n\r\n")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 500)
        XCTAssertEqual(errorReason(response), "invalid_response_header")
        XCTAssertNil(response.header("Injected"))
    }

    // MARK: - Lifecycle

    func testDrainFinishesInFlightClosesIdleAndRefusesNew() throws {
        let release = Gate()
        let handler = TestHandler { request in
            if request.path == "/slow" { _ = await release.wait() }
            return HTTPResponse(status: 200)
        }
        let server = try start(handler)
        let idle = try RawHTTPClient(port: server.port)
        try idle.send("GET /fast HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try idle.readResponse().header("Connection"), nil, "kept alive before the drain")
        let busy = try RawHTTPClient(port: server.port)
        try busy.send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        // The first request's exchange ends when its last write completes, a moment after the client read it.
        XCTAssertTrue(waitUntil { handler.requests.count == 2 && server.inFlightRequests == 1 })
        XCTAssertEqual(server.activeConnections, 2)

        server.drain()
        XCTAssertTrue(idle.peerClosed(), "an idle keep-alive connection is closed at once")
        XCTAssertThrowsError(try RawHTTPClient(port: server.port), "new connections are refused")
        release.release()
        let response = try busy.readResponse()
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.header("Connection"), "close", "the in-flight request finishes, then its connection ends")
        XCTAssertTrue(busy.peerClosed())
        XCTAssertTrue(waitUntil { server.inFlightRequests == 0 && server.activeConnections == 0 })
    }

    func testAddressInUseAndBadAddressesAreTypedErrors() throws {
        let first = try start(TestHandler())
        let loop = try EventLoop(name: "second")
        loop.start()
        defer { loop.stop() }
        XCTAssertThrowsError(try HTTPServer(address: "127.0.0.1:\(first.port)", limits: ServerLimits(),
                                            handler: TestHandler(), loops: [loop])) { error in
            XCTAssertEqual((error as? HTTPServerError)?.reasonCode, "start_failed")
        }
        XCTAssertThrowsError(try HTTPServer(address: "localhost:80", limits: ServerLimits(), handler: TestHandler(), loops: [loop])) {
            XCTAssertEqual(($0 as? HTTPServerError)?.reasonCode, "invalid_address")
        }
    }

    func testListenAddressForms() throws {
        XCTAssertEqual(try ListenAddress("127.0.0.1:8080").description, "127.0.0.1:8080")
        XCTAssertEqual(try ListenAddress("[::1]:8080").family, .ipv6)
        XCTAssertEqual(try ListenAddress(":8080").host, "0.0.0.0")
        for bad in ["127.0.0.1", "::1:8080", "[::1]8080", "127.0.0.1:65536", "127.0.0.1:-1", "example.com:80",
                    "127.0.0.1:", "[127.0.0.1]:80"] {
            XCTAssertThrowsError(try ListenAddress(bad), bad)
        }
    }
}

/// Streams the request body and answers "<pieces> <bytes>": how it reached the consumer.
private final class PieceCounter: AsyncHTTPHandler, @unchecked Sendable {
    func handle(_ exchange: HTTPExchange) async {
        let counts = await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
            var pieces = 0, bytes = 0
            exchange.streamBody(limit: 1 << 20, sink: { piece in
                pieces += 1
                bytes += piece.count
                return true
            }, end: { error in continuation.resume(returning: error == nil ? "\(pieces) \(bytes)" : "failed") })
        }
        await exchange.send(HTTPResponse(status: 200, body: .bytes(Array(counts.utf8))))
    }
}
