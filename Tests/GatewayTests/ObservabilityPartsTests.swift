import AssertionCheck
import Foundation
@testable import Gateway
import HTTPServer
import TestSupport
import Upstream
import XCTest

/// The parts behind the access log and /metrics, each on its own: client address resolution, trace
/// context, the reason catalogue and the zero series it generates, process metrics.
final class ObservabilityPartsTests: XCTestCase {
    private func policy(_ networks: [String], header: ClientAddressPolicy.Header = .xForwardedFor) -> ClientAddressPolicy {
        ClientAddressPolicy(trustedProxies: networks.compactMap(IPNetwork.init), header: header)
    }

    func testForwardedHeadersAreIgnoredUnlessThePeerIsATrustedProxy() {
        let spoofed = [HTTPField("X-Forwarded-For", "1.2.3.4")]
        XCTAssertEqual(policy([]).resolve(peer: "198.51.100.7", headers: spoofed).client, "198.51.100.7")
        XCTAssertNil(policy([]).resolve(peer: "198.51.100.7", headers: spoofed).chain)
        let untrusted = policy(["10.0.0.0/8"]).resolve(peer: "198.51.100.7", headers: spoofed)
        XCTAssertEqual(untrusted.client, "198.51.100.7", "a client talking to the gateway directly cannot name another address")
        XCTAssertNil(untrusted.chain)
    }

    func testTheChainIsWalkedFromTheRightPastTrustedHops() {
        let trusted = policy(["10.0.0.0/8", "192.168.1.1"])
        // The client prepended a fake entry; the load balancers appended what they saw.
        let headers = [HTTPField("X-Forwarded-For", "6.6.6.6, 203.0.113.9"), HTTPField("X-Forwarded-For", "192.168.1.1")]
        let resolved = trusted.resolve(peer: "10.1.2.3", headers: headers)
        XCTAssertEqual(resolved.client, "203.0.113.9")
        XCTAssertEqual(resolved.chain, "6.6.6.6, 203.0.113.9, 192.168.1.1, 10.1.2.3")
        // Every hop trusted: the leftmost is the client. Garbage stops the walk at the last trusted hop.
        XCTAssertEqual(trusted.resolve(peer: "10.1.2.3", headers: [HTTPField("X-Forwarded-For", "10.9.9.9")]).client, "10.9.9.9")
        XCTAssertEqual(trusted.resolve(peer: "10.1.2.3", headers: [HTTPField("X-Forwarded-For", "1.1.1.1, nonsense, 10.0.0.5")]).client,
                       "10.0.0.5")
        // A trusted peer without the header is itself the client.
        XCTAssertEqual(trusted.resolve(peer: "10.1.2.3", headers: []).client, "10.1.2.3")
        XCTAssertNil(trusted.resolve(peer: "10.1.2.3", headers: []).chain)
    }

    func testForwardedHeaderPortsAndIPv6() {
        let trusted = policy(["::1", "fd00::/8"], header: .forwarded)
        let headers = [HTTPField("Forwarded", "for=\"[2001:db8::17]:4711\";proto=https, for=fd00::5;by=x")]
        XCTAssertEqual(trusted.resolve(peer: "::1", headers: headers).client, "2001:db8::17")
        XCTAssertEqual(trusted.resolve(peer: "::1", headers: [HTTPField("X-Forwarded-For", "1.2.3.4")]).client, "::1",
                       "with client_ip_header: forwarded, X-Forwarded-For is not read")
        let v4 = policy(["127.0.0.1"])
        XCTAssertEqual(v4.resolve(peer: "::ffff:127.0.0.1", headers: [HTTPField("X-Forwarded-For", "192.0.2.1:5555")]).client, "192.0.2.1",
                       "an IPv4-mapped peer matches its IPv4 block, and a port after an IPv4 hop is dropped")
    }

    func testNetworksParseAndMatchByPrefix() {
        XCTAssertNil(IPNetwork("10.0.0.0/33"))
        XCTAssertNil(IPNetwork("10.0.0/8"))
        XCTAssertNil(IPNetwork("example.com"))
        XCTAssertNil(IPNetwork("10.0.0.0/+8"))
        let block = try! XCTUnwrap(IPNetwork("172.16.0.0/12"))
        XCTAssertTrue(block.contains(IPAddress("172.31.255.255")!))
        XCTAssertFalse(block.contains(IPAddress("172.32.0.0")!))
        XCTAssertFalse(block.contains(IPAddress("::1")!))
        XCTAssertTrue(IPNetwork("0.0.0.0/0")!.contains(IPAddress("8.8.8.8")!))
        XCTAssertTrue(IPNetwork("2001:db8::/32")!.contains(IPAddress("2001:db8:ffff::1")!))
    }

    func testTrustedProxiesAreValidatedLikeEveryOtherKey() throws {
        let base = """
        app_attest: { apps: ["TEAMID1234.com.example.app"] }
        upstreams: { api: { url: "http://127.0.0.1:9000" } }
        routes: [ { path_prefix: "/", upstream: api, policy: pass } ]
        """
        let good = try GatewayConfig.parse(yaml: base + "\nserver: { trusted_proxies: [\"10.0.0.0/8\", \"::1\"], client_ip_header: forwarded }")
        XCTAssertEqual(good.clientAddress.trustedProxies.count, 2)
        XCTAssertEqual(good.clientAddress.header, .forwarded)
        XCTAssertThrowsError(try GatewayConfig.parse(yaml: base + "\nserver: { trusted_proxies: [\"10.0.0.0/99\"], client_ip_header: x-real-ip }")) { error in
            let issues = (error as? ConfigError)?.issues.map(\.description) ?? []
            XCTAssertTrue(issues.contains { $0.contains("server.trusted_proxies[0]") && $0.contains("CIDR") }, "\(issues)")
            XCTAssertTrue(issues.contains { $0.contains("server.client_ip_header") && $0.contains("x-forwarded-for") }, "\(issues)")
        }
        XCTAssertThrowsError(try GatewayConfig.parse(yaml: base + "\nserver: { trustedproxies: [\"10.0.0.1\"] }")) { error in
            XCTAssertTrue("\(error)".contains("did you mean \"trusted_proxies\""), "\(error)")
        }
    }

    func testTraceParentFollowsW3CTraceContext() {
        XCTAssertTrue(TraceParent.isValid("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
        XCTAssertTrue(TraceParent.isValid("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"), "future versions may add fields")
        for invalid in ["00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
                        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // zero trace id
                        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // zero parent id
                        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // forbidden version
                        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // v00 is exactly 55
                        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  // short
                        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", ""] {
            XCTAssertFalse(TraceParent.isValid(invalid), invalid)
        }
    }

    /// Requests whose shapes differ in one part each (route, decision, reason, status class, attest method) are
    /// counted in their own series, however often the shapes alternate (recent shapes are found by comparing
    /// their parts in place).
    func testEachRequestShapeCountsInItsOwnSeries() {
        let log = EventLog(descriptor: open("/dev/null", O_WRONLY))
        let metrics = Metrics()
        typealias Shape = (route: String, decision: String, reason: String?, status: Int, attestMethod: String?)
        let shapes: [Shape] = [("/a/", "pass", nil, 200, nil), ("/b/", "pass", nil, 200, nil), ("/a/", "verified", nil, 200, nil),
                               ("/a/", "pass", "x", 200, nil), ("/a/", "pass", nil, 404, nil), ("/a/", "pass", nil, 200, "token"),
                               ("/a/", "pass", nil, 200, "assertion")]
        for round in 1...3 {
            for (index, shape) in shapes.enumerated() where index < shapes.count - 1 || round == 3 {
                let record = RequestRecord(requestId: "r", method: "GET", path: "/", bytesIn: 0)
                (record.route, record.decision, record.reason, record.status, record.attestMethod) = shape
                record.finish(log: log, metrics: metrics)
            }
        }
        for (index, shape) in shapes.enumerated() {
            let labels: KeyValuePairs = ["route": shape.route, "decision": shape.decision, "reason": shape.reason ?? "",
                                         "code": KnownSeries.code(shape.status)]
            let requests = metrics.counter("gateway_requests_total", labels)
            // The first and the two with an attest method share this series (3 + 3 + 1); every other is its own.
            XCTAssertEqual(requests, [0, 5, 6].contains(index) ? 7 : 3, "\(shape)")
            if let method = shape.attestMethod {
                XCTAssertEqual(metrics.counter("gateway_attest_requests_total", ["route": shape.route, "attest_method": method,
                                                                                  "decision": shape.decision, "reason": ""]),
                               index == shapes.count - 1 ? 1 : 3, method)
            }
        }
    }

    /// The log takes the first User-Agent (any spelling of the name) and a traceparent only when it is valid and
    /// the only one.
    func testAccessLogFieldsComeFromTheRequestsHeaders() {
        let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        func captured(_ headers: [HTTPField]) -> RequestRecord {
            let record = RequestRecord(requestId: "r", method: "GET", path: "/", bytesIn: 0)
            record.capture(RequestHead(method: "GET", path: "/", query: nil, headers: headers, clientAddress: "192.0.2.1",
                                       httpVersion: "HTTP/1.1", framing: .noBody), clientAddress: policy([]))
            return record
        }
        let record = captured([HTTPField("Host", "a"), HTTPField("user-AGENT", "first"), HTTPField("User-Agent", "second"),
                               HTTPField("TraceParent", trace)])
        XCTAssertEqual(record.userAgent, "first")
        XCTAssertEqual(record.traceparent, trace)
        XCTAssertEqual(record.clientIP, "192.0.2.1")
        XCTAssertEqual(record.httpProtocol, "HTTP/1.1")
        XCTAssertNil(captured([HTTPField("traceparent", trace), HTTPField("traceparent", trace)]).traceparent, "two: neither is logged")
        XCTAssertNil(captured([HTTPField("traceparent", "00-bad")]).traceparent)
        XCTAssertNil(captured([HTTPField("traceparents", trace), HTTPField("User-Agent2", "x")]).traceparent)
        XCTAssertNil(captured([HTTPField("User-Agent2", "x")]).userAgent)
        XCTAssertEqual(captured([HTTPField("User-Agent", String(repeating: "u", count: 300))]).userAgent?.utf8.count,
                       RequestRecord.maxUserAgentBytes)
    }

    func testUserAgentIsCutAtACharacterBoundary() {
        XCTAssertEqual(RequestRecord.truncated("curl/8.0"), "curl/8.0")
        let long = String(repeating: "a", count: 255) + "é" + "tail"
        let cut = RequestRecord.truncated(long)
        XCTAssertEqual(cut, String(repeating: "a", count: 255), "é straddles byte 256: it goes whole")
        XCTAssertEqual(RequestRecord.truncated(String(repeating: "b", count: 1000)).utf8.count, RequestRecord.maxUserAgentBytes)
    }

    /// One request's whole log line, byte for byte, with every field present and awkward values (quotes,
    /// backslashes, control bytes, non-ASCII in the path, user agent and detail; a detail cut at 512
    /// characters; durations that round, print as whole or in exponent form), and its metric series.
    func testARequestsLogLineAndSeriesAreExactlyAsBefore() throws {
        var descriptors: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&descriptors), 0)
        defer { close(descriptors[0]) }
        let log = EventLog(descriptor: descriptors[1])
        let metrics = Metrics()
        let record = RequestRecord(requestId: "id-\"1\"", method: "PÖST", path: "/v1/\"q\"\\é\u{01}\u{7F}/😀\ttab", bytesIn: 12_345)
        record.route = "/v1/"
        record.decision = "verified"
        record.reason = "store_unavailable"
        record.detail = String(repeating: "é\u{01}", count: 300)
        record.status = 503
        record.attestMethod = "assertion"
        record.clientIP = "2001:db8::1"
        record.httpProtocol = "HTTP/1.1"
        record.tlsVersion = "TLSv1.3"
        record.alpn = "http/1.1"
        record.forwardedFor = "198.51.100.1, 10.0.0.1"
        record.userAgent = "Mozilla/5.0 \"quoted\" \\ ctl\u{1F}\r\n ünïcode 日本 🚀"
        record.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        record.keyId = "a+b/c="
        record.counter = UInt32.max
        record.riskMetric = -7
        record.debugToken = "ci"
        record.upstreamStatus = 0
        record.upstreamAddr = "[::1]:8080"
        record.bytesOut = Int.max
        record.outcome = .upstreamAborted
        record.verifyMs = 0.0005
        record.storeMs = 12
        record.upstreamMs = 1e16
        record.finish(log: log, metrics: metrics)
        record.finish(log: log, metrics: metrics)  // once only
        close(descriptors[1])
        let text = String(decoding: FileHandle(fileDescriptor: descriptors[0]).readDataToEndOfFile(), as: UTF8.self)
        let time = try XCTUnwrap(text.firstMatch(of: /^\{"time":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)",/)?.output.1)
        let total = try XCTUnwrap(text.firstMatch(of: /,"total_ms":(\d+\.\d{1,3}),/)?.output.1)
        let detail = String(repeating: #"é\u0001"#, count: 256)
        let expected = #"{"time":""# + time + #"","level":"error","event":"request","request_id":"id-\"1\"","route":"/v1/","method":"PÖST","#
            + #""path":"/v1/\"q\"\\é\u0001"# + "\u{7F}/😀" + #"\u0009tab","decision":"verified","reason":"store_unavailable","#
            + #""detail":""# + detail + #"","status":503,"attest_method":"assertion","client_ip":"2001:db8::1","protocol":"HTTP/1.1","#
            + #""tls_version":"TLSv1.3","alpn":"http/1.1","forwarded_for":"198.51.100.1, 10.0.0.1","#
            + #""user_agent":"Mozilla/5.0 \"quoted\" \\ ctl\u001f\u000d\n ünïcode 日本 🚀","#
            + #""traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","key_id":"a+b/c=","counter":4294967295,"#
            + #""risk_metric":-7,"debug_token":"ci","upstream_status":0,"upstream_addr":"[::1]:8080","bytes_in":12345,"#
            + #""bytes_out":9223372036854775807,"outcome":"upstream_aborted","total_ms":"# + total
            + #","verify_ms":0.001,"store_ms":12.0,"upstream_ms":1e+16}"# + "\n"
        XCTAssertEqual(text, expected)

        let exposition = metrics.exposition()
        for line in [#"gateway_requests_total{route="/v1/",decision="verified",reason="store_unavailable",code="5xx"} 1"#,
                     #"gateway_attest_requests_total{route="/v1/",attest_method="assertion",decision="verified",reason="store_unavailable"} 1"#,
                     #"gateway_store_errors_total{reason="store_unavailable"} 1"#,
                     #"gateway_request_duration_seconds_count{route="/v1/",code="5xx"} 1"#,
                     #"gateway_upstream_duration_seconds_bucket{route="/v1/",le="+Inf"} 1"#,
                     #"gateway_upstream_duration_seconds_sum{route="/v1/"} 10000000000000.0"#,
                     #"gateway_verify_duration_seconds_bucket{le="0.0005"} 1"#,
                     #"gateway_store_duration_seconds_bucket{le="0.01"} 0"#, #"gateway_store_duration_seconds_bucket{le="0.025"} 1"#,
                     #"gateway_store_duration_seconds_sum 0.012"#] {
            XCTAssertTrue(exposition.contains(line + "\n"), "\(line)\n\(exposition)")
        }
    }

    /// The catalogue must hold every case of GatewayError, or a new reason gets no zero series.
    func testReasonCatalogueHoldsEveryGatewayErrorCase() throws {
        let source = try String(contentsOfFile: TestPaths.repository + "/Sources/Gateway/Proxy/GatewayError.swift", encoding: .utf8)
        let body = source.components(separatedBy: "public enum GatewayError")[1].components(separatedBy: "public var reasonCode")[0]
        let declared = Set(body.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("case ") else { return nil }
            return String(trimmed.dropFirst(5).prefix { $0.isLetter || $0.isNumber })
        })
        XCTAssertGreaterThan(declared.count, 20)
        let catalogued = Set(ReasonCatalog.catalogue.map { error -> String in
            Mirror(reflecting: error).children.first?.label ?? "\(error)"
        })
        XCTAssertEqual(declared.subtracting(catalogued), [], "add a sample of each new case to ReasonCatalog.catalogue")
        XCTAssertEqual(Set(VerificationError.Reason.allCases.map(\.rawValue)).subtracting(ReasonCatalog.catalogue.map(\.reasonCode)), [])
    }

    /// Every code the HTTP layer answers with is catalogued (so it has its zero series) and named in
    /// docs/operations.md: read from the HTTPServer sources, so a new refusal cannot be missed.
    func testEveryHTTPLayerCodeIsCataloguedAndDocumented() throws {
        let directory = TestPaths.repository + "/Sources/HTTPServer/"
        let pattern = try NSRegularExpression(pattern: #"(?:bad\(|reason: (?:framing \? )?)"([a-z_]+)""#)
        var written = Set<String>()
        for file in try FileManager.default.contentsOfDirectory(atPath: directory) where file.hasSuffix(".swift") {
            let source = try String(contentsOfFile: directory + file, encoding: .utf8)
            for match in pattern.matches(in: source, range: NSRange(source.startIndex..., in: source)) {
                written.insert(String(source[Range(match.range(at: 1), in: source)!]))
            }
        }
        XCTAssertTrue(written.isSuperset(of: ["obs_fold", "bad_host", "connection_limit", "header_timeout"]), "the pattern finds them: \(written)")
        // Answers to a request the handler took (no refusal series): the body budget, and the connection's
        // own answers when an exchange ended without a response.
        let handled = Set(ReasonCatalog.catalogue.map(\.reasonCode)).union(["upstream_aborted", "no_response"])
        let catalogued = Set(ReasonCatalog.httpLayer.map(\.reason))
        XCTAssertEqual(written.subtracting(catalogued).subtracting(handled), [], "add them to ReasonCatalog.httpLayer")
        let operations = try String(contentsOfFile: TestPaths.repository + "/docs/operations.md", encoding: .utf8)
        for code in catalogued.union(written) where operations.range(of: "`([0-9]{3} )?\(code)`", options: .regularExpression) == nil {
            XCTFail("docs/operations.md does not name `\(code)`")
        }
    }

    func testZeroSeriesFollowWhatEachRouteCanDo() throws {
        let config = try GatewayConfig.parse(yaml: """
        app_attest: { apps: ["TEAMID1234.com.example.app"] }
        upstreams: { api: { url: "http://127.0.0.1:9000" } }
        routes:
          - { path_prefix: "/enforce/", methods: [POST], upstream: api, policy: assert, rate_limit: { requests: 5, per_seconds: 60 } }
          - { path_prefix: "/report/", upstream: api, policy: assert, mode: report, client_data: body }
          - { path_prefix: "/closed/", policy: deny }
          - { path_prefix: "/", upstream: api, policy: pass }
        """)
        let series = Set(KnownSeries(config: config).requests)
        func has(_ route: String, _ decision: String, _ reason: String, _ code: String) -> Bool {
            series.contains(KnownSeries.Request(route: route, decision: decision, reason: reason, code: code))
        }
        XCTAssertTrue(has("/enforce/", "denied", "signature_invalid", "4xx"))
        XCTAssertTrue(has("/enforce/", "denied", "rate_limited", "4xx"))
        XCTAssertTrue(has("/enforce/", "denied", "method_not_allowed", "4xx"))
        XCTAssertTrue(has("/enforce/", "denied", "store_unavailable", "5xx"))
        XCTAssertTrue(has("/enforce/", "denied", "body_hash_mismatch", "4xx"))
        XCTAssertTrue(has("/enforce/", "upstream_error", "upstream_timeout", "5xx"))
        for code in KnownSeries.forwardedCodes { XCTAssertTrue(has("/enforce/", "verified", "", code)) }
        XCTAssertFalse(has("/enforce/", "devicecheck", "", "2xx"), "no fallback on this route")
        XCTAssertFalse(has("/enforce/", "denied", "device_flagged", "4xx"))
        XCTAssertTrue(has("/report/", "report_failed", "signature_invalid", "5xx"), "report mode forwards: the upstream's status")
        XCTAssertFalse(has("/report/", "report_failed", "body_hash_mismatch", "2xx"), "body client data has no request binding")
        XCTAssertFalse(has("/report/", "report_failed", "rate_limited", "2xx"))
        XCTAssertFalse(has("/report/", "denied", "method_not_allowed", "4xx"), "no methods listed")
        XCTAssertTrue(has("/report/", "denied", "body_too_large", "4xx"))
        XCTAssertTrue(has("/closed/", "denied", "route_denied", "4xx"))
        XCTAssertFalse(series.contains { $0.route == "/closed/" && $0.decision == "upstream_error" })
        XCTAssertTrue(has("/", "pass", "", "5xx"))
        XCTAssertFalse(series.contains { $0.route == "/" && $0.decision == "denied" && $0.reason == "signature_invalid" })
        XCTAssertTrue(has("-", "denied", "route_not_found", "4xx"))
        XCTAssertTrue(has("-", "rejected", "unsupported_transfer_encoding", "5xx"))
        XCTAssertTrue(has("builtin:/attest/verify", "denied", "chain_invalid", "4xx"))
        XCTAssertFalse(series.contains { $0.route == "builtin:/verify-device" }, "no apple: section")

        let metrics = Metrics()
        metrics.apply(KnownSeries(config: config).updates)
        let text = metrics.exposition()
        XCTAssertTrue(text.contains("gateway_requests_total{route=\"/enforce/\",decision=\"denied\",reason=\"rate_limited\",code=\"4xx\"} 0\n"))
        XCTAssertTrue(text.contains("gateway_request_duration_seconds_count{route=\"/report/\",code=\"2xx\"} 0\n"))
        XCTAssertTrue(text.contains("gateway_upstream_errors_total{upstream=\"api\",reason=\"upstream_timeout\"} 0\n"))
        XCTAssertFalse(text.contains("gateway_apple_calls_total"))
        // Seeding again (a reload) keeps counts: zero series only add what is missing.
        metrics.increment("gateway_requests_total", ["route": "/", "decision": "pass", "reason": "", "code": "2xx"], help: MetricHelp.requests)
        metrics.apply(KnownSeries(config: config).updates)
        XCTAssertTrue(metrics.exposition().contains("gateway_requests_total{route=\"/\",decision=\"pass\",reason=\"\",code=\"2xx\"} 1\n"))
    }

    func testHistogramsWithTheirOwnBuckets() {
        let metrics = Metrics()
        metrics.apply([.observe("gateway_receipt_risk_metric", [:], value: 4, buckets: MetricHelp.riskMetricBuckets, help: MetricHelp.riskMetric)])
        let text = metrics.exposition()
        XCTAssertTrue(text.contains("gateway_receipt_risk_metric_bucket{le=\"3.0\"} 0\n"), text)
        XCTAssertTrue(text.contains("gateway_receipt_risk_metric_bucket{le=\"5.0\"} 1\n"), text)
        XCTAssertTrue(text.contains("gateway_receipt_risk_metric_sum 4.0\n"), text)
    }

    /// A named series keeps its slot in the metrics that used it last: used by two (a reload's runtime, tests),
    /// each still counts its own; threads (shards) add up at a scrape; a series whose key came first with other
    /// buckets goes into the first's; a NaN observation is counted but falls in no bucket.
    func testNamedSeriesCountInEachMetricsAndAcrossThreads() {
        let series = Metrics.Series("gateway_requests_total", ["route": "/"], help: MetricHelp.requests)
        let latency = Metrics.Series("gateway_request_duration_seconds", ["route": "/"], help: MetricHelp.requestDuration)
        let (first, second) = (Metrics(), Metrics())
        DispatchQueue.concurrentPerform(iterations: 8) { index in
            for _ in 0..<100 {
                first.record { $0.count(series) }
                second.record { batch in
                    batch.count(series, by: 2)
                    batch.observe(latency, index == 0 ? .nan : 0.003)
                }
            }
        }
        XCTAssertEqual(first.counter("gateway_requests_total", ["route": "/"]), 800)
        XCTAssertEqual(second.counter("gateway_requests_total", ["route": "/"]), 1600)
        let text = second.exposition()
        XCTAssertTrue(text.contains("gateway_request_duration_seconds_bucket{route=\"/\",le=\"0.005\"} 700\n"), text)
        XCTAssertTrue(text.contains("gateway_request_duration_seconds_bucket{route=\"/\",le=\"+Inf\"} 800\n"), text)
        XCTAssertTrue(text.contains("gateway_request_duration_seconds_count{route=\"/\"} 800\n"), text)
        XCTAssertFalse(first.exposition().contains("gateway_request_duration_seconds"))

        let risk = Metrics.Series("gateway_receipt_risk_metric", [:], buckets: [1, 10])
        second.apply([.observe("gateway_receipt_risk_metric", [:], value: 4, buckets: [5])])
        second.record { $0.observe(risk, 4) }
        let risks = second.exposition()
        XCTAssertTrue(risks.contains("gateway_receipt_risk_metric_bucket{le=\"5.0\"} 2\n"), risks)
        XCTAssertFalse(risks.contains("gateway_receipt_risk_metric_bucket{le=\"10.0\"}"), risks)
    }

    func testProcessMetricsComeFromProc() throws {
        let stat = try XCTUnwrap(ProcessMetrics.readStat())
        XCTAssertGreaterThan(stat.rss, 0)
        let start = try XCTUnwrap(ProcessMetrics.bootTime()) + Double(stat.starttime) / Double(sysconf(Int32(_SC_CLK_TCK)))
        XCTAssertLessThanOrEqual(start, Date().timeIntervalSince1970 + 1)
        XCTAssertGreaterThan(start, Date().timeIntervalSince1970 - 3600, "this test process started within the hour")
        let before = try XCTUnwrap(ProcessMetrics.openDescriptors())
        let descriptor = open("/dev/null", O_RDONLY)
        defer { close(descriptor) }
        XCTAssertEqual(ProcessMetrics.openDescriptors(), before + 1)
        XCTAssertTrue(BuildInfo.exposition.contains("gateway_build_info{version=\"\(BuildInfo.version)\",commit=\"unknown\",swift=\""),
                      "test builds carry no commit: \(BuildInfo.exposition)")
    }
}
