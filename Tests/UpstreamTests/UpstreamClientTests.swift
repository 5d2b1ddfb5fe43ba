import Foundation
import Synchronization
import Upstream
import TestSupport
import XCTest

/// Real exchanges over loopback with examples/upstream.py.
final class UpstreamClientTests: XCTestCase {
    private var upstream: ExampleUpstream!

    override func setUpWithError() throws {
        upstream = try ExampleUpstream()
    }

    override func tearDown() {
        upstream?.stop()
        upstream = nil
    }

    private func makeClient(timeoutMs: Int = 5000, maxIdle: Int = 64) throws -> UpstreamClient {
        UpstreamClient(target: try UpstreamTarget(
            baseURL: upstream.baseURL, connectTimeoutMs: 2000, timeoutMs: timeoutMs, maxIdleConnections: maxIdle))
    }

    private func echo(_ client: UpstreamClient, _ request: UpstreamRequest) throws -> EchoReport {
        let response = try client.send(request)
        XCTAssertEqual(response.status, 200)
        return try EchoReport(response.readAll(limit: 8 << 20))
    }

    private func assertThrows(
        _ reasonCode: String, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void
    ) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            XCTAssertEqual((error as? UpstreamError)?.reasonCode, reasonCode, "\(error)", file: file, line: line)
        }
    }

    // MARK: - What is forwarded

    func testPostForwardsMethodTargetHeadersAndBodyExactly() throws {
        let client = try makeClient()
        let fields = [
            HTTPField("X-Trace", "abc 123"), HTTPField("X-Multi", "one"), HTTPField("X-Multi", "two"),
            HTTPField("X-Empty", ""), HTTPField("Content-Type", "application/json"),
        ]
        let body = Array(#"{"prompt":"hé"}"#.utf8)
        let report = try echo(client, UpstreamRequest(
            method: "POST", pathAndQuery: "/echo/items%2F7/../x?b=2&a=1+1&c=%20", headers: fields, body: body))

        XCTAssertEqual(report.method, "POST")
        XCTAssertEqual(report.path, "/echo/items%2F7/../x")
        XCTAssertEqual(report.query, "b=2&a=1+1&c=%20")
        XCTAssertEqual(report.body, body)
        let received = report.headerFields
        XCTAssertEqual(received.first?.name, "Host")
        XCTAssertEqual(received.first?.value, "127.0.0.1:\(upstream.port)")
        XCTAssertEqual(received.filter { $0.name == "Content-Length" }.map(\.value), ["\(body.count)"])
        let forwarded = received.filter { $0.name != "Host" && $0.name != "Content-Length" }
        XCTAssertEqual(forwarded.map(\.name), fields.map(\.name))
        XCTAssertEqual(forwarded.map(\.value), fields.map(\.value))
    }

    func testGetAddsNoHeadersOfItsOwn() throws {
        let report = try echo(try makeClient(), UpstreamRequest(method: "GET", pathAndQuery: "/echo?q=1"))
        XCTAssertEqual(report.method, "GET")
        XCTAssertEqual(report.query, "q=1")
        XCTAssertEqual(report.headerFields.map(\.name), ["Host"])
        XCTAssertEqual(report.body, [])
    }

    func testLargeRequestBodyIsSentWithContentLengthAndWithoutExpect() throws {
        let body = (0..<(2 << 20) + 3).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let report = try echo(try makeClient(), UpstreamRequest(
            method: "PUT", pathAndQuery: "/echo/blob",
            headers: [HTTPField("Content-Type", "application/octet-stream")], body: body))
        XCTAssertEqual(report.method, "PUT")
        XCTAssertEqual(report.body, body)
        let names = Set(report.headerFields.map { $0.name.lowercased() })
        XCTAssertEqual(names, ["host", "content-type", "content-length"])
        XCTAssertEqual(report.headerFields.first { $0.name == "Content-Length" }?.value, "\((2 << 20) + 3)")
    }

    func testCallerFramingHeadersAreReplacedByTheBodyLength() throws {
        let report = try echo(try makeClient(), UpstreamRequest(
            method: "POST", pathAndQuery: "/echo",
            headers: [HTTPField("Content-Length", "999"), HTTPField("Transfer-Encoding", "chunked")],
            body: Array("four".utf8)))
        XCTAssertEqual(report.body, Array("four".utf8))
        XCTAssertEqual(report.headerFields.filter { $0.name != "Host" }.map(\.name), ["Content-Length"])
        XCTAssertEqual(report.headerFields.last?.value, "4")
    }

    func testOtherMethodsAreSentAsGiven() throws {
        let client = try makeClient()
        let delete = try echo(client, UpstreamRequest(method: "DELETE", pathAndQuery: "/echo/1"))
        XCTAssertEqual(delete.method, "DELETE")
        XCTAssertFalse(delete.headerFields.contains { $0.name == "Content-Length" })
        let patch = try echo(client, UpstreamRequest(method: "PATCH", pathAndQuery: "/echo/1"))
        XCTAssertEqual(patch.method, "PATCH")
        XCTAssertEqual(patch.headerFields.first { $0.name == "Content-Length" }?.value, "0")
        let deleteWithBody = try echo(client, UpstreamRequest(method: "DELETE", pathAndQuery: "/echo", body: [1, 2, 3]))
        XCTAssertEqual(deleteWithBody.method, "DELETE")
        XCTAssertEqual(deleteWithBody.body, [1, 2, 3])
        // GET, HEAD and TRACE carry no body: an upstream that does not read one would take it for the next request.
        XCTAssertThrowsError(try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/echo", body: [1, 2, 3]))) {
            XCTAssertEqual(($0 as? UpstreamError)?.reasonCode, "upstream_invalid_request")
        }
    }

    // MARK: - Responses

    func testOneHandleCarriesEveryKindOfRequestInTurn() throws {
        // One idle transfer: each request reuses the handle (and connection) the one before it set up.
        let client = try makeClient(maxIdle: 1)
        let post = try echo(client, UpstreamRequest(method: "POST", pathAndQuery: "/echo", body: Array("abc".utf8)))
        XCTAssertEqual(post.method, "POST")
        XCTAssertEqual(post.body, Array("abc".utf8))
        let get = try echo(client, UpstreamRequest(method: "GET", pathAndQuery: "/echo"))
        XCTAssertEqual(get.method, "GET")
        XCTAssertEqual(get.headerFields.map(\.name), ["Host"], "nothing of the POST is left: no body, no Content-Length")
        XCTAssertEqual(get.body, [])
        let head = try client.send(UpstreamRequest(method: "HEAD", pathAndQuery: "/echo"))
        XCTAssertEqual(head.status, 200)
        XCTAssertNil(try head.readBody())
        let afterHead = try echo(client, UpstreamRequest(method: "GET", pathAndQuery: "/echo?after=head"))
        XCTAssertEqual(afterHead.method, "GET")
        XCTAssertEqual(afterHead.query, "after=head")
        let put = try echo(client, UpstreamRequest(method: "PUT", pathAndQuery: "/echo", headers: [HTTPField("X-A", "1")],
                                                   body: Array("x".utf8)))
        XCTAssertEqual(put.method, "PUT")
        XCTAssertEqual(put.body, Array("x".utf8))
        XCTAssertEqual(put.headerFields.map(\.name), ["Host", "X-A", "Content-Length"])
        let delete = try echo(client, UpstreamRequest(method: "DELETE", pathAndQuery: "/echo"))
        XCTAssertEqual(delete.method, "DELETE")
        XCTAssertEqual(delete.headerFields.map(\.name), ["Host"])
        let last = try echo(client, UpstreamRequest(method: "GET", pathAndQuery: "/echo"))
        XCTAssertEqual(last.method, "GET")
        XCTAssertEqual(Set([post, get, afterHead, put, delete, last].map(\.connectionNumber)).count, 1, "one connection throughout")
    }

    func testHeadRequestEndsAfterTheHeadersAndKeepsTheConnection() throws {
        let client = try makeClient()
        let head = try client.send(UpstreamRequest(method: "HEAD", pathAndQuery: "/echo"))
        XCTAssertEqual(head.status, 200)
        XCTAssertGreaterThan(Int(head.headers.values(named: "content-length").first ?? "") ?? 0, 0)
        XCTAssertNil(try head.readBody())
        let next = try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/healthz"))
        XCTAssertTrue(next.timing.reusedConnection)
        XCTAssertEqual(try next.readAll(limit: 100), Array("ok\n".utf8))
    }

    func testRepeatedResponseHeadersAreKeptInOrder() throws {
        let response = try makeClient().send(UpstreamRequest(
            method: "GET", pathAndQuery: "/response-headers?Set-Cookie=a%3D1&X-Other=x&Set-Cookie=b%3D2;%20Path%3D/"))
        XCTAssertEqual(response.headers.values(named: "set-cookie"), ["a=1", "b=2; Path=/"])
        let names = response.headers.map(\.name).filter { ["Set-Cookie", "X-Other"].contains($0) }
        XCTAssertEqual(names, ["Set-Cookie", "X-Other", "Set-Cookie"])
    }

    func testResponseHeaderValuesLoseSurroundingWhitespaceOnly() throws {
        let response = try makeClient().send(UpstreamRequest(
            method: "GET", pathAndQuery: "/response-headers?X-Spaced=%20%20padded%20%20value%09&X-Colon=a:b"))
        XCTAssertEqual(response.headers.values(named: "x-spaced"), ["padded  value"])
        XCTAssertEqual(response.headers.values(named: "x-colon"), ["a:b"])
    }

    func testInterimResponsesAreSkipped() throws {
        let response = try makeClient().send(UpstreamRequest(method: "GET", pathAndQuery: "/early-hints"))
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.headers.values(named: "link"), [])
        XCTAssertEqual(response.headers.values(named: "content-type"), ["text/plain"])
        XCTAssertEqual(try response.readAll(limit: 100), Array("after hints\n".utf8))
    }

    func testErrorStatusesAreResponsesNotErrors() throws {
        let client = try makeClient()
        for code in [404, 503] {
            let response = try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/status/\(code)"))
            XCTAssertEqual(response.status, code)
            XCTAssertEqual(try response.readAll(limit: 100), Array(#"{"status": \#(code)}"#.utf8))
        }
    }

    func testLargeResponseBodiesArriveIntact() throws {
        let client = try makeClient()
        let expected = (0..<(2 << 20)).map { UInt8($0 % 251) }
        for framing in ["", "&chunked=1"] {
            let response = try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/bytes?n=\(2 << 20)\(framing)"))
            XCTAssertEqual(try response.readAll(limit: 4 << 20), expected, "framing \(framing)")
        }
    }

    func testBodyOverTheLimitIsRefused() throws {
        let response = try makeClient().send(UpstreamRequest(method: "GET", pathAndQuery: "/bytes?n=100000"))
        assertThrows("upstream_response_too_large") { _ = try response.readAll(limit: 1000) }
        assertThrows("upstream_response_too_large") { _ = try response.readBody() }
    }

    func testDemoModelEndpoints() throws {
        let client = try makeClient()
        let generated = try client.send(UpstreamRequest(
            method: "POST", pathAndQuery: "/v1/ai/generate",
            headers: [HTTPField("Content-Type", "application/json")], body: Array(#"{"prompt": "hello"}"#.utf8)))
        let answer = try JSONSerialization.jsonObject(with: Data(generated.readAll(limit: 1000))) as? [String: Any]
        XCTAssertEqual(answer?["model"] as? String, "demo")
        XCTAssertEqual(answer?["prompt_chars"] as? Int, 5)
        XCTAssertEqual(answer?["output"] as? String, "demo answer to: hello")
        let claimed = try client.send(UpstreamRequest(method: "POST", pathAndQuery: "/promo/claim"))
        XCTAssertEqual(try claimed.readAll(limit: 100), Array(#"{"claimed": true}"#.utf8))
    }

    // MARK: - Streaming

    func testServerSentEventsArriveBeforeTheStreamEnds() throws {
        let started = Date()
        let response = try makeClient().send(UpstreamRequest(method: "GET", pathAndQuery: "/v1/ai/stream"))
        XCTAssertEqual(response.headers.values(named: "content-type"), ["text/event-stream"])
        var arrivals: [TimeInterval] = []
        var text = ""
        while let chunk = try response.readBody() {
            arrivals.append(Date().timeIntervalSince(started))
            text += String(decoding: chunk, as: UTF8.self)
        }
        let done = Date().timeIntervalSince(started)

        let expected = (0..<5).map { "data: {\"token\": \($0)}\n\n" }.joined() + "data: [DONE]\n\n"
        XCTAssertEqual(text, expected)
        XCTAssertGreaterThanOrEqual(arrivals.count, 4, "events should arrive one by one, not buffered")
        // The upstream spends about 500 ms between its first and last event.
        XCTAssertLessThan(arrivals[0], done - 0.3, "first event at \(arrivals[0]) s, stream ended at \(done) s")
    }

    func testAbandonedStreamIsNotReused() throws {
        let client = try makeClient()
        let first = try echo(client, UpstreamRequest(method: "GET", pathAndQuery: "/echo"))
        let stream = try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/v1/ai/stream?events=50"))
        XCTAssertTrue(stream.timing.reusedConnection)
        XCTAssertNotNil(try stream.readBody())
        stream.finish()
        XCTAssertNil(try stream.readBody())

        let next = try echo(client, UpstreamRequest(method: "GET", pathAndQuery: "/echo?after=abandon"))
        XCTAssertEqual(next.query, "after=abandon")
        XCTAssertNotEqual(next.connectionNumber, first.connectionNumber)
    }

    // MARK: - Keep-alive and concurrency

    func testSequentialRequestsReuseOneConnection() throws {
        let client = try makeClient()
        var reports: [EchoReport] = []
        var reused: [Bool] = []
        for index in 0..<20 {
            let response = try client.send(UpstreamRequest(
                method: index.isMultiple(of: 2) ? "GET" : "POST", pathAndQuery: "/echo?i=\(index)",
                body: index.isMultiple(of: 2) ? [] : [UInt8(index)]))
            reused.append(response.timing.reusedConnection)
            reports.append(try EchoReport(response.readAll(limit: 1 << 20)))
        }
        XCTAssertEqual(reports.map(\.query), (0..<20).map { "i=\($0)" })
        XCTAssertEqual(Set(reports.map(\.clientPort)).count, 1)
        XCTAssertEqual(Set(reports.map(\.connectionNumber)).count, 1)
        XCTAssertEqual(reused, [false] + Array(repeating: true, count: 19))
        XCTAssertEqual(client.idleConnectionCount, 1)
    }

    func testConnectionClosedByTheUpstreamWhileIdleIsReplaced() throws {
        let client = try makeClient()
        var connections: Set<Int> = []
        for index in 0..<5 {
            let bye = try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/hang-up"))
            XCTAssertEqual(try bye.readAll(limit: 100), Array("bye\n".utf8))
            // The upstream's close reaches the connection, now idle. (Were the next request sent before it
            // arrived, the POST would rightly not be sent again on a new connection: CurlResendTests.)
            usleep(100_000)
            let report = try echo(client, UpstreamRequest(
                method: "POST", pathAndQuery: "/echo?i=\(index)", body: Array("after hang-up".utf8)))
            XCTAssertEqual(report.body, Array("after hang-up".utf8))
            connections.insert(report.connectionNumber)
        }
        XCTAssertEqual(connections.count, 5)
    }

    func testEightThreadsShareOneClient() throws {
        let client = try makeClient(maxIdle: 4)
        let failures = Mutex<[String]>([])
        let ports = Mutex<Set<Int>>([])
        let group = DispatchGroup()
        for worker in 0..<8 {
            group.enter()
            Thread {
                defer { group.leave() }
                for index in 0..<15 {
                    let body = Array("worker \(worker) request \(index)".utf8)
                    do {
                        let response = try client.send(UpstreamRequest(
                            method: "POST", pathAndQuery: "/echo/\(worker)?i=\(index)", body: body))
                        let report = try EchoReport(response.readAll(limit: 1 << 20))
                        if report.path != "/echo/\(worker)" || report.query != "i=\(index)" || report.body != body {
                            failures.withLock { $0.append("worker \(worker) got \(report.path)?\(report.query)") }
                        }
                        ports.withLock { _ = $0.insert(report.clientPort) }
                    } catch {
                        failures.withLock { $0.append("worker \(worker): \(error)") }
                    }
                }
            }.start()
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(failures.withLock { $0 }, [])
        XCTAssertLessThanOrEqual(client.idleConnectionCount, 4)
        XCTAssertGreaterThanOrEqual(client.idleConnectionCount, 1)
        XCTAssertLessThan(ports.withLock { $0.count }, 8 * 15, "connections should be reused")
    }

    // MARK: - Failures

    func testConnectionRefusedIsUnavailable() throws {
        let client = try makeClient()
        upstream.stop()  // its port is now closed
        assertThrows("upstream_unavailable") { _ = try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/healthz")) }
    }

    func testSlowResponseBeyondTheTimeoutIsTimeout() throws {
        let client = try makeClient(timeoutMs: 300)
        let started = Date()
        assertThrows("upstream_timeout") { _ = try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/slow?ms=3000")) }
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
        XCTAssertEqual(try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/healthz")).status, 200)
    }

    func testTimeoutWhileStreamingIsThrownByReadBody() throws {
        let client = try makeClient(timeoutMs: 500)
        let response = try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/v1/ai/stream?events=30"))
        XCTAssertEqual(response.status, 200)
        var chunks = 0
        assertThrows("upstream_timeout") { while try response.readBody() != nil { chunks += 1 } }
        XCTAssertGreaterThan(chunks, 0)
        assertThrows("upstream_timeout") { _ = try response.readBody() }
    }

    func testTruncatedBodyIsProtocolError() throws {
        let response = try makeClient().send(UpstreamRequest(method: "GET", pathAndQuery: "/truncated"))
        XCTAssertEqual(response.status, 200)
        assertThrows("upstream_protocol_error") { _ = try response.readAll(limit: 1000) }
    }

    func testReplyThatIsNotHTTPIsProtocolError() throws {
        assertThrows("upstream_protocol_error") {
            _ = try makeClient().send(UpstreamRequest(method: "GET", pathAndQuery: "/garbage"))
        }
    }
}
