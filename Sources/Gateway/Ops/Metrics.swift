import Foundation
import Synchronization

/// Prometheus text exposition of counters and histograms. Label sets are small and fixed by the
/// configuration (routes, reason codes), so series stay bounded.
public final class Metrics: Sendable {
    public static let latencyBuckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    private struct Series: Hashable {
        let name: String
        let labels: [String]   // "key=\"value\"" pairs, in order
    }

    private struct Histogram {
        var buckets: [UInt64]
        var count: UInt64 = 0
        var sum: Double = 0
    }

    private struct State {
        var counters: [Series: Double] = [:]
        var histograms: [Series: Histogram] = [:]
        var help: [String: (type: String, text: String)] = [:]
    }

    private let state = Mutex(State())

    public init() {}

    public func increment(_ name: String, _ labels: KeyValuePairs<String, String> = [:], by value: Double = 1, help: String = "") {
        let series = Series(name: name, labels: Metrics.render(labels))
        state.withLock { state in
            state.counters[series, default: 0] += value
            if state.help[name] == nil { state.help[name] = ("counter", help) }
        }
    }

    public func observe(_ name: String, _ labels: KeyValuePairs<String, String> = [:], seconds: Double, help: String = "") {
        let series = Series(name: name, labels: Metrics.render(labels))
        state.withLock { state in
            var histogram = state.histograms[series] ?? Histogram(buckets: Array(repeating: 0, count: Metrics.latencyBuckets.count))
            if let index = Metrics.latencyBuckets.firstIndex(where: { seconds <= $0 }) { histogram.buckets[index] += 1 }
            histogram.count += 1
            histogram.sum += seconds
            state.histograms[series] = histogram
            if state.help[name] == nil { state.help[name] = ("histogram", help) }
        }
    }

    /// The value of one counter series (tests and the demo read it).
    public func counter(_ name: String, _ labels: KeyValuePairs<String, String> = [:]) -> Double {
        let series = Series(name: name, labels: Metrics.render(labels))
        return state.withLock { $0.counters[series] ?? 0 }
    }

    public func exposition(extra gauges: [(name: String, help: String, value: Double)] = []) -> String {
        let snapshot = state.withLock { $0 }
        var output = ""
        var described = Set<String>()
        func describe(_ name: String) {
            guard described.insert(name).inserted, let help = snapshot.help[name] else { return }
            output += "# HELP \(name) \(help.text)\n# TYPE \(name) \(help.type)\n"
        }
        for (series, value) in snapshot.counters.sorted(by: { Metrics.order($0.key, $1.key) }) {
            describe(series.name)
            output += "\(series.name)\(Metrics.braces(series.labels)) \(Metrics.number(value))\n"
        }
        for (series, histogram) in snapshot.histograms.sorted(by: { Metrics.order($0.key, $1.key) }) {
            describe(series.name)
            var cumulative: UInt64 = 0
            for (index, bound) in Metrics.latencyBuckets.enumerated() {
                cumulative += histogram.buckets[index]
                output += "\(series.name)_bucket\(Metrics.braces(series.labels + ["le=\"\(bound)\""])) \(cumulative)\n"
            }
            output += "\(series.name)_bucket\(Metrics.braces(series.labels + ["le=\"+Inf\""])) \(histogram.count)\n"
            output += "\(series.name)_sum\(Metrics.braces(series.labels)) \(histogram.sum)\n"
            output += "\(series.name)_count\(Metrics.braces(series.labels)) \(histogram.count)\n"
        }
        for gauge in gauges {
            output += "# HELP \(gauge.name) \(gauge.help)\n# TYPE \(gauge.name) gauge\n\(gauge.name) \(Metrics.number(gauge.value))\n"
        }
        return output
    }

    private static func render(_ labels: KeyValuePairs<String, String>) -> [String] {
        labels.map { "\($0.key)=\"\(escape($0.value))\"" }
    }

    private static func escape(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }

    private static func braces(_ labels: [String]) -> String {
        labels.isEmpty ? "" : "{" + labels.joined(separator: ",") + "}"
    }

    private static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    private static func order(_ lhs: Series, _ rhs: Series) -> Bool {
        lhs.name != rhs.name ? lhs.name < rhs.name : lhs.labels.joined() < rhs.labels.joined()
    }
}
