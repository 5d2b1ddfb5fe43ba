import Foundation
import TestSupport
import XCTest

/// The event-loop core through the real binary: long streams paced by idle rather than total timeouts,
/// clients that never read, and SIGTERM under keep-alive load.
final class EventLoopEndToEndTests: XCTestCase {
    private static let routes = """
          - { path: "/v1/ai/stream", upstream: api, policy: pass, timeout_ms: 0, idle_timeout_ms: 1000 }
          - { path: "/bytes", upstream: api, policy: pass, timeout_ms: 0 }
          - { path: "/slow", upstream: api, policy: pass, first_byte_timeout_ms: 20000, timeout_ms: 0 }
          - { path_prefix: "/status/", upstream: api, policy: pass }
          - { path: "/response-headers", upstream: api, policy: pass }
          - { path_prefix: "/secure/", upstream: echo, policy: assert }
          - { path_prefix: "/upload/", upstream: echo, policy: pass, max_body_bytes: 4000000 }
          - { path_prefix: "/", upstream: echo, policy: pass }
    """

    private func start(server: String = "", serveArguments: [String] = []) throws -> GatewayEnvironment {
        let env = try GatewayEnvironment(routes: Self.routes, apple: server.isEmpty ? nil : server, serveArguments: serveArguments)
        addTeardownBlock { env.stop() }
        return env
    }

    func testAStreamLongerThanTheUpstreamsTotalTimeoutRunsOnItsRoutesIdleTimeout() throws {
        let env = try start()  // the upstream `api` has timeout_ms: 1500
        let client = try RawHTTPClient(port: env.gateway.port, timeoutSeconds: 10)
        try client.send("GET /v1/ai/stream?events=8&interval_ms=300 HTTP/1.1\r\nHost: t\r\n\r\n")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.text.components(separatedBy: "data: ").count - 1, 9, "8 events and [DONE], over 2.4 s")
        let line = env.gateway.waitForEvent { $0["path"] as? String == "/v1/ai/stream" }
        XCTAssertEqual(line?["outcome"] as? String, "completed")
    }

    func testASilentUpstreamIsCutAtTheIdleTimeoutAndTheClientSeesATruncatedBody() throws {
        let env = try start()
        let client = try RawHTTPClient(port: env.gateway.port, timeoutSeconds: 10)
        try client.send("GET /v1/ai/stream?events=3&interval_ms=1500 HTTP/1.1\r\nHost: t\r\n\r\n")  // idle_timeout_ms: 1000
        XCTAssertEqual(try client.readHead().status, 200)
        XCTAssertNotNil(try client.readChunk())
        XCTAssertThrowsError(try client.readChunk(), "no final chunk: the break is visible")
        let line = env.gateway.waitForEvent { $0["path"] as? String == "/v1/ai/stream" }
        XCTAssertEqual(line?["outcome"] as? String, "upstream_aborted")
        XCTAssertEqual(line?["reason"] as? String, "upstream_timeout")
    }

    func testAClientThatNeverReadsIsCutOffWithBoundedMemory() throws {
        let env = try start(server: "server: { send_timeout_ms: 500 }")
        let rssBefore = try residentKiB(env)
        // Five: the example upstream (Python, listen backlog 5) drops connections beyond that.
        let clients = try (0..<5).map { _ in try RawHTTPClient(port: env.gateway.port, timeoutSeconds: 10, receiveBufferBytes: 4096) }
        for client in clients { try client.send("GET /bytes?n=8000000 HTTP/1.1\r\nHost: t\r\n\r\n") }
        // 5 × 8 MB would be 40 MB if the gateway buffered what the clients do not take.
        let lines = (0..<40).lazy.compactMap { _ -> [[String: Any]]? in
            let done = env.gateway.events.filter { $0["path"] as? String == "/bytes" }
            if done.count == clients.count { return done }
            usleep(250_000)
            return nil
        }.first
        XCTAssertEqual(lines?.count, clients.count)
        XCTAssertEqual(Set(lines?.compactMap { $0["outcome"] as? String } ?? []), ["timeout"], "\(lines?.filter { $0["outcome"] as? String != "timeout" } ?? [])")
        XCTAssertLessThan(try residentKiB(env) - rssBefore, 16 * 1024, "what the gateway held stayed bounded")
        for line in lines ?? [] { XCTAssertLessThan(line["bytes_out"] as? Int ?? .max, 8_000_000) }
    }

    func testAnUnsignedRequestIsRefusedBeforeItsBodyIsRead() throws {
        let env = try start()
        let client = try RawHTTPClient(port: env.gateway.port)
        // The head and one chunk; the rest of the body never comes. The answer must not wait for it.
        try client.send("POST /secure/upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 401)
        XCTAssertEqual(response.header("X-Attest-Error"), "assertion_missing")
        XCTAssertEqual(response.header("Connection"), "close", "the unread body cannot be skipped")
        XCTAssertTrue(client.peerClosed())
        let line = env.gateway.waitForEvent { $0["path"] as? String == "/secure/upload" }
        XCTAssertEqual(line?["bytes_in"] as? Int, 0)
    }

    func testPassRouteBodiesStreamToTheUpstreamWithoutBeingHeldWhole() throws {
        // A budget far below the body: a buffered body would be refused with 503 server_busy.
        let env = try start(server: "server: { max_buffered_body_bytes: 65536 }")
        let body = (0..<1_500_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let reply = try env.request("POST", "/upload/blob", body: body)
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(Data(base64Encoded: reply.json["body_base64"] as? String ?? ""), Data(body), "every byte arrived, in order")
        XCTAssertEqual(reply.forwarded("Content-Length"), ["1500000"], "the client's length is kept")

        let client = try RawHTTPClient(port: env.gateway.port, timeoutSeconds: 10)
        try client.send("POST /upload/chunks HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        let chunked = try client.readResponse()
        XCTAssertEqual(chunked.status, 200)
        let seen = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(chunked.body)) as? [String: Any])
        XCTAssertEqual(Data(base64Encoded: seen["body_base64"] as? String ?? ""), Data("hello world".utf8))

        let budgeted = try env.request("POST", "/secure/x", body: [UInt8](repeating: 1, count: 200_000))
        XCTAssertNotEqual(budgeted.status, 200, "an assert route buffers its body (to hash it)")
    }

    func testAStreamedBodyOverTheLimitIsCutAndNeverForwardedWhole() throws {
        let env = try start()
        let client = try RawHTTPClient(port: env.gateway.port, timeoutSeconds: 10)
        try client.send("POST /upload/big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        let chunk = Array("10000\r\n".utf8) + [UInt8](repeating: 0x61, count: 0x10000) + Array("\r\n".utf8)
        for _ in 0..<70 { try? client.send(chunk) }  // 4.5 MB, over the route's 4,000,000
        try? client.send("0\r\n\r\n")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 413)
        let line = env.gateway.waitForEvent { $0["path"] as? String == "/upload/big" }
        XCTAssertEqual(line?["reason"] as? String, "body_too_large")
        XCTAssertNil(env.gateway.events.first { $0["path"] as? String == "/upload/big" && $0["upstream_status"] != nil },
                     "the upstream never answered a truncated body as whole")
    }

    func testHeadNoContentAndContinueKeepTheConnectionUsable() throws {
        let env = try start()
        let client = try RawHTTPClient(port: env.gateway.port)
        // HEAD: the upstream's length is announced, no body follows, the connection stays usable.
        try client.send("HEAD /bytes?n=1234 HTTP/1.1\r\nHost: t\r\n\r\n")
        let head = try client.readResponse(method: "HEAD")
        XCTAssertEqual(head.status, 200)
        XCTAssertEqual(head.header("Content-Length"), "1234")
        // 204: no body, no framing headers.
        try client.send("GET /status/204 HTTP/1.1\r\nHost: t\r\n\r\n")
        let empty = try client.readResponse()
        XCTAssertEqual(empty.status, 204)
        XCTAssertNil(empty.header("Transfer-Encoding"))
        // Expect: 100-continue on a relayed body: the interim answer, then the upstream's.
        try client.send("POST /upload/x HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        XCTAssertEqual(try client.readHead().status, 100)
        try client.send("hello")
        let echoed = try client.readResponse()
        XCTAssertEqual(echoed.status, 200)
        let seen = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(echoed.body)) as? [String: Any])
        XCTAssertEqual(Data(base64Encoded: seen["body_base64"] as? String ?? ""), Data("hello".utf8))
        // And still the same connection.
        try client.send("GET /bytes?n=3 HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try client.readResponse().body, [0, 1, 2])
    }

    /// GET, HEAD and TRACE carry no body on either path (streamed on a pass route, read whole on an assert route): an
    /// upstream that does not read one would take its bytes for the next request. Refused before any is read.
    func testAGetOrHeadWithABodyIsRefusedOnEveryPath() throws {
        let env = try start()
        for (request, path) in [("GET /upload/x HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello", "/upload/x"),
                                ("HEAD /upload/y HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "/upload/y"),
                                ("GET /secure/z HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello", "/secure/z"),
                                ("TRACE /upload/t HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello", "/upload/t")] {
            let client = try RawHTTPClient(port: env.gateway.port)
            try client.send(request)
            let response = try client.readResponse(method: request.hasPrefix("HEAD") ? "HEAD" : "GET")
            XCTAssertEqual(response.status, 400, path)
            XCTAssertEqual(response.header("X-Attest-Error"), "bad_request", path)
            let line = env.gateway.waitForEvent { $0["path"] as? String == path }
            XCTAssertNil(line?["upstream_status"], "never forwarded: \(String(describing: line))")
        }
        // An empty body is no body.
        let client = try RawHTTPClient(port: env.gateway.port)
        try client.send("GET /upload/empty HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        XCTAssertEqual(try client.readResponse().status, 200)
    }

    func testAnUpstreamResponseThatIsNotValidHTTPIsTheUpstreamsProtocolErrorAndNeverRelayed() throws {
        // A field name that is not a token (libhttp-parser refuses it: nginx's "upstream sent invalid header"),
        // a status outside 200–599 (the upstream's fault, not the gateway's 500): each a 502 whose log line
        // names the code the client got, the head never relayed, the client's connection still usable.
        let env = try start()
        let client = try RawHTTPClient(port: env.gateway.port)
        for (target, path, detail) in [("/response-headers?X%28bad%29=1", "/response-headers", "not valid HTTP/1.1"),
                                       ("/status/999", "/status/999", "status 999"),
                                       // Thousands of names in Connection would make the header rules work per header.
                                       ("/response-headers?Connection=" + (0..<40).map { "x-\($0)" }.joined(separator: "%2C"),
                                        "/response-headers", "Connection lists more than")] {
            try client.send("GET \(target) HTTP/1.1\r\nHost: t\r\n\r\n")
            let response = try client.readResponse()
            XCTAssertEqual(response.status, 502, target)
            XCTAssertEqual(errorReason(response), "upstream_protocol_error", target)
            XCTAssertNil(response.headers.first { $0.name.contains("(") }, "the header is never relayed")
            let line = env.gateway.waitForEvent { $0["path"] as? String == path && ($0["detail"] as? String)?.contains(detail) == true }
            XCTAssertEqual(line?["status"] as? Int, 502, target)
            XCTAssertEqual(line?["reason"] as? String, "upstream_protocol_error", "the log line names what the client was told")
            XCTAssertEqual((line?["detail"] as? String)?.contains(detail), true, "\(String(describing: line))")
        }
        try client.send("GET /status/201 HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try client.readResponse().status, 201, "the connection is still usable")
    }

    func testUpstreamConnectionsTheUpstreamClosedWhileIdleAreReplacedAndTheirDescriptorsReused() throws {
        let env = try start()
        for round in 0..<6 {
            // A new client connection each round: its socket may get the number of an upstream one just closed.
            let client = try RawHTTPClient(port: env.gateway.port)
            try client.send("GET /hang-up HTTP/1.1\r\nHost: t\r\n\r\n")
            XCTAssertEqual(try client.readResponse().status, 200)
            usleep(100_000)  // the upstream's close reaches the gateway's kept-alive connection, now idle
            try client.send("GET /echo/\(round) HTTP/1.1\r\nHost: t\r\n\r\n")
            XCTAssertEqual(try client.readResponse().status, 200, "round \(round)")
        }
    }

    func testAnHTTP10ClientGetsAStreamDelimitedByTheConnectionsEnd() throws {
        let env = try start()
        let client = try RawHTTPClient(port: env.gateway.port, timeoutSeconds: 10)
        try client.send("GET /v1/ai/stream?events=3&interval_ms=50 HTTP/1.0\r\n\r\n")
        let response = try client.readResponse()
        XCTAssertEqual(response.status, 200)
        XCTAssertNil(response.header("Transfer-Encoding"), "HTTP/1.0 has no chunked coding: the close ends the body")
        XCTAssertEqual(response.text.components(separatedBy: "data: ").count - 1, 4)
        XCTAssertTrue(client.peerClosed())
    }

    func testSigtermUnderKeepAliveLoadFinishesInFlightClosesIdleAndLogsWhatWasSent() throws {
        let env = try start()
        let idle = try RawHTTPClient(port: env.gateway.port)
        try idle.send("GET /a HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try idle.readResponse().status, 200)
        let busy = try (0..<3).map { _ in try RawHTTPClient(port: env.gateway.port, timeoutSeconds: 10) }
        // Slow enough to be still running when SIGTERM arrives on a loaded machine; the drain waits for them.
        for client in busy { try client.send("GET /slow?ms=2000 HTTP/1.1\r\nHost: t\r\n\r\n") }
        XCTAssertTrue(try env.waitForInFlightRequests(atLeast: busy.count), "the slow requests reached the gateway")
        env.gateway.process.signal(SIGTERM)

        XCTAssertTrue(idle.peerClosed(), "an idle keep-alive connection is closed at once")
        for client in busy {
            let response = try client.readResponse()
            XCTAssertEqual(response.status, 200, "in-flight requests finish")
            XCTAssertEqual(response.header("Connection"), "close")
        }
        XCTAssertNotNil(env.gateway.waitForEvent { $0["event"] as? String == "stopped" })
        let slow = env.gateway.events.filter { $0["path"] as? String == "/slow" }
        XCTAssertEqual(slow.count, 3, "one line per response the clients received")
        XCTAssertEqual(Set(slow.compactMap { $0["outcome"] as? String }), ["completed"])
        XCTAssertEqual(env.gateway.events.last { $0["event"] as? String == "stopped" }?["abandoned_requests"] as? Int, 0)
    }

    /// Requests still running when `--drain-seconds` runs out are abandoned: counted in the `stopped` line, their
    /// connections closed (the client sees no response), each logged as a request the client did not get.
    func testRequestsStillRunningAtTheDrainDeadlineAreAbandonedAndLogged() throws {
        let env = try start(serveArguments: ["--drain-seconds", "1"])
        let stuck = try (0..<2).map { _ in try RawHTTPClient(port: env.gateway.port, timeoutSeconds: 10) }
        for client in stuck { try client.send("GET /slow?ms=8000 HTTP/1.1\r\nHost: t\r\n\r\n") }
        XCTAssertTrue(try env.waitForInFlightRequests(atLeast: stuck.count), "the slow requests reached the gateway")
        env.gateway.process.signal(SIGTERM)

        let draining = try XCTUnwrap(env.gateway.waitForEvent(timeout: 10) { $0["event"] as? String == "draining" })
        XCTAssertEqual(draining["in_flight"] as? Int, stuck.count)
        XCTAssertEqual(draining["timeout_seconds"] as? Int, 1)
        let stopped = try XCTUnwrap(env.gateway.waitForEvent(timeout: 10) { $0["event"] as? String == "stopped" })
        XCTAssertEqual(stopped["abandoned_requests"] as? Int, stuck.count)
        for client in stuck { XCTAssertTrue(client.peerClosed(), "an abandoned request's connection is closed without a response") }
        XCTAssertEqual(env.gateway.process.waitForExit(timeout: 10), 0)
        let abandoned = env.gateway.events.filter { $0["path"] as? String == "/slow" }
        XCTAssertEqual(abandoned.count, stuck.count, "one line per abandoned request: \(abandoned)")
        for line in abandoned {
            // Closed under the request: no status went out, as when a client leaves (docs/operations.md, SIGTERM).
            XCTAssertEqual(line["outcome"] as? String, "client_aborted", "\(line)")
            XCTAssertEqual(line["status"] as? Int, 0, "\(line)")
        }
    }

    /// A client that leaves while the upstream is still to answer: the answer, when it comes, is dropped with its
    /// upstream connection, and the client's connection closes (relayed, it would wait for the gone client forever).
    func testAnAnswerForAClientThatLeftIsDroppedAndItsConnectionsClosed() throws {
        let env = try start()
        let warm = try RawHTTPClient(port: env.gateway.port)
        try warm.send("GET /status/200 HTTP/1.1\r\nHost: t\r\n\r\n")
        XCTAssertEqual(try warm.readResponse().status, 200)
        warm.disconnect()
        let before = try openDescriptors(env)
        let leaving = try (0..<8).map { _ in try RawHTTPClient(port: env.gateway.port) }
        // More than the upstream socket's buffers hold: its connection waits on the gateway's reading.
        for client in leaving { try client.send("GET /bytes?n=2000000&ms=300 HTTP/1.1\r\nHost: t\r\n\r\n") }
        XCTAssertTrue(try env.waitForInFlightRequests(atLeast: leaving.count), "the slow requests reached the gateway")
        for client in leaving { client.disconnect() }
        let deadline = Date().addingTimeInterval(10)
        var now = try openDescriptors(env)
        while now > before + 2, Date() < deadline {
            usleep(50_000)
            now = try openDescriptors(env)
        }
        XCTAssertLessThanOrEqual(now, before + 2, "descriptors: \(before) before, \(now) after the answers came")
    }

    private func openDescriptors(_ env: GatewayEnvironment) throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(env.gateway.process.process.processIdentifier)/fd").count
    }

    private func errorReason(_ response: RawHTTPClient.Response) -> String? {
        (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: String])?["error"]
    }

    private func residentKiB(_ env: GatewayEnvironment) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(env.gateway.process.process.processIdentifier)/status", encoding: .utf8)
        let line = try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
    }
}
