import AssertionCheck
import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// What an operator sees of a real gateway (with an `apple:` section against the fake Apple server, and
/// the test's loopback as a trusted proxy): /metrics from the first scrape, the access log against the
/// schema documented in docs/operations.md, and the dashboard's and alerts' metric names against /metrics.
final class MonitoringEndToEndTests: XCTestCase {
    static let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    private func environment() throws -> (GatewayEnvironment, FakeAppleServer) {
        // Every optional section, so every metric family is exported: tokens and Play Integrity too.
        let tokens = try TokenKeys()
        let play = try PlayIntegrityTokenMaker().writeKeys(to: tokens.directory)
        let serviceAccount = try GoogleTestAccount.shared.writeFile(tokenURI: "http://127.0.0.1:\(TestPaths.freePort())/token")
        return try GatewayEnvironment.withFakeApple(appleExtra: """

        server: { trusted_proxies: ["127.0.0.1", "10.0.0.0/8"] }
        play_integrity: { package_names: [com.example.android], decryption_key_file: "\(play.decryption)", verification_key_file: "\(play.verification)",
                          service_account_file: "\(serviceAccount)" }
        """,
                                                    appAttestExtra: "  debug_tokens: [{ name: ci, sha256: \"\(String(repeating: "ab", count: 32))\" }]\n" + tokens.section())
    }

    func testAFreshGatewayExportsZeroSeriesBuildInfoAndProcessMetrics() throws {
        let (env, apple) = try environment()
        defer { env.stop(); apple.stop() }
        let text = try env.admin("/metrics").text
        let requests = text.split(separator: "\n").filter { $0.hasPrefix("gateway_requests_total{") }
        XCTAssertGreaterThan(requests.count, 200, "every route × decision × reason × status class the config allows")
        XCTAssertTrue(requests.allSatisfy { $0.hasSuffix(" 0") }, "nothing was sent yet")
        for series in [
            #"gateway_requests_total{route="/secure/",decision="denied",reason="signature_invalid",code="4xx"} 0"#,
            #"gateway_requests_total{route="/secure/",decision="verified",reason="",code="5xx"} 0"#,
            #"gateway_requests_total{route="/report/",decision="report_failed",reason="body_hash_mismatch",code="2xx"} 0"#,
            #"gateway_requests_total{route="/limited/",decision="denied",reason="rate_limited",code="4xx"} 0"#,
            #"gateway_requests_total{route="/v1/ai/",decision="denied",reason="method_not_allowed",code="4xx"} 0"#,
            #"gateway_requests_total{route="/closed/",decision="denied",reason="route_denied",code="4xx"} 0"#,
            #"gateway_requests_total{route="/",decision="upstream_error",reason="upstream_timeout",code="5xx"} 0"#,
            #"gateway_requests_total{route="-",decision="denied",reason="route_not_found",code="4xx"} 0"#,
            #"gateway_requests_total{route="-",decision="rejected",reason="ambiguous_framing",code="4xx"} 0"#,
            #"gateway_requests_total{route="builtin:/attest/verify",decision="denied",reason="chain_invalid",code="4xx"} 0"#,
            #"gateway_requests_total{route="builtin:/verify-device",decision="denied",reason="apple_unavailable",code="5xx"} 0"#,
            #"gateway_request_duration_seconds_count{route="/secure/",code="4xx"} 0"#,
            #"gateway_upstream_duration_seconds_count{route="/v1/ai/"} 0"#,
            #"gateway_upstream_errors_total{upstream="dead",reason="upstream_unavailable"} 0"#,
            #"gateway_store_errors_total{reason="store_unavailable"} 0"#,
            #"gateway_apple_calls_total{endpoint="/v1/query_two_bits",outcome="apple_timeout"} 0"#,
            #"gateway_receipt_refreshes_total{outcome="receipt_signature_invalid"} 0"#,
            #"gateway_receipt_risk_metric_count 0"#, "gateway_store_up 1", "gateway_receipt_refresh_backlog 0",
        ] {
            XCTAssertTrue(text.contains(series + "\n"), "missing: \(series)")
        }
        XCTAssertFalse(text.contains(#"route="/secure/",decision="denied",reason="rate_limited""#), "/secure/ has no rate_limit")
        XCTAssertFalse(text.contains(#"route="/",decision="denied",reason="signature_invalid""#), "a pass route runs no assertion check")

        let buildInfo = try XCTUnwrap(text.split(separator: "\n").first { $0.hasPrefix("gateway_build_info{") })
        XCTAssertNotNil(buildInfo.range(of: #"^gateway_build_info\{version="[0-9.]+",commit="(unknown|[0-9a-f]{7,40}(-dirty)?)",swift="6\.[0-9+]+"\} 1$"#,
                                        options: .regularExpression), String(buildInfo))
        let values = Self.samples(text)
        XCTAssertGreaterThan(values["process_resident_memory_bytes"] ?? 0, 4_000_000)
        XCTAssertGreaterThan(values["process_cpu_seconds_total"] ?? 0, 0)
        XCTAssertGreaterThan(values["process_open_fds"] ?? 0, 5)
        XCTAssertGreaterThan(values["process_max_fds"] ?? 0, values["process_open_fds"] ?? .infinity)
        let started = try XCTUnwrap(values["process_start_time_seconds"])
        XCTAssertEqual(started, Date().timeIntervalSince1970, accuracy: 60, "the gateway started moments ago")
    }

    /// Real request lines of every kind, parsed and checked against the table in docs/operations.md.
    func testAccessLogLinesFollowTheDocumentedSchema() throws {
        let (env, apple) = try environment()
        defer { env.stop(); apple.stop() }
        let schema = try LogSchema.read()

        let traced = try env.request("GET", "/public/traced", headers: [
            HTTPField("X-Forwarded-For", "198.51.100.23, 10.1.1.1"), HTTPField("User-Agent", "MyApp/2.1 CFNetwork/1494"),
            HTTPField("traceparent", Self.traceparent), HTTPField("tracestate", "vendor=1"), HTTPField("X-Request-Id", "trace-1"),
        ])
        XCTAssertEqual(traced.forwarded("traceparent"), [Self.traceparent], "forwarded unchanged")
        XCTAssertEqual(traced.forwarded("tracestate"), ["vendor=1"])
        let malformed = "00-NOT-A-TRACE"
        XCTAssertEqual(try env.request("GET", "/public/odd", headers: [HTTPField("traceparent", malformed), HTTPField("X-Request-Id", "trace-2"),
                                                                        HTTPField("User-Agent", String(repeating: "u", count: 1000))])
            .forwarded("traceparent"), [malformed], "an invalid traceparent is still the upstream's business")
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        XCTAssertEqual(try app.send(app.signed("POST", "/secure/x", body: [1, 2])).status, 200)
        XCTAssertEqual(try env.request("POST", "/secure/x", body: [1]).status, 401)
        XCTAssertEqual(try env.request("GET", "/report/x").status, 200)
        let down = try env.request("GET", "/down/x", headers: [HTTPField("X-Request-Id", "down-1")])
        XCTAssertEqual(down.status, 502)
        let downBody = down.text
        XCTAssertEqual(try env.request("GET", "/closed/x").status, 403)
        let raw = try RawHTTPClient(port: env.gateway.port)
        try raw.send("POST /public/x HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")
        XCTAssertEqual(try raw.readResponse(method: "POST").status, 400)
        XCTAssertNotNil(env.gateway.waitForEvent { $0["decision"] as? String == "rejected" })
        XCTAssertNotNil(env.gateway.waitForEvent { $0["request_id"] as? String == "down-1" })

        let lines = env.gateway.process.lines
        let objects = try lines.map { line -> [String: Any] in
            try XCTUnwrap((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any], "not JSON: \(line)")
        }
        for object in objects {
            XCTAssertTrue(["debug", "info", "warn", "error"].contains(object["level"] as? String ?? ""), "no level: \(object)")
            XCTAssertNotNil(object["time"] as? String, "\(object)")
            XCTAssertNotNil(object["event"] as? String, "\(object)")
        }
        let requests = objects.filter { $0["event"] as? String == "request" }
        XCTAssertGreaterThanOrEqual(requests.count, 10)
        var seen = Set<String>()
        for line in requests {
            for (field, value) in line {
                seen.insert(field)
                guard let type = schema.types[field] else {
                    XCTFail("field \(field) is not in the documented schema: \(line)")
                    continue
                }
                XCTAssertTrue(LogSchema.matches(value, type), "\(field) should be a \(type): \(line)")
            }
            for field in schema.always { XCTAssertNotNil(line[field], "\(field) is documented as always present: \(line)") }
            let status = line["status"] as? Int ?? 0
            XCTAssertEqual(line["level"] as? String, status >= 500 ? "error" : "info", "\(line)")
        }
        // Every documented field shows up (the risk metric needs a refreshed receipt, not made here; debug
        // tokens have their line checked in AttestClientTests, the TLS fields in ListenerTLSTests).
        XCTAssertEqual(Set(schema.types.keys).subtracting(seen), ["risk_metric", "debug_token", "tls_version", "alpn"])

        let tracedLine = try XCTUnwrap(requests.first { $0["request_id"] as? String == "trace-1" })
        XCTAssertEqual(tracedLine["client_ip"] as? String, "198.51.100.23", "10.1.1.1 and the peer are trusted proxies")
        XCTAssertEqual(tracedLine["forwarded_for"] as? String, "198.51.100.23, 10.1.1.1, 127.0.0.1")
        XCTAssertEqual(tracedLine["user_agent"] as? String, "MyApp/2.1 CFNetwork/1494")
        XCTAssertEqual(tracedLine["traceparent"] as? String, Self.traceparent)
        XCTAssertEqual(tracedLine["upstream_addr"] as? String, "127.0.0.1:\(env.upstream.port)")
        let oddLine = try XCTUnwrap(requests.first { $0["request_id"] as? String == "trace-2" })
        XCTAssertNil(oddLine["traceparent"])
        XCTAssertEqual(oddLine["client_ip"] as? String, "127.0.0.1", "no forwarded header: the trusted peer itself")
        XCTAssertEqual((oddLine["user_agent"] as? String)?.utf8.count, 256)
        let rejected = try XCTUnwrap(requests.first { $0["decision"] as? String == "rejected" })
        XCTAssertEqual(rejected["route"] as? String, "-")
        XCTAssertEqual(rejected["client_ip"] as? String, "127.0.0.1")
        let downLine = try XCTUnwrap(requests.first { $0["request_id"] as? String == "down-1" })
        XCTAssertEqual(downLine["level"] as? String, "error")
        // What failed, with the address, is the operator's; the client only learns that the upstream did.
        let detail = try XCTUnwrap(downLine["detail"] as? String, "\(downLine)")
        XCTAssertTrue(detail.contains("127.0.0.1"), detail)
        XCTAssertFalse(downBody.contains("127.0.0.1"), downBody)
        XCTAssertTrue(downBody.contains("the upstream is unavailable"), downBody)

        let expected = [#"gateway_requests_total{route="/down/",decision="upstream_error",reason="upstream_unavailable",code="5xx"} 1"#,
                        #"gateway_requests_total{route="/secure/",decision="verified",reason="",code="2xx"} 1"#,
                        #"gateway_requests_total{route="-",decision="rejected",reason="ambiguous_framing",code="4xx"} 1"#]
        let metrics = try env.metrics(showing: expected)
        for line in expected { XCTAssertTrue(metrics.contains(line), "\(line)\n\(metrics)") }
    }

    /// deploy/grafana/dashboard.json and deploy/prometheus/alerts.yml name only metrics a gateway exports.
    func testDashboardAndAlertsUseOnlyMetricsTheGatewayExports() throws {
        let (env, apple) = try environment()
        defer { env.stop(); apple.stop() }
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        XCTAssertEqual(try app.send(app.signed("GET", "/secure/x")).status, 200)
        XCTAssertEqual(try env.request("GET", "/down/x").status, 502)
        let exported = Set(Self.samples(try env.admin("/metrics").text).keys)

        let dashboard = try String(contentsOfFile: TestPaths.repository + "/deploy/grafana/dashboard.json", encoding: .utf8)
        let alerts = try String(contentsOfFile: TestPaths.repository + "/deploy/prometheus/alerts.yml", encoding: .utf8)
        let alertExpressions = alerts.components(separatedBy: "expr:").dropFirst().map { $0.components(separatedBy: "for:")[0] }
            .map { $0.components(separatedBy: "labels:")[0] }
        for (origin, text) in [("deploy/grafana/dashboard.json", dashboard), ("deploy/prometheus/alerts.yml", alertExpressions.joined())] {
            let names = Self.metricNames(in: text)
            XCTAssertGreaterThan(names.count, 8, origin)
            for name in names.sorted() {
                XCTAssertTrue(exported.contains(name), "\(origin) uses \(name), which /metrics does not export")
            }
        }
    }

    /// docs/operations.md's metrics table: every metric and its labels, no more, no less.
    func testTheMetricsTableMatchesTheExposition() throws {
        let (env, apple) = try environment()
        defer { env.stop(); apple.stop() }
        let text = try env.admin("/metrics").text
        var exported: [String: Set<String>] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("# TYPE ") {
            exported[String(line.split(separator: " ")[2])] = []
        }
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let name = String(line.prefix { $0 != "{" && $0 != " " })
            let family = exported.keys.first { name == $0 || name == $0 + "_bucket" || name == $0 + "_sum" || name == $0 + "_count" }
            guard let family, let open = line.firstIndex(of: "{") else { continue }
            let labels = line[line.index(after: open)...].split(separator: ",").compactMap { $0.split(separator: "=").first.map(String.init) }
            exported[family]?.formUnion(labels.filter { $0 != "le" && !$0.hasPrefix("\"") })
        }
        // The listener's TLS and HTTP/2 series exist only with server.tls (ListenerTLSTests and ListenerHTTP2Tests read them).
        let listenerOnly: Set = ["gateway_tls_handshake_failures_total", "gateway_http2_protections_total"]
        let documented = try MetricsTable.read()
        XCTAssertEqual(Set(documented.keys).subtracting(listenerOnly), Set(exported.keys), "metrics table vs /metrics")
        for (name, labels) in documented where exported[name] != nil {
            XCTAssertEqual(labels, exported[name], "labels of \(name)")
        }
    }

    // MARK: - Reading the exposition

    /// Sample name → value of the last sample with that name (labels ignored).
    static func samples(_ text: String) -> [String: Double] {
        var values: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") && !line.isEmpty {
            let name = String(line.prefix { $0 != "{" && $0 != " " })
            values[name] = Double(line.split(separator: " ").last ?? "")
        }
        return values
    }

    /// gateway_* and process_* identifiers in PromQL text.
    static func metricNames(in text: String) -> Set<String> {
        let pattern = try! NSRegularExpression(pattern: #"\b(gateway|process)_[a-z0-9_]+"#)
        let range = NSRange(text.startIndex..., in: text)
        return Set(pattern.matches(in: text, range: range).compactMap { Range($0.range, in: text).map { String(text[$0]) } })
    }
}

/// The request-line table of docs/operations.md: field → type, and the fields present on every line.
struct LogSchema {
    let types: [String: String]
    let always: Set<String>

    static func read() throws -> LogSchema {
        let document = try String(contentsOfFile: TestPaths.repository + "/docs/operations.md", encoding: .utf8)
        let section = try XCTUnwrap(document.components(separatedBy: "### Request lines").dropFirst().first?.components(separatedBy: "\n#").first)
        var types: [String: String] = [:]
        var always = Set<String>()
        for line in section.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            // A row without its type column is a stale copy of the table, which the parse would skip.
            guard cells.count >= 4 else {
                XCTFail("a request-line row without a type: \(line)")
                continue
            }
            let fields = cells[0].split(separator: "`", omittingEmptySubsequences: false).enumerated()
                .compactMap { $0.offset % 2 == 1 ? String($0.element) : nil }
            for field in fields {
                types[field] = cells[1]
                if cells[2] == "always" { always.insert(field) }
            }
        }
        XCTAssertGreaterThan(types.count, 20, "the table was found")
        return LogSchema(types: types, always: always)
    }

    static func matches(_ value: Any, _ type: String) -> Bool {
        switch type {
        case "string": return value is String
        case "integer": return value is NSNumber && "\(value)".allSatisfy { $0.isNumber || $0 == "-" }
        case "number": return value is NSNumber
        default: return false
        }
    }
}

/// The metrics table of docs/operations.md: name → label names.
enum MetricsTable {
    static func read() throws -> [String: Set<String>] {
        let document = try String(contentsOfFile: TestPaths.repository + "/docs/operations.md", encoding: .utf8)
        let section = try XCTUnwrap(document.components(separatedBy: "\n## Metrics\n").dropFirst().first?.components(separatedBy: "\n## ").first)
        var table: [String: Set<String>] = [:]
        for line in section.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            // A row without its type column is a stale copy of the table, which the parse would skip.
            guard cells.count >= 4 else {
                XCTFail("a request-line row without a type: \(line)")
                continue
            }
            let name = cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            // Label names are the backticked words outside parentheses (which hold example values).
            var depth = 0
            var outside = ""
            for character in cells[2] {
                if character == "(" { depth += 1 } else if character == ")" { depth -= 1 } else if depth == 0 { outside.append(character) }
            }
            table[name] = Set(outside.split(separator: "`", omittingEmptySubsequences: false).enumerated()
                .compactMap { $0.offset % 2 == 1 ? String($0.element) : nil }.filter { !$0.contains("\"") })
        }
        return table
    }
}
