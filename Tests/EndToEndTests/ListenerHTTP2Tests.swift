import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// HTTP/2 over the real binary with clients that are not ours (curl --http2, Python's h2): the same route → decide →
/// forward → log path as HTTP/1.1, SSE relayed as it arrives, a stream left unread beside one that completes,
/// prior-knowledge h2c, and the known attacks each answered with GOAWAY (or a reset), counted, and leaving the
/// gateway answering others with bounded memory.
final class ListenerHTTP2Tests: XCTestCase {
    private var certificates: TestCertificates!
    private var environment: GatewayEnvironment!

    static let routes = """
          - { path_prefix: "/secure/", upstream: echo, policy: assert }
          - { path_prefix: "/closed/", policy: deny }
          - { path_prefix: "/v1/ai/", upstream: api, policy: pass }
          - { path: "/bytes", upstream: api, policy: pass }
          - { path: "/slow", upstream: api, policy: pass }
          - { path_prefix: "/", upstream: echo, policy: pass }
    """

    override func setUpWithError() throws {
        guard H2Client.isAvailable else { throw XCTSkip("Python's h2 package is missing (Debian python3-h2: make deps)") }
        certificates = try TestCertificates()
    }

    override func tearDown() {
        environment?.stop()
        super.tearDown()
    }

    private func start(extraServer: String = "") throws {
        environment = try GatewayEnvironment.overTLS(certificates, extraServer: extraServer, routes: Self.routes)
    }

    private func h2(_ mode: String, _ path: String = "/echo/probe") throws -> [String] {
        try H2Client.run(mode, port: environment.gateway.port, caFile: certificates.caFile, path: path)
    }

    private func protections(_ reason: String, atLeast count: Double) throws -> Double? {
        let series = "gateway_http2_protections_total{reason=\"\(reason)\"}"
        let text = try environment.metrics { (MetricsText.sample(series, in: $0) ?? 0) >= count }
        return MetricsText.sample(series, in: text)
    }

    func testRoutesOverHTTP2GoThroughTheSamePathAsHTTP1() throws {
        try start()
        let curl = TLSCurl(port: environment.gateway.port, caFile: certificates.caFile, serverName: "localhost",
                           directory: environment.directory, http2: true)
        let app = AppClient(device: try SimulatedDevice(ca: environment.ca, appID: GatewayEnvironment.app, environment: .development),
                            transport: curl.send)
        XCTAssertEqual(try app.register().status, 200)
        let signed = try app.send(app.signed("POST", "/secure/feed", body: Array("signed over h2".utf8)))
        XCTAssertEqual(signed.status, 200, signed.text)
        XCTAssertEqual(signed.forwarded("x-attest-status"), ["verified"])
        XCTAssertEqual(signed.forwarded("x-forwarded-proto"), ["https"])
        XCTAssertEqual(signed.json["body_base64"] as? String, Data("signed over h2".utf8).base64EncodedString())
        let replayed = try curl.send(UpstreamRequest(method: "GET", pathAndQuery: "/secure/feed", headers: []))
        XCTAssertEqual(replayed.status, 401)
        XCTAssertEqual(replayed.error, "assertion_missing")
        XCTAssertEqual(try curl.send(UpstreamRequest(method: "GET", pathAndQuery: "/closed/x", headers: [])).error, "route_denied")
        // Bodies many windows long both ways: the upload is let in as the upstream takes it.
        let big = (0..<900_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let bulk = try curl.send(UpstreamRequest(method: "PUT", pathAndQuery: "/echo/big", headers: [], body: big))
        XCTAssertEqual(bulk.status, 200)
        XCTAssertEqual(bulk.json["body_base64"] as? String, Data(big).base64EncodedString(), "the body arrived intact")
        let cookies = try curl.send(UpstreamRequest(method: "GET", pathAndQuery: "/echo/c", headers: [HTTPField("Cookie", "a=1; b=2")]))
        XCTAssertEqual(cookies.forwarded("cookie"), ["a=1; b=2"], "cookie crumbs are joined for the HTTP/1.1 upstream")
        // Host beside :authority must agree with it (RFC 9113 §8.3.1); a repeated one nghttp2 resets (PROTOCOL_ERROR);
        // Host alone names the host.
        let hosts = try h2("hosts", "/echo/hosts")
        XCTAssertEqual(hosts.filter { $0.hasPrefix("status") || $0.hasPrefix("reset") }, ["status 200", "status 400", "reset 1", "status 200"],
                       "\(hosts)")
        XCTAssertEqual(environment.gateway.waitForEvent { $0["path"] as? String == "/echo/hosts" && $0["status"] as? Int == 400 }?["reason"]
            as? String, "duplicate_host")
        let line = environment.gateway.waitForEvent { $0["path"] as? String == "/secure/feed" && $0["status"] as? Int == 200 }
        XCTAssertEqual(line?["protocol"] as? String, "HTTP/2")
        // The request id (sent without HPACK indexing) reaches the client as the log line has it.
        let requestId = try XCTUnwrap(line?["request_id"] as? String)
        XCTAssertEqual(signed.headers.first { $0.hasName("X-Request-Id") }?.value, requestId)
        XCTAssertEqual(line?["alpn"] as? String, "h2")
        XCTAssertEqual(line?["decision"] as? String, "verified")
        let denied = environment.gateway.waitForEvent { $0["path"] as? String == "/closed/x" }
        XCTAssertEqual(denied?["reason"] as? String, "route_denied")
        XCTAssertEqual(denied?["protocol"] as? String, "HTTP/2")
    }

    func testTheTargetIsSplitAtItsFirstQuestionMarkAndOneNotVisibleASCIIIsRefused() throws {
        try start()
        // A space nghttp2 resets itself (PROTOCOL_ERROR); a fragment and a byte past ASCII are the gateway's to refuse.
        let targets = ["/echo/t?a=1&b=%2F?c", "/echo/t", "/echo/t#f", "/echo/t x", "/echo/\u{e9}"]
        let seen = try H2Client.run("targets", port: environment.gateway.port, caFile: certificates.caFile, arguments: targets)
        XCTAssertEqual(seen.map { $0.split(separator: " ").prefix(2).joined(separator: " ") },
                       ["status 200", "status 200", "status 400", "reset 1", "status 400"], "\(seen)")
        let upstream = seen.prefix(2).map { line in
            ((try? JSONSerialization.jsonObject(with: Data(line.utf8.dropFirst("status 200 ".count)))) as? [String: Any]) ?? [:]
        }
        XCTAssertEqual(upstream.map { $0["path"] as? String }, ["/echo/echo/t", "/echo/echo/t"], "\(seen)")
        XCTAssertEqual(upstream.map { $0["query"] as? String }, ["a=1&b=%2F?c", ""], "the query from the first \"?\" on: \(seen)")
        XCTAssertTrue(seen[2].contains("\"error\":\"bad_request_target\""), seen[2])
        let refused = environment.gateway.waitForEvent { $0["reason"] as? String == "bad_request_target" }
        XCTAssertEqual(refused?["path"] as? String, "/echo/t#f", "the refused target is logged as sent")
    }

    func testAnSSEResponseIsRelayedAsItArrivesAndAnUnreadStreamDoesNotHoldAnother() throws {
        try start(extraServer: ", send_timeout_ms: 1500")
        // 3 events 300 ms apart (the test upstream's total timeout is 1500 ms).
        let events = try h2("sse", "/v1/ai/stream?events=3&interval_ms=300")
        let times = events.filter { $0.hasPrefix("event ") }.compactMap { Double($0.split(separator: " ")[1]) }
        XCTAssertEqual(times.count, 4, "3 tokens and [DONE]: \(events)")
        if let first = times.first, let last = times.last {
            XCTAssertGreaterThan(last - first, 0.6, "events arrive as the upstream sends them, not at the end: \(events)")
        }
        // Stream A (3 MB, never given window) stalls; stream B on the same connection completes meanwhile.
        let stall = try h2("stall", "/bytes?n=3000000")
        XCTAssertTrue(stall.contains { $0.hasPrefix("b-done ") }, "\(stall)")
        let reset = try XCTUnwrap(stall.first { $0.hasPrefix("reset a ") }, "\(stall)").split(separator: " ")
        XCTAssertEqual(reset[2], "8", "the stalled stream is cancelled at send_timeout_ms: \(stall)")
        XCTAssertLessThanOrEqual(Int(reset[3]) ?? .max, 70_000, "it got no more than its window: \(stall)")
        XCTAssertEqual(try protections("stalled_stream", atLeast: 1), 1)
        let line = environment.gateway.waitForEvent { $0["path"] as? String == "/bytes" }
        XCTAssertEqual(line?["outcome"] as? String, "timeout")
    }

    func testAttacksAreAnsweredWithGOAWAYCountedAndOthersStillServed() throws {
        try start(extraServer: ", header_timeout_ms: 1000")
        func rss() throws -> Double {
            try XCTUnwrap(MetricsText.sample("process_resident_memory_bytes", in: environment.admin("/metrics").text))
        }
        let probe = try h2("get")
        XCTAssertEqual(probe.first, "status 200")
        XCTAssertTrue(probe.contains("settings 100 65536"), "max_concurrent_streams and the stream window are announced: \(probe)")
        let before = try rss()
        // Each attack is kept up on connection after connection while probes on other connections are answered.
        for (mode, reason) in [("rapid_reset", "rapid_reset"), ("ping_flood", "control_flood"), ("settings_flood", "control_flood")] {
            let seen = try underAttack(mode, "/slow?ms=2000")
            XCTAssertTrue(seen.contains("goaway 11"), "\(mode): ENHANCE_YOUR_CALM expected, got \(seen)")
            XCTAssertGreaterThanOrEqual(try protections(reason, atLeast: 1) ?? 0, 1, mode)
        }
        // A header block left unfinished holds the connection until header_timeout_ms, then it is closed.
        let partial = try underAttack("partial_headers")
        XCTAssertTrue(partial.contains("closed"), "\(partial)")
        let after = partial.filter { $0.hasPrefix("after ") }.compactMap { Double($0.split(separator: " ")[1]) }
        XCTAssertFalse(after.isEmpty, "\(partial)")
        XCTAssertTrue(after.allSatisfy { (0.8..<10).contains($0) }, "closed at the header timeout (1000 ms): \(partial)")
        let continuation = try underAttack("continuation_flood")
        XCTAssertTrue(continuation.contains { $0.hasPrefix("goaway") || $0 == "closed" }, "\(continuation)")
        XCTAssertGreaterThanOrEqual(try protections("continuation_flood", atLeast: 1) ?? 0, 1)
        // An HPACK bomb: 800 KB of headers from a few KB on the wire, answered 431; the connection goes on.
        let bomb = try underAttack("header_bomb").filter { $0.hasPrefix("status") }
        XCTAssertFalse(bomb.isEmpty)
        XCTAssertEqual(bomb, Array(repeating: ["status 431", "status 200"], count: bomb.count / 2).flatMap { $0 }, "\(bomb)")
        let grown = try rss() - before
        XCTAssertLessThan(grown, 64 * 1024 * 1024, "memory stays bounded: \(grown) bytes more")
        XCTAssertFalse(environment.gateway.process.lines.contains { $0.contains("rapid_reset") }, "counted, not logged per connection")
    }

    /// Probes on other connections, each from its handshake to its response: seconds, loose (a loaded 2-core machine);
    /// a GET takes milliseconds here when nothing else runs.
    static let probeBound = 2.0

    /// Plays `mode` for `seconds`, connection after connection, while probes on other connections are timed: each
    /// must be answered within `probeBound`, and at least one must end while the attack is still on.
    private func underAttack(_ mode: String, _ path: String = "/echo/probe", seconds: Double = 3) throws -> [String] {
        let attack = DispatchGroup()
        // Written by the attacker's thread before it leaves the group, read after.
        nonisolated(unsafe) var seen: [String] = []
        nonisolated(unsafe) var failure: (any Error)?
        let (port, caFile) = (environment.gateway.port, certificates.caFile)
        attack.enter()
        DispatchQueue.global().async {
            do {
                seen = try H2Client.run(mode, port: port, caFile: caFile, path: path, arguments: [String(seconds)], timeout: seconds + 60)
            } catch { failure = error }
            attack.leave()
        }
        var probes: [Double] = [], during = 0
        while attack.wait(timeout: .now() + 0.1) == .timedOut {
            let probe = try h2("get")
            if attack.wait(timeout: .now()) == .timedOut { during += 1 }
            XCTAssertEqual(probe.first, "status 200", "\(mode): a probe on another connection is served: \(probe)")
            probes.append(probe.first { $0.hasPrefix("body ") }.flatMap { Double($0.split(separator: " ")[2]) } ?? 99)
        }
        if let failure { throw failure }
        XCTAssertGreaterThan(during, 0, "\(mode): a probe ended while the attack went on")
        XCTAssertLessThan(probes.max() ?? 0, Self.probeBound, "\(mode): probes during the attack (seconds each): \(probes)")
        print("\(mode): \(probes.count) probes, \(during) during the attack, slowest \(probes.max() ?? 0) s")
        return seen
    }

    func testStreamsPastMaxConcurrentStreamsAreRefusedWhileTheAdmittedOnesComplete() throws {
        try start(extraServer: ", max_concurrent_streams: 4")
        // 7 slow requests at once on one connection, sent after the client acknowledged the limit of 4.
        let seen = try H2Client.run("burst", port: environment.gateway.port, caFile: certificates.caFile, path: "/slow?ms=800",
                                    arguments: ["7"])
        let completed = seen.filter { $0.hasSuffix(" status 200") }.count
        let ended = seen.filter { $0.contains(" ended ") }.count
        let refused = seen.filter { $0.contains(" reset ") }
        XCTAssertEqual(completed, 4, "the admitted streams are answered: \(seen)")
        XCTAssertEqual(ended, 4, "\(seen)")
        XCTAssertEqual(refused.count, 3, "the streams past the limit are reset: \(seen)")
        let firstEnd = seen.filter { $0.contains(" ended ") }.compactMap { Double($0.split(separator: " ")[3]) }.min() ?? 0
        for line in refused {
            let fields = line.split(separator: " ")
            XCTAssertEqual(fields[3], "7", "REFUSED_STREAM (the client may retry them): \(line)")
            XCTAssertLessThan(Double(fields[4]) ?? 99, firstEnd, "refused at once, not once the admitted ones are done: \(seen)")
        }
        // Only the admitted streams became requests (the access log has a line for each, before the client saw its end).
        let slow = { self.environment.gateway.events.filter { $0["path"] as? String == "/slow" }.count }
        _ = environment.gateway.waitForEvent { _ in slow() >= 4 }
        XCTAssertEqual(slow(), 4)
    }

    func testStreamsLeaveNoMemoryBehind() throws {
        try start()
        func rss() throws -> Double {
            try XCTUnwrap(MetricsText.sample("process_resident_memory_bytes", in: environment.admin("/metrics").text))
        }
        let url = "https://127.0.0.1:\(environment.gateway.port)/closed/x"
        // A first round grows the allocator's arenas; the second must not grow the process much further.
        _ = try Command.run("h2load", ["-n", "3000", "-c", "4", "-m", "10", url], timeout: 60)
        let before = try rss()
        let run = try Command.run("h2load", ["-n", "15000", "-c", "4", "-m", "10", url], timeout: 120)
        XCTAssertTrue(run.output.contains("15000 done"), run.output)
        let grown = try rss() - before
        // A stream that kept its exchange (a reference cycle) cost about 1 KiB each: 15 MB here.
        XCTAssertLessThan(grown, 6 * 1024 * 1024, "15,000 streams left \(grown) bytes behind")
    }

    func testADrainLetsAnOpenStreamFinish() throws {
        try start()
        // curl: it finishes a stream below a graceful GOAWAY's last stream id (Python's h2 stops at any GOAWAY).
        let curl = TLSCurl(port: environment.gateway.port, caFile: certificates.caFile, serverName: "localhost",
                           directory: environment.directory, http2: true)
        // Written by the client's thread before it signals, read after the wait.
        nonisolated(unsafe) var status = 0
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            status = (try? curl.send(UpstreamRequest(method: "GET", pathAndQuery: "/slow?ms=800", headers: [])))?.status ?? -1
            done.signal()
        }
        XCTAssertNotNil(environment.gateway.waitForEvent { _ in
            (try? self.environment.admin("/metrics").text).flatMap { MetricsText.sample("gateway_in_flight_requests", in: $0) } == 1
        }, "the request is in flight")
        environment.gateway.process.signal(SIGTERM)
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
        XCTAssertEqual(status, 200, "the stream open when the drain began completes")
        XCTAssertEqual(environment.gateway.process.waitForExit(timeout: 10), 0)
    }

    func testPriorKnowledgeH2CBesideHTTP1OnAPlainListener() throws {
        environment = try GatewayEnvironment(routes: Self.routes, extra: "server: { h2c: true }")
        let h2c = try H2Client.run("get", port: environment.gateway.port, caFile: nil, path: "/echo/h2c")
        XCTAssertEqual(h2c.first, "status 200", "\(h2c)")
        let plain = try environment.request("GET", "/echo/h1")
        XCTAssertEqual(plain.status, 200, "HTTP/1.1 still works on the same port")
        XCTAssertEqual(plain.forwarded("x-forwarded-proto"), ["http"])
        let line = environment.gateway.waitForEvent { $0["path"] as? String == "/echo/h2c" }
        XCTAssertEqual(line?["protocol"] as? String, "HTTP/2")
        XCTAssertNil(line?["tls_version"])
    }
}
