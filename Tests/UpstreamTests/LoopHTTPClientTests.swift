@testable import EventLoop
import Foundation
import Glibc
import Synchronization
import TestSupport
import Upstream
import XCTest

/// The event loops' own HTTP/1.1 client (`http://` targets of `UpstreamClient.open`) against real loopback
/// servers: examples/upstream.py, and `ScriptedUpstream` for what a well-behaved server never sends.
final class LoopHTTPClientTests: XCTestCase {
    private var loop: EventLoop!

    override func setUpWithError() throws {
        loop = try EventLoop(name: "upstream-test")
        loop.start()
    }

    override func tearDown() {
        loop.stop()
    }

    private func client(_ baseURL: String, connectMs: Int = 2000, firstByteMs: Int = 3000, idleMs: Int = 3000, totalMs: Int = 0,
                        maxIdle: Int = 8) throws -> UpstreamClient {
        UpstreamClient(target: try UpstreamTarget(baseURL: baseURL, timeouts: UpstreamTimeouts(
            connectMs: connectMs, firstByteMs: firstByteMs, idleMs: idleMs, totalMs: totalMs), maxIdleConnections: maxIdle))
    }

    private func run(_ client: UpstreamClient, _ requests: UpstreamRequest...) throws -> [Exchanged] {
        try loop.waitForTask {
            var results: [Exchanged] = []
            for request in requests { results.append(await Exchanged.run(client, request)) }
            return results
        }
    }

    private static func get(_ path: String, _ headers: [HTTPField] = []) -> UpstreamRequest {
        UpstreamRequest(method: "GET", pathAndQuery: path, headers: headers)
    }

    // MARK: - Response framing

    func testChunkedResponseIsDechunkedAndTheConnectionReused() throws {
        let server = try ScriptedUpstream { connection in
            while connection.readHead() != nil {
                connection.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A:  spaced \r\n\r\n5\r\nhello\r\n")
                connection.send("6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
            }
        }
        let results = try run(try client(server.baseURL), Self.get("/a"), Self.get("/b"))
        XCTAssertEqual(results.map(\.text), ["hello world", "hello world"])
        XCTAssertEqual(results.map(\.error), [nil, nil])
        XCTAssertEqual(results.map { $0.timing?.reusedConnection }, [false, true])
        XCTAssertEqual(results[0].headers, [HTTPField("Transfer-Encoding", "chunked"), HTTPField("X-A", "spaced")])
        XCTAssertEqual(results[0].remoteAddress, "127.0.0.1:\(server.port)")
        XCTAssertEqual(server.connections, 1)
    }

    /// A head trickled a byte at a time: field names and values split anywhere (inside a UTF-8 character too)
    /// are joined before they are decoded and trimmed.
    func testFieldsSplitAcrossReadsAreJoinedWhole() throws {
        let head = Array("HTTP/1.1 200 OK\r\nX-A-Rather-Long-Field-Name: caf\u{e9} au lait \r\nContent-Length: 2\r\n\r\n".utf8)
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            for byte in head {
                connection.send([byte])
                usleep(2_000)
            }
            connection.send("ok")
            connection.waitForClose()
        }
        let result = try run(try client(server.baseURL), Self.get("/")).first
        XCTAssertEqual(result?.headers, [HTTPField("X-A-Rather-Long-Field-Name", "caf\u{e9} au lait"), HTTPField("Content-Length", "2")])
        XCTAssertEqual(result?.text, "ok")
        XCTAssertNil(result?.error)
    }

    /// A head that spans reads, its last read also carrying the start of the body: the body is read from where the
    /// head ends, and the connection is reused with nothing of the head left over.
    func testAHeadEndingInTheReadThatStartsTheBodyIsFramedThere() throws {
        let server = try ScriptedUpstream { connection in
            while connection.readHead() != nil {
                connection.send("HTTP/1.1 200 OK\r\nContent-Le")
                usleep(20_000)
                connection.send("ngth: 5\r\nX-A: b\r\n\r\nhel")
                usleep(20_000)
                connection.send("lo")
            }
        }
        let results = try run(try client(server.baseURL), Self.get("/1"), Self.get("/2"))
        XCTAssertEqual(results.map(\.text), ["hello", "hello"])
        XCTAssertEqual(results.map(\.error), [nil, nil])
        XCTAssertEqual(results.map(\.headers), [[HTTPField("Content-Length", "5"), HTTPField("X-A", "b")], [HTTPField("Content-Length", "5"), HTTPField("X-A", "b")]])
        XCTAssertEqual(results.map { $0.timing?.reusedConnection }, [false, true])
    }

    func testInterimResponsesAreSkippedUntilTheFinalOne() throws {
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            connection.send("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
            connection.send("HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-Final: 1\r\n\r\nok")
            connection.waitForClose()
        }
        let result = try run(try client(server.baseURL), Self.get("/")).first
        XCTAssertEqual(result?.status, 201)
        XCTAssertEqual(result?.headers, [HTTPField("Content-Length", "2"), HTTPField("X-Final", "1")])
        XCTAssertEqual(result?.text, "ok")
        XCTAssertNil(result?.error)
    }

    func testHeadAnd204And304ResponsesHaveNoBodyWhateverTheirLength() throws {
        let server = try ScriptedUpstream { connection in
            while let head = connection.readHead() {
                if head.hasPrefix("HEAD") {
                    connection.send("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
                } else if head.contains("/c") {
                    connection.send("HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n")
                } else {
                    connection.send("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")
                }
            }
        }
        let results = try run(try client(server.baseURL), UpstreamRequest(method: "HEAD", pathAndQuery: "/h"), Self.get("/c"), Self.get("/d"))
        XCTAssertEqual(results.map(\.status), [200, 304, 200])
        XCTAssertEqual(results.map(\.text), ["", "", "abc"])
        XCTAssertEqual(results.map(\.error), [nil, nil, nil])
        // A bodiless response that declares a length is trusted for its own framing, not for the connection's next use.
        XCTAssertEqual(results.map { $0.timing?.reusedConnection }, [false, false, false])
        XCTAssertEqual(server.connections, 3)
    }

    func testBodyReadUntilCloseArrivesWholeAndItsConnectionIsNotReused() throws {
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            connection.send("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ")
            Thread.sleep(forTimeInterval: 0.05)
            connection.send("close")
        }
        let results = try run(try client(server.baseURL), Self.get("/1"), Self.get("/2"))
        XCTAssertEqual(results.map(\.text), ["until close", "until close"])
        XCTAssertEqual(results.map(\.error), [nil, nil])
        XCTAssertEqual(results.map { $0.timing?.reusedConnection }, [false, false])
        XCTAssertEqual(server.connections, 2)
    }

    func testConnectionCloseIsHonouredAndKeepAliveReused() throws {
        let server = try ScriptedUpstream { connection in
            while let head = connection.readHead() {
                let close = head.contains("GET /close ")
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\(close ? "Connection: close\r\n" : "")\r\nok")
                if close { return }
            }
        }
        let results = try run(try client(server.baseURL), Self.get("/keep"), Self.get("/close"), Self.get("/keep"), Self.get("/keep"))
        XCTAssertEqual(results.map(\.text), ["ok", "ok", "ok", "ok"])
        XCTAssertEqual(results.map { $0.timing?.reusedConnection }, [false, true, false, true])
        XCTAssertEqual(server.connections, 2)
    }

    func testHTTP10ResponseWithoutKeepAliveIsNotReused() throws {
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            connection.send("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
            connection.waitForClose()
        }
        let results = try run(try client(server.baseURL), Self.get("/1"), Self.get("/2"))
        XCTAssertEqual(results.map(\.text), ["ok", "ok"])
        XCTAssertEqual(server.connections, 2)
    }

    // MARK: - Kept-alive connections that went away

    func testAPooledConnectionTheUpstreamClosedIsDroppedNotUsed() throws {
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            // Closed while idle in the client's pool, without a word.
        }
        let client = try client(server.baseURL)
        let first = try run(client, Self.get("/1"))
        Thread.sleep(forTimeInterval: 0.2)
        let second = try run(client, Self.get("/2"))
        XCTAssertEqual((first + second).map(\.text), ["ok", "ok"])
        XCTAssertEqual(second.first?.timing?.reusedConnection, false, "the closed connection left the pool")
        XCTAssertEqual(server.requests.count, 2, "no request went to the dead connection")
    }

    /// An upstream that read the second request on a kept-alive connection and closed it unanswered.
    private static func closesTheSecondRequestUnanswered() throws -> ScriptedUpstream {
        try ScriptedUpstream { connection in
            connection.readHead()
            if connection.number == 1 {
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
                connection.readHead()  // the second request: closed unanswered (as a server timing out its idle connection)
                return
            }
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
            connection.waitForClose()
        }
    }

    func testAReusedConnectionThatClosesBeforeAnsweringAnIdempotentRequestIsRetriedOnceOnANewOne() throws {
        let server = try Self.closesTheSecondRequestUnanswered()
        let results = try run(try client(server.baseURL), Self.get("/1"),
                              UpstreamRequest(method: "PUT", pathAndQuery: "/2", body: Array("in memory".utf8)))
        XCTAssertEqual(results.map(\.text), ["first", "second"])
        XCTAssertEqual(results.map(\.error), [nil, nil])
        XCTAssertEqual(results[1].timing?.reusedConnection, false)
        XCTAssertEqual(server.requests.map { $0.prefix(7) }, ["GET /1 ", "PUT /2 ", "PUT /2 "])
    }

    /// The upstream may have run it before closing: a POST (a purchase, a paid call) is never sent twice.
    func testAPostTheUpstreamReadAndLeftUnansweredIsNotSentAgain() throws {
        let server = try Self.closesTheSecondRequestUnanswered()
        let results = try run(try client(server.baseURL), Self.get("/1"),
                              UpstreamRequest(method: "POST", pathAndQuery: "/2", body: Array("in memory".utf8)))
        XCTAssertEqual(results[0].text, "first")
        XCTAssertEqual(results[1].error?.reasonCode, "upstream_unavailable")
        let detail = results[1].error?.description ?? ""
        XCTAssertTrue(detail.hasPrefix("upstream_unavailable: the reused upstream connection closed before a response")
                      && detail.hasSuffix("POST is not sent again (the upstream may have run it)"), "the log's detail says why, as curl's: \(detail)")
        XCTAssertEqual(server.requests.map { $0.prefix(8) }, ["GET /1 H", "POST /2 "])
    }

    func testAStreamedUploadIsNeverSentTwice() throws {
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            if connection.number == 1 {
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
                connection.readHead()
                return
            }
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
        }
        let client = try client(server.baseURL)
        let results = try loop.waitForTask { () -> [Exchanged] in
            let first = await Exchanged.run(client, Self.get("/1"))
            let upload = UpstreamUpload(length: 4)
            _ = Array("body".utf8).withUnsafeBytes { upload.write($0) }
            upload.finish()
            return [first, await Exchanged.run(client, UpstreamRequest(method: "POST", pathAndQuery: "/2"), upload: upload)]
        }
        XCTAssertEqual(results[0].text, "first")
        XCTAssertEqual(results[1].error?.reasonCode, "upstream_unavailable")
        XCTAssertEqual(server.requests.count, 2)
    }

    // MARK: - Broken responses

    func testABodyCutShortIsAProtocolError() throws {
        let server = try ScriptedUpstream { connection in
            let head = connection.readHead() ?? ""
            if head.contains("/chunked") {
                connection.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly part")
            } else {
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
            }
        }
        let results = try run(try client(server.baseURL), Self.get("/length"), Self.get("/chunked"))
        XCTAssertEqual(results.map(\.status), [200, 200])
        XCTAssertEqual(results.map { $0.error?.reasonCode }, ["upstream_protocol_error", "upstream_protocol_error"])
        XCTAssertEqual(results.map(\.text), ["only ten b", "only part"])
    }

    func testMalformedAndOversizedHeadsAreProtocolErrors() throws {
        let server = try ScriptedUpstream { connection in
            while let head = connection.readHead() {
                if head.contains("/garbage") {
                    connection.send("this is not HTTP\r\n\r\n")
                } else if head.contains("/huge") {
                    connection.send("HTTP/1.1 200 OK\r\n")
                    for index in 0..<700 { guard connection.send("X-Filler-\(index): \(String(repeating: "f", count: 100))\r\n") else { return } }
                    connection.send("Content-Length: 0\r\n\r\n")
                } else {
                    connection.send("HTTP/1.1 200 OK\r\nBad(Name): x\r\nContent-Length: 0\r\n\r\n")
                }
            }
        }
        let client = try client(server.baseURL)
        for path in ["/garbage", "/huge", "/bad-name"] {
            let result = try run(client, Self.get(path)).first
            XCTAssertEqual(result?.error?.reasonCode, "upstream_protocol_error", path)
            XCTAssertEqual(result?.status, 0, path)
            if path == "/huge" { XCTAssertTrue(result?.error?.description.contains("head exceeds") == true, "\(String(describing: result?.error))") }
        }
        XCTAssertEqual(server.connections, 3, "a connection that carried a broken response is not reused")
    }

    func testATransferCodingOtherThanChunkedIsAProtocolError() throws {
        let server = try ScriptedUpstream { connection in
            while let head = connection.readHead() {
                if head.contains("/gzip") {
                    connection.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n\u{1F}\u{8B}compressed")
                    return
                }
                connection.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked \r\n\r\n2\r\nok\r\n0\r\n\r\n")
            }
        }
        let client = try client(server.baseURL)
        let refused = try run(client, Self.get("/gzip")).first
        XCTAssertEqual(refused?.error?.reasonCode, "upstream_protocol_error")
        XCTAssertEqual(refused?.error?.description.contains("Transfer-Encoding: gzip"), true, "\(String(describing: refused?.error))")
        let chunked = try run(client, Self.get("/chunked")).first
        XCTAssertEqual(chunked?.status, 200, "chunked alone, in any case and with blanks, is decoded")
        XCTAssertEqual(chunked?.body, Array("ok".utf8))
    }

    /// What libhttp-parser let through (Debian builds it lenient) and another reader could frame differently: each
    /// is the upstream's protocol error, its head never relayed, its connection never reused.
    func testResponsesALenientParserAcceptedAreProtocolErrors() throws {
        let responses = [
            "/obs-fold": "HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 2\r\n\r\nok",
            "/bare-lf": "HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
            "/bare-cr": "HTTP/1.1 200 OK\r\nX-A: 1\rX-B: 2\r\nContent-Length: 2\r\n\r\nok",
            "/nul": "HTTP/1.1 200 OK\r\nX-A: a\u{0}b\r\nContent-Length: 2\r\n\r\nok",
            "/version": "HTTP/1.7 200 OK\r\nContent-Length: 2\r\n\r\nok",
            "/chunked-twice": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            "/chunk-without-crlf": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n",
        ]
        let server = try ScriptedUpstream { connection in
            while let head = connection.readHead() {
                guard let path = head.split(separator: " ").dropFirst().first, let response = responses[String(path)] else { return }
                connection.send(response)
            }
        }
        let client = try client(server.baseURL)
        for (path, _) in responses.sorted(by: { $0.key < $1.key }) {
            let result = try run(client, Self.get(path)).first
            XCTAssertEqual(result?.error?.reasonCode, "upstream_protocol_error", path)
            // A broken chunk that comes in the head's read fails the exchange before the head is handed over.
            XCTAssertEqual(result?.status, 0, path)
            XCTAssertEqual(result?.text, "", path)
        }
        XCTAssertEqual(server.connections, responses.count, "a connection that carried a broken response is not reused")
    }

    /// A 1xx never has a body (RFC 9112 §6.3): a `Content-Length` on one is not read as one, so its bytes are
    /// never put in front of the final response's body.
    func testAnInterimResponseNeverHasABody() throws {
        let server = try ScriptedUpstream { connection in
            while let head = connection.readHead() {
                if head.contains("/poison") {
                    connection.send("HTTP/1.1 100 Continue\r\nContent-Length: 6\r\n\r\nPOISONHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                } else {
                    connection.send("HTTP/1.1 103 Early Hints\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                }
            }
        }
        let results = try run(try client(server.baseURL), Self.get("/poison"), Self.get("/hints"))
        XCTAssertEqual(results[0].error?.reasonCode, "upstream_protocol_error")
        XCTAssertFalse(results[0].text.contains("POISON"))
        XCTAssertEqual(results[1].text, "ok")
    }

    /// A response that must have no body but declares a length (HEAD, 204, 304): the upstream may send the
    /// body anyway, and the next exchange would read it as its response. Its connection is not reused.
    func testABodilessResponseThatDeclaresALengthDoesNotKeepItsConnection() throws {
        let server = try ScriptedUpstream { connection in
            while let head = connection.readHead() {
                if head.hasPrefix("HEAD") {
                    connection.send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
                } else if head.contains("/204") {
                    connection.send("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n")
                } else {
                    connection.send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nright")
                    continue
                }
                usleep(50_000)
                connection.send("wrong")  // the body a bodiless response "declared"
            }
        }
        let results = try run(try client(server.baseURL), UpstreamRequest(method: "HEAD", pathAndQuery: "/h"), Self.get("/a"),
                              Self.get("/204"), Self.get("/b"))
        XCTAssertEqual(results.map(\.status), [200, 200, 204, 200])
        XCTAssertEqual(results.map(\.outcome), ["", "right", "", "right"])
        XCTAssertEqual(server.connections, 3, "HEAD and 204 with a length each cost their connection")
        Thread.sleep(forTimeInterval: 0.2)  // the script's threads end: their sockets count in a later test's descriptor check
    }

    /// An upstream that sends a response nobody asked for: the bytes wait on the idle connection before the loop
    /// read them (the loop was busy), and the next exchange must not take them for its answer.
    func testAPooledConnectionWithUnreadBytesIsNotReused() throws {
        let sentOutOfTurn = DispatchSemaphore(value: 0)
        let server = try ScriptedUpstream { connection in
            if connection.number == 1, connection.readHead() != nil {
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
                usleep(20_000)
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nstolen")
                sentOutOfTurn.signal()
            }
            while connection.readHead() != nil { connection.send("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond") }
        }
        let client = try client(server.baseURL)
        let results = try loop.waitForTask { () -> [Exchanged] in
            let first = await Exchanged.run(client, Self.get("/1"))
            // The loop does not poll meanwhile: the unsolicited response lands in the socket unread.
            _ = sentOutOfTurn.wait(timeout: .now() + 10)
            usleep(50_000)
            return [first, await Exchanged.run(client, Self.get("/2"))]
        }
        XCTAssertEqual(results.map(\.outcome), ["first", "second"])
        XCTAssertEqual(server.connections, 2)
    }

    /// The rule of in-memory bodies holds for streamed ones: GET and HEAD carry none, and nothing is sent.
    func testAGetOrHeadWithAStreamedBodyIsRefusedBeforeAnythingIsSent() throws {
        let server = try ScriptedUpstream { connection in
            while connection.readHead() != nil { connection.send("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") }
        }
        let client = try client(server.baseURL)
        let results = try loop.waitForTask { () -> [Exchanged] in
            var results: [Exchanged] = []
            for (method, length, inMemory) in [("GET", 5, false), ("HEAD", nil, false), ("GET", 0, false), ("HEAD", 0, true)] as [(String, Int?, Bool)] {
                let upload = inMemory ? nil : UpstreamUpload(length: length)
                if let upload, length != 0 {
                    _ = Array("hello".utf8).withUnsafeBytes { upload.write($0) }
                }
                upload?.finish()
                let body = inMemory ? Array("hello".utf8) : []
                results.append(await Exchanged.run(client, UpstreamRequest(method: method, pathAndQuery: "/", body: body), upload: upload))
            }
            return results
        }
        XCTAssertEqual(results.map { $0.error?.reasonCode }, ["upstream_invalid_request", "upstream_invalid_request", nil, "upstream_invalid_request"])
        XCTAssertEqual(server.requests.count, 1, "only the GET with an empty body was sent")
    }

    func testRefusedConnectionIsUnavailable() throws {
        let server = try ScriptedUpstream { _ in }
        server.stop()
        let result = try run(try client(server.baseURL), Self.get("/")).first
        XCTAssertEqual(result?.error?.reasonCode, "upstream_unavailable")
    }

    func testAConnectionClosedWithoutAnAnswerIsUnavailable() throws {
        let server = try ScriptedUpstream { connection in connection.readHead() }
        let result = try run(try client(server.baseURL), Self.get("/")).first
        XCTAssertEqual(result?.error?.reasonCode, "upstream_unavailable")
    }

    // MARK: - Timeouts

    func testAConnectThatHangsIsGivenUpAtTheConnectTimeoutAndItsSocketClosed() throws {
        // A listener whose accept queue is full (backlog 0, one connection never accepted) drops further SYNs.
        let (listener, port) = TestPaths.listeningSocket(backlog: 0)
        defer { close(listener) }
        let filler = try RawHTTPClient(port: port)
        defer { filler.disconnect() }
        let openDescriptors = { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0 }
        // The loop's upstream state (curl's multi handle, the resolver's threads) is made by a first exchange.
        let refused = try ScriptedUpstream { _ in }
        refused.stop()
        _ = try run(try client(refused.baseURL), Self.get("/"))
        let before = openDescriptors()
        let started = Date()
        let result = try run(try client("http://127.0.0.1:\(port)", connectMs: 200), Self.get("/")).first
        XCTAssertEqual(result?.error, .timeout("could not connect to 127.0.0.1:\(port) within 200 ms"))
        // The kernel alone would keep retrying the SYN for about two minutes: seconds mean the timeout acted.
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        let deadline = Date().addingTimeInterval(5)
        while openDescriptors() != before, Date() < deadline { usleep(20_000) }
        XCTAssertEqual(openDescriptors(), before, "the abandoned connect's socket is closed, not left to the kernel's retries")
    }

    func testNoHeadWithinTheFirstByteTimeoutIsATimeout() throws {
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            connection.waitForClose()
        }
        let started = Date()
        let result = try run(try client(server.baseURL, firstByteMs: 200), Self.get("/")).first
        XCTAssertEqual(result?.error, .timeout("no response within 200 ms"))
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
    }

    func testSilenceInTheBodyIsAnIdleTimeoutAndTheTotalLimitHolds() throws {
        let server = try ScriptedUpstream { connection in
            let head = connection.readHead() ?? ""
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst")
            if head.contains("/trickle") {
                // Never silent for long, but never done either.
                for _ in 0..<40 {
                    Thread.sleep(forTimeInterval: 0.05)
                    guard connection.send("x") else { return }
                }
            }
            connection.waitForClose()
        }
        let idle = try run(try client(server.baseURL, idleMs: 300), Self.get("/silent")).first
        XCTAssertEqual(idle?.error, .timeout("no response body byte for 300 ms"))
        XCTAssertEqual(idle?.text, "first")
        let total = try run(try client(server.baseURL, idleMs: 300, totalMs: 600), Self.get("/trickle")).first
        XCTAssertEqual(total?.error, .timeout("the exchange took longer than 600 ms"))
        XCTAssertGreaterThan(total?.body.count ?? 0, 5)
    }

    // MARK: - Back-pressure

    func testAFullReceiverStopsReadingTheUpstreamUntilResumed() throws {
        let total = 64 << 20
        let sent = Mutex(0)
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            connection.setSendTimeout(milliseconds: 3000)
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: \(total)\r\n\r\n")
            let piece = [UInt8](repeating: 7, count: 16 * 1024)
            for _ in 0..<(total / piece.count) {
                guard connection.send(piece) else { return }
                sent.withLock { $0 += piece.count }
            }
            connection.waitForClose()
        }
        let client = try client(server.baseURL, idleMs: 500)
        let received = Mutex(0)
        let ended = DispatchSemaphore(value: 0)
        let failure = Mutex<UpstreamError?>(nil)
        let stream = try loop.waitForTask { () -> Unchecked<UpstreamStream?> in
            guard let multi = try? LoopMulti.current(), let stream = try? await client.open(Self.get("/big"), on: multi) else {
                return Unchecked(nil)
            }
            stream.relay(body: { bytes in
                received.withLock { $0 += bytes.count }
                return false  // full after every piece until resumed
            }, end: { error in
                failure.withLock { $0 = error }
                ended.signal()
            })
            return Unchecked(stream)
        }
        guard let stream = stream.value else { return XCTFail("no stream") }
        // Paused far longer than the idle timeout: the silence is the receiver's, not the upstream's.
        Thread.sleep(forTimeInterval: 1)
        let stalled = sent.withLock { $0 }
        XCTAssertLessThan(stalled, 16 << 20, "the upstream's send blocks while the receiver is full")
        XCTAssertLessThan(received.withLock { $0 }, 1 << 20)
        XCTAssertEqual(ended.wait(timeout: .now()), .timedOut)
        // Resumed from now on whenever the receiver drained (here: at once).
        let resumer = Unchecked(stream)
        for _ in 0..<100_000 {
            if ended.wait(timeout: .now()) == .success { break }
            loop.executeOnLoop { resumer.value.resume() }
            Thread.sleep(forTimeInterval: 0.0005)
        }
        XCTAssertNil(failure.withLock { $0 })
        XCTAssertEqual(received.withLock { $0 }, total)
    }

    func testAStreamedUploadIsTakenNoFasterThanTheUpstreamReadsIt() throws {
        let total = 32 << 20
        let reading = DispatchSemaphore(value: 0)
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            _ = reading.wait(timeout: .now() + 10)  // the upstream takes nothing until the test says so
            let body = connection.read(total)
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: \(String(body.count).utf8.count)\r\n\r\n\(body.count)")
            connection.waitForClose()
        }
        let client = try client(server.baseURL, firstByteMs: 10_000)
        let loop: EventLoop = self.loop
        let upload = Unchecked(UpstreamUpload(length: total))
        let written = Mutex(0)
        let piece = [UInt8](repeating: 1, count: 64 * 1024)
        // Writes until the upload says it is full, again when it drained, until the whole body went.
        nonisolated(unsafe) var produce: (() -> Void)?
        produce = {
            while written.withLock({ $0 }) < total {
                let more = piece.withUnsafeBytes { upload.value.write($0) }
                written.withLock { $0 += piece.count }
                if !more { return }
            }
            upload.value.finish()
        }
        upload.value.onDrained = { loop.executeOnLoop { produce?() } }
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: Exchanged?
        Task(executorPreference: loop) {
            loop.executeOnLoop { produce?() }
            result = await Exchanged.run(client, UpstreamRequest(method: "POST", pathAndQuery: "/upload"), upload: upload.value)
            done.signal()
        }
        Thread.sleep(forTimeInterval: 0.5)
        let stalled = written.withLock { $0 }
        XCTAssertLessThan(stalled, 12 << 20, "the client's body is not taken faster than the upstream reads it")
        XCTAssertGreaterThan(stalled, 0)
        reading.signal()
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
        XCTAssertNil(result?.error)
        XCTAssertEqual(result?.text, String(total))
        produce = nil
    }

    // MARK: - What is sent

    func testRequestHeadIsTheCallersWithHostFromTheBaseURLAndFramingFromTheBody() throws {
        let upstream = try ExampleUpstream()
        defer { upstream.stop() }
        let client = try client(upstream.baseURL + "/echo/prefix")
        let fields = [HTTPField("X-Trace", "abc 123"), HTTPField("X-Empty", ""), HTTPField("Content-Length", "999"),
                      HTTPField("Transfer-Encoding", "chunked"), HTTPField("X-Multi", "one"), HTTPField("X-Multi", "two")]
        let results = try run(client, UpstreamRequest(method: "POST", pathAndQuery: "/items%2F7/../x?b=2&a=1", headers: fields, body: Array("four".utf8)),
                              Self.get("/plain?q=1"), UpstreamRequest(method: "PUT", pathAndQuery: "/empty"),
                              Self.get("/own-host", [HTTPField("X-Before", "1"), HTTPField("Host", "api.example.com")]))
        let reports = try results.map { try EchoReport($0.body) }
        XCTAssertEqual(reports[0].method, "POST")
        XCTAssertEqual(reports[0].path, "/echo/prefix/items%2F7/../x")
        XCTAssertEqual(reports[0].query, "b=2&a=1")
        XCTAssertEqual(reports[0].body, Array("four".utf8))
        XCTAssertEqual(reports[0].headerFields.map(\.name), ["Host", "X-Trace", "X-Empty", "X-Multi", "X-Multi", "Content-Length"])
        XCTAssertEqual(reports[0].headerFields.map(\.value), ["127.0.0.1:\(upstream.port)", "abc 123", "", "one", "two", "4"])
        XCTAssertEqual(reports[1].headerFields.map(\.name), ["Host"], "nothing of curl's own: no Accept, no User-Agent")
        XCTAssertEqual(reports[1].query, "q=1")
        XCTAssertEqual(reports[2].headerFields.map(\.name), ["Host", "Content-Length"])
        XCTAssertEqual(reports[2].headerFields.last?.value, "0")
        XCTAssertEqual(reports[3].headerFields.map(\.name), ["X-Before", "Host"])
        XCTAssertEqual(reports[3].headerFields.last?.value, "api.example.com")
        XCTAssertEqual(Set(reports.map(\.connectionNumber)).count, 1, "one kept-alive connection throughout")
    }

    func testStreamedUploadsGoChunkedOrWithTheirLength() throws {
        let upstream = try ExampleUpstream()
        defer { upstream.stop() }
        let client = try client(upstream.baseURL)
        let piece = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let loop: EventLoop = self.loop
        let results = try loop.waitForTask { () -> [Exchanged] in
            var results: [Exchanged] = []
            for length in [nil, 3 * piece.count] {
                let upload = UpstreamUpload(length: length)
                // One piece before the exchange starts, the rest while it waits for the answer.
                _ = piece.withUnsafeBytes { upload.write($0) }
                loop.executeOnLoop {
                    _ = piece.withUnsafeBytes { upload.write($0) }
                    loop.executeOnLoop {
                        _ = piece.withUnsafeBytes { upload.write($0) }
                        upload.finish()
                    }
                }
                results.append(await Exchanged.run(client, UpstreamRequest(method: "PUT", pathAndQuery: "/echo/upload"), upload: upload))
            }
            return results
        }
        let reports = try results.map { try EchoReport($0.body) }
        XCTAssertEqual(reports.map(\.body), [piece + piece + piece, piece + piece + piece])
        XCTAssertEqual(reports[0].headerFields.map(\.name), ["Host", "Transfer-Encoding"])
        XCTAssertEqual(reports[1].headerFields.map(\.name), ["Host", "Content-Length"])
        XCTAssertEqual(reports[1].headerFields.last?.value, "300000")
    }

    func testHostNamesAreResolvedAndEveryKindOfResponseOfTheExampleUpstreamRelays() throws {
        let upstream = try ExampleUpstream()
        defer { upstream.stop() }
        let client = try client("http://localhost:\(upstream.port)")
        let results = try run(client, Self.get("/early-hints"), Self.get("/bytes?n=300000&chunked=1"), Self.get("/truncated"),
                              Self.get("/v1/ai/stream"), Self.get("/status/204"))
        XCTAssertEqual(results[0].text, "after hints\n")
        XCTAssertEqual(results[1].body, (0..<300_000).map { UInt8($0 % 251) })
        XCTAssertEqual(results[2].error?.reasonCode, "upstream_protocol_error")
        XCTAssertTrue(results[3].text.hasSuffix("data: [DONE]\n\n"))
        XCTAssertEqual(results[4].status, 204)
        XCTAssertEqual(results.map(\.remoteAddress).first, "127.0.0.1:\(upstream.port)")
    }

    /// A burst of new connections to one name asks the resolver once (the rest wait for its answer, later
    /// ones use it for a minute); a name none of whose addresses answer is forgotten at once.
    func testANameIsResolvedOnceForABurstOfNewConnectionsAndForgottenWhenNothingAnswers() throws {
        let server = try ScriptedUpstream { connection in
            connection.readHead()
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            connection.waitForClose()
        }
        let client = try client("http://localhost:\(server.port)")
        let carried = Unchecked(self.loop!)
        let texts = try self.loop.waitForTask { () -> [String] in
            await withTaskGroup(of: String.self) { group in
                for _ in 0..<20 { group.addTask(executorPreference: carried.value) { await Exchanged.run(client, Self.get("/")).text } }
                var texts: [String] = []
                for await text in group { texts.append(text) }
                return texts
            }
        }
        XCTAssertEqual(texts, Array(repeating: "ok", count: 20))
        XCTAssertEqual(server.requests.count, 20, "twenty connections")
        XCTAssertEqual(try self.loop.waitForTask { carried.value.resolvedNameCount }, 1)
        let closed = try self.client("http://localhost:\(try Self.closedPort())")
        XCTAssertEqual(try run(closed, Self.get("/")).first?.error?.reasonCode, "upstream_unavailable")
        XCTAssertEqual(try self.loop.waitForTask { carried.value.resolvedNameCount }, 1, "the name with nothing listening is not kept")
    }

    /// Connects waiting on one lookup all hear its failure (RFC 6761: ".invalid" never resolves), and nothing
    /// is kept. A resolver that does not answer within the connect timeout makes it a timeout instead.
    func testConnectsWaitingOnALookupThatFailsAllFail() throws {
        let client = try client("http://gateway-test.invalid:8080", connectMs: 3000)
        let carried = Unchecked(self.loop!)
        let before = try self.loop.waitForTask { carried.value.resolvedNameCount }
        let reasons = try self.loop.waitForTask { () -> [String] in
            await withTaskGroup(of: String.self) { group in
                for _ in 0..<3 { group.addTask(executorPreference: carried.value) { await Exchanged.run(client, Self.get("/")).error?.reasonCode ?? "none" } }
                var reasons: [String] = []
                for await reason in group { reasons.append(reason) }
                return reasons
            }
        }
        XCTAssertEqual(reasons.count, 3)
        XCTAssertEqual(Set(reasons).count, 1, "\(reasons)")
        XCTAssertTrue(["upstream_unavailable", "upstream_timeout"].contains(reasons[0]), "\(reasons)")
        XCTAssertEqual(try self.loop.waitForTask { carried.value.resolvedNameCount }, before)
    }

    /// A loopback port nothing listens on (bound, then closed).
    private static func closedPort() throws -> Int {
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { Glibc.close(probe) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(probe, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(probe, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    func testIPv6LiteralBaseURLsConnectAndNameTheirPeerInBrackets() throws {
        let server = try ScriptedUpstream(ipv6: true) { connection in
            connection.readHead()
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nv6")
            connection.waitForClose()
        }
        let result = try run(try client(server.baseURL + "/base"), Self.get("/x?y=1")).first
        XCTAssertEqual(result?.text, "v6")
        XCTAssertEqual(result?.remoteAddress, "[::1]:\(server.port)")
        XCTAssertEqual(server.requests.first?.split(separator: "\r\n").prefix(2), ["GET /base/x?y=1 HTTP/1.1", "Host: [::1]:\(server.port)"])
    }

    func testCancelClosesTheConnectionAndAnAbortedUploadFailsTheExchange() throws {
        let closed = DispatchSemaphore(value: 0)
        let server = try ScriptedUpstream { connection in
            let head = connection.readHead() ?? ""
            if head.contains("/stream") {
                connection.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n")
            }
            connection.waitForClose()
            closed.signal()
        }
        let client = try client(server.baseURL)
        let loop: EventLoop = self.loop
        let results = try loop.waitForTask { () -> [Exchanged] in
            var cancelled = Exchanged()
            if let multi = try? LoopMulti.current(), let stream = try? await client.open(Self.get("/stream"), on: multi) {
                cancelled.status = stream.status
                stream.cancel()
            }
            let upload = UpstreamUpload(length: 10)
            _ = Array("part".utf8).withUnsafeBytes { upload.write($0) }
            loop.executeOnLoop { upload.abort() }
            return [cancelled, await Exchanged.run(client, UpstreamRequest(method: "POST", pathAndQuery: "/upload"), upload: upload)]
        }
        XCTAssertEqual(results[0].status, 200)
        XCTAssertEqual(closed.wait(timeout: .now() + 5), .success, "the cancelled exchange's connection was closed")
        XCTAssertEqual(results[1].error?.reasonCode, "upstream_protocol_error")
        XCTAssertEqual(closed.wait(timeout: .now() + 5), .success, "the aborted upload's connection was closed")
        XCTAssertEqual(server.connections, 2)
    }
}
