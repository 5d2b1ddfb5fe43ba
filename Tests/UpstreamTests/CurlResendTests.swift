import EventLoop
import Foundation
import TestSupport
@testable import Upstream
import XCTest

/// curl's side (`https://` upstreams, Apple's APIs, the CLI) against a loopback server that reads a request
/// on a kept-alive connection whole and closes it unanswered. Left alone, curl 7.88 sends such a request again
/// on a new connection, whatever its method ("Connection died, retrying a fresh connect"). Plain `http://`
/// here: curl's retry does not depend on the scheme, and the loop tests clear the target's `plainHTTP` to
/// take the path `https://` targets take.
final class CurlResendTests: XCTestCase {
    /// Connection 1 answers its first request and stays open, then reads the second whole (head and
    /// Content-Length body) and closes without a word; every other connection answers everything. An
    /// answer's body is the number of the connection that gave it.
    private static func closesTheSecondRequestUnanswered() throws -> ScriptedUpstream {
        try ScriptedUpstream { connection in
            var answered = 0
            while let head = connection.readHead() {
                _ = connection.read(contentLength(head))
                if connection.number == 1 && answered == 1 { return }
                answered += 1
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n\(connection.number)")
            }
        }
    }

    private static func contentLength(_ head: String) -> Int {
        let field = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
        return field.flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
    }

    /// "POST /2" of each request head the server read, in order.
    private static func requestLines(_ server: ScriptedUpstream) -> [String] {
        server.requests.map { String($0.prefix { $0 != "\r\n" }.dropLast(" HTTP/1.1".count)) }
    }

    private static func get(_ path: String) -> UpstreamRequest { UpstreamRequest(method: "GET", pathAndQuery: path) }

    // MARK: - Blocking transfers (Apple's APIs, the CLI)

    /// The body's text, or the reason the exchange failed.
    private static func send(_ client: UpstreamClient, _ request: UpstreamRequest) -> String {
        do throws(UpstreamError) {
            return String(decoding: try client.send(request).readAll(limit: 100), as: UTF8.self)
        } catch {
            return error.reasonCode
        }
    }

    private static func blockingClient(_ server: ScriptedUpstream) throws -> UpstreamClient {
        UpstreamClient(target: try UpstreamTarget(baseURL: server.baseURL, connectTimeoutMs: 2000, timeoutMs: 5000))
    }

    /// The upstream may have run it before closing: a purchase must not happen twice.
    func testAPostWithABodyIsNotSentAgainOnANewConnection() throws {
        let server = try Self.closesTheSecondRequestUnanswered()
        let client = try Self.blockingClient(server)
        let results = [Self.send(client, Self.get("/1")),
                       Self.send(client, UpstreamRequest(method: "POST", pathAndQuery: "/2", body: Array("buy one".utf8)))]
        XCTAssertEqual(results, ["1", "upstream_unavailable"])
        XCTAssertEqual(Self.requestLines(server), ["GET /1", "POST /2"])
    }

    /// No body written, so no rewind for curl to fail: the resend is stopped before it starts.
    func testABodilessPostIsNotSentAgainEither() throws {
        let server = try Self.closesTheSecondRequestUnanswered()
        let client = try Self.blockingClient(server)
        let results = [Self.send(client, Self.get("/1")), Self.send(client, UpstreamRequest(method: "POST", pathAndQuery: "/2"))]
        XCTAssertEqual(results, ["1", "upstream_unavailable"])
        XCTAssertEqual(Self.requestLines(server), ["GET /1", "POST /2"])
        XCTAssertTrue(server.requests.last?.lowercased().contains("content-length: 0") ?? false, "\(server.requests)")
    }

    func testAGetIsSentAgainOnANewConnectionAndAnsweredThere() throws {
        let server = try Self.closesTheSecondRequestUnanswered()
        let client = try Self.blockingClient(server)
        XCTAssertEqual([Self.send(client, Self.get("/1")), Self.send(client, Self.get("/2"))], ["1", "2"])
        XCTAssertEqual(Self.requestLines(server), ["GET /1", "GET /2", "GET /2"])
    }

    // MARK: - On an event loop's multi handle (`https://` targets)

    /// The exchanges one after another on a loop, each as its body's text or the reason it failed; `upload`
    /// makes a request's streamed body, on the loop.
    private static func onLoop(_ server: ScriptedUpstream,
                               _ exchanges: [(request: UpstreamRequest, upload: (() -> UpstreamUpload)?)]) throws -> [String] {
        let loop = try EventLoop(name: "curl-resend-test")
        loop.start()
        defer { loop.stop() }
        var target = try UpstreamTarget(baseURL: server.baseURL, timeouts: UpstreamTimeouts(
            connectMs: 2000, firstByteMs: 5000, idleMs: 5000, totalMs: 0))
        target.plainHTTP = nil  // curl's path, as for https://
        let client = UpstreamClient(target: target)
        nonisolated(unsafe) let exchanges = exchanges
        return try loop.waitForTask {
            var results: [String] = []
            for exchange in exchanges { results.append(await Exchanged.run(client, exchange.request, upload: exchange.upload?()).outcome) }
            return results
        }
    }

    func testOnTheLoopAnInMemoryPostIsNotSentAgainButAPutIs() throws {
        let post = try Self.closesTheSecondRequestUnanswered()
        XCTAssertEqual(try Self.onLoop(post, [(Self.get("/1"), nil),
                                              (UpstreamRequest(method: "POST", pathAndQuery: "/2", body: Array("buy one".utf8)), nil)]),
                       ["1", "upstream_unavailable"])
        XCTAssertEqual(Self.requestLines(post), ["GET /1", "POST /2"])

        let put = try Self.closesTheSecondRequestUnanswered()
        XCTAssertEqual(try Self.onLoop(put, [(Self.get("/1"), nil),
                                             (UpstreamRequest(method: "PUT", pathAndQuery: "/2", body: Array("set it".utf8)), nil)]),
                       ["1", "2"])
        XCTAssertEqual(Self.requestLines(put), ["GET /1", "PUT /2", "PUT /2"])
    }

    /// Its bytes are gone once sent: never sent twice, whatever the method (the loops' own client's rule too).
    func testOnTheLoopAStreamedUploadIsNeverSentTwice() throws {
        let server = try Self.closesTheSecondRequestUnanswered()
        let upload = {
            let upload = UpstreamUpload(length: 4)
            _ = Array("body".utf8).withUnsafeBytes { upload.write($0) }
            upload.finish()
            return upload
        }
        XCTAssertEqual(try Self.onLoop(server, [(Self.get("/1"), nil), (UpstreamRequest(method: "PUT", pathAndQuery: "/2"), upload)]),
                       ["1", "upstream_unavailable"])
        XCTAssertEqual(Self.requestLines(server), ["GET /1", "PUT /2"])
    }
}
