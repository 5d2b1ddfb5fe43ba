import Foundation
import TestSupport
import XCTest

/// deploy/prometheus and deploy/grafana: the alert rules load and their unit tests pass in promtool, and
/// every dashboard query is valid PromQL. (That their metric names exist in a real gateway's /metrics is
/// checked end to end, in MonitoringEndToEndTests.)
final class MonitoringFilesTests: XCTestCase {
    static let prometheus = TestPaths.repository + "/deploy/prometheus"
    static let dashboard = TestPaths.repository + "/deploy/grafana/dashboard.json"

    /// promtool ships in Debian's `prometheus` package, which `make test` installs.
    private func promtool() throws -> String {
        for path in ["/usr/bin/promtool", "/usr/local/bin/promtool"] where FileManager.default.isExecutableFile(atPath: path) {
            return path
        }
        throw Prerequisite.missing("promtool not found: install Debian's prometheus package (make deps does) to check deploy/prometheus")
    }

    private func run(_ arguments: [String], in directory: String) throws -> (status: Int32?, output: String) {
        let process = try ChildProcess(executable: try promtool(), arguments: arguments, directory: directory)
        let status = process.waitForExit(timeout: 60)
        Thread.sleep(forTimeInterval: 0.1)  // the last output lines
        return (status, process.lines.joined(separator: "\n"))
    }

    func testAlertRulesLoad() throws {
        let result = try run(["check", "rules", "alerts.yml"], in: Self.prometheus)
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertTrue(result.output.contains("SUCCESS"), result.output)
    }

    func testAlertRuleUnitTestsPass() throws {
        let result = try run(["test", "rules", "alerts.test.yml"], in: Self.prometheus)
        XCTAssertEqual(result.status, 0, result.output)
        XCTAssertTrue(result.output.contains("SUCCESS"), result.output)
    }

    /// Every alert has a summary, a runbook and a link, and a unit test that makes it fire.
    func testEveryAlertHasARunbookAndAFiringTest() throws {
        let rules = try String(contentsOfFile: Self.prometheus + "/alerts.yml", encoding: .utf8)
        let tests = try String(contentsOfFile: Self.prometheus + "/alerts.test.yml", encoding: .utf8)
        let names = rules.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            return trimmed.hasPrefix("- alert: ") ? String(trimmed.dropFirst("- alert: ".count)) : nil
        }
        XCTAssertGreaterThanOrEqual(names.count, 10)
        let blocks = rules.components(separatedBy: "- alert: ").dropFirst()
        for (name, block) in zip(names, blocks) {
            for annotation in ["summary:", "runbook: |", "runbook_url:"] {
                XCTAssertTrue(block.contains(annotation), "\(name) lacks \(annotation)")
            }
            // A test case whose expected alerts are not empty.
            let firing = tests.components(separatedBy: "alertname: \(name)\n").dropFirst()
                .contains { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("exp_alerts: []") }
            XCTAssertTrue(firing, "alerts.test.yml never makes \(name) fire")
        }
    }

    /// Grafana's template variables replaced by values, each panel query is checked as a recording rule.
    func testEveryDashboardQueryIsValidPromQL() throws {
        let queries = try DashboardFile.queries()
        XCTAssertGreaterThan(queries.count, 20)
        let directory = TestPaths.temporaryDirectory("dashboard-promql")
        var rules = "groups:\n  - name: dashboard\n    rules:\n"
        for (index, query) in queries.enumerated() {
            let concrete = query.replacingOccurrences(of: "$__rate_interval", with: "1m").replacingOccurrences(of: "$__range", with: "1h")
                .replacingOccurrences(of: "$instance", with: ".*")
            let escaped = concrete.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            rules += "      - record: dashboard:query_\(index)\n        expr: \"\(escaped)\"\n"
        }
        try rules.write(toFile: directory + "/dashboard-rules.yml", atomically: true, encoding: .utf8)
        let result = try run(["check", "rules", "dashboard-rules.yml"], in: directory)
        XCTAssertEqual(result.status, 0, result.output)
    }

    func testDashboardCoversWhatTheIssueAsksFor() throws {
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: Self.dashboard))) as? [String: Any]
        let panels = try XCTUnwrap(object?["panels"] as? [[String: Any]])
        let ids = panels.compactMap { $0["id"] as? Int }
        XCTAssertEqual(ids.count, Set(ids).count, "panel ids are unique")
        let queries = try DashboardFile.queries().joined(separator: "\n")
        for metric in ["gateway_requests_total", "gateway_verify_duration_seconds_bucket", "gateway_store_duration_seconds_bucket",
                       "gateway_upstream_duration_seconds_bucket", "gateway_store_up", "gateway_apple_calls_total",
                       "gateway_receipt_risk_metric_bucket", "process_resident_memory_bytes"] {
            XCTAssertTrue(queries.contains(metric), "no panel shows \(metric)")
        }
        for panel in panels where panel["type"] as? String != "row" {
            let source = (panel["datasource"] as? [String: Any])?["uid"] as? String
            XCTAssertEqual(source, "${datasource}", "\(panel["title"] ?? "?") uses the dashboard's datasource variable")
        }
    }
}

/// The PromQL of every panel of deploy/grafana/dashboard.json.
enum DashboardFile {
    static func queries() throws -> [String] {
        let data = try Data(contentsOf: URL(fileURLWithPath: MonitoringFilesTests.dashboard))
        let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        let panels = (object?["panels"] as? [[String: Any]]) ?? []
        return panels.flatMap { panel in ((panel["targets"] as? [[String: Any]]) ?? []).compactMap { $0["expr"] as? String } }
    }
}
