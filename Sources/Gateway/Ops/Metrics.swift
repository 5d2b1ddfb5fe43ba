import RedisClient
import EventLoop
import AttestStore
import Foundation

/// Prometheus text exposition of counters and histograms. Label sets are small and fixed by the
/// configuration (routes, reason codes), so series stay bounded. Each series is keyed by its rendered
/// name and labels (one string hash per update), and a request's updates are applied under one lock —
/// one of several shards picked by thread, since one lock shared by every connection thread was the
/// gateway's most contended; a scrape adds the shards up.
public final class Metrics: Sendable {
    public static let latencyBuckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    /// One change to one series, prepared (labels rendered) before the lock is taken.
    public struct Update: Sendable {
        enum Kind: Sendable {
            case count(Double)
            case observe(Double)
            /// Creates the histogram series without an observation (exported at zero).
            case declare
        }

        let series: Series
        let kind: Kind

        var name: String { series.name }
        var labels: String { series.labels }
        /// name + labels: the series' key, built (and hashed) once.
        var key: SeriesKey { series.key }
        var help: String { series.help }
        /// Histogram bucket bounds (latency unless said otherwise); fixed by the first update of a series.
        var bounds: [Double] { series.bounds }

        public static func count(_ name: String, _ labels: KeyValuePairs<String, String>, by value: Double = 1, help: String = "") -> Update {
            Series(name, labels, help: help).count(by: value)
        }

        public static func observe(_ name: String, _ labels: KeyValuePairs<String, String>, seconds: Double, help: String = "") -> Update {
            Series(name, labels, help: help).observe(seconds: seconds)
        }

        /// An observation of something other than time, into `buckets`.
        public static func observe(_ name: String, _ labels: KeyValuePairs<String, String>, value: Double, buckets: [Double],
                                   help: String = "") -> Update {
            Update(series: Series(name, labels, help: help, buckets: buckets), kind: .observe(value))
        }

        /// A histogram series exported at zero until its first observation.
        public static func declareHistogram(_ name: String, _ labels: KeyValuePairs<String, String>,
                                            buckets: [Double] = Metrics.latencyBuckets, help: String = "") -> Update {
            Update(series: Series(name, labels, help: help, buckets: buckets), kind: .declare)
        }
    }

    /// One series named and labelled once, for a hot path that updates it again and again: its updates need
    /// no label rendering and no key building (those were a tenth of a relayed request's instructions). A
    /// class, so an update carries one reference rather than copies of four strings and an array.
    public final class Series: Sendable {
        let name: String
        let labels: String
        let key: SeriesKey
        let help: String
        let bounds: [Double]

        public init(_ name: String, _ labels: KeyValuePairs<String, String>, help: String = "", buckets: [Double] = Metrics.latencyBuckets) {
            self.name = name
            self.labels = Metrics.render(labels)
            key = SeriesKey(name + self.labels)
            self.help = help
            bounds = buckets
        }

        public func count(by value: Double = 1) -> Update {
            Update(series: self, kind: .count(value))
        }

        public func observe(seconds: Double) -> Update {
            Update(series: self, kind: .observe(seconds))
        }
    }

    private struct Counter {
        let name: String
        let labels: String
        var value: Double
    }

    private struct Histogram {
        let name: String
        let labels: String
        let bounds: [Double]
        var buckets: [UInt64]
        var count: UInt64 = 0
        var sum: Double = 0

        init(name: String, labels: String, bounds: [Double]) {
            self.name = name
            self.labels = labels
            self.bounds = bounds
            buckets = Array(repeating: 0, count: bounds.count)
        }

        mutating func record(_ seconds: Double, bucket: Int?) {
            if let bucket { buckets[bucket] += 1 }
            count += 1
            sum += seconds
        }
    }

    /// A series' name and rendered labels with its hash computed once: an update hashes one integer, not
    /// the whole text (three text hashes a relayed request were a thousand instructions).
    struct SeriesKey: Hashable, Sendable {
        let text: String
        private let hash: Int

        init(_ text: String) {
            self.text = text
            hash = text.hashValue
        }

        static func == (lhs: SeriesKey, rhs: SeriesKey) -> Bool { lhs.hash == rhs.hash && lhs.text == rhs.text }
        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
    }

    private struct State {
        var counters: [SeriesKey: Counter] = [:]
        var histograms: [SeriesKey: Histogram] = [:]
        var help: [String: (type: String, text: String)] = [:]
    }

    private static let shardCount = 16
    private final class Shard: Sendable {
        let state = Locked(State())
    }

    private let shards: [Shard] = (0..<Metrics.shardCount).map { _ in Shard() }

    /// The calling thread's shard (thread ids are page-aligned stack addresses: drop the low bits).
    private var shard: Shard {
        shards[Int((UInt(pthread_self()) >> 12) % UInt(Metrics.shardCount))]
    }

    public init() {}

    public func increment(_ name: String, _ labels: KeyValuePairs<String, String> = [:], by value: Double = 1, help: String = "") {
        apply([.count(name, labels, by: value, help: help)])
    }

    public func observe(_ name: String, _ labels: KeyValuePairs<String, String> = [:], seconds: Double, help: String = "") {
        apply([.observe(name, labels, seconds: seconds, help: help)])
    }

    public func apply(_ updates: [Update]) {
        shard.state.withLock { state in
            for update in updates {
                // An existing series is updated in place, found with one hash of its key; its name's help was
                // recorded when the shard's first series of that name was made.
                switch update.kind {
                case .count(let value):
                    if let index = state.counters.index(forKey: update.key) {
                        state.counters.values[index].value += value
                    } else {
                        state.counters[update.key] = Counter(name: update.name, labels: update.labels, value: value)
                        if state.help[update.name] == nil { state.help[update.name] = ("counter", update.help) }
                    }
                case .observe(let seconds):
                    let bucket = update.bounds.firstIndex { seconds <= $0 }
                    // Modified in place: a copy taken out and stored back duplicated the bucket array each time.
                    if let index = state.histograms.index(forKey: update.key) {
                        state.histograms.values[index].record(seconds, bucket: bucket)
                    } else {
                        var histogram = Histogram(name: update.name, labels: update.labels, bounds: update.bounds)
                        histogram.record(seconds, bucket: bucket)
                        state.histograms[update.key] = histogram
                        if state.help[update.name] == nil { state.help[update.name] = ("histogram", update.help) }
                    }
                case .declare:
                    if state.histograms[update.key] == nil {
                        state.histograms[update.key] = Histogram(name: update.name, labels: update.labels, bounds: update.bounds)
                    }
                    if state.help[update.name] == nil { state.help[update.name] = ("histogram", update.help) }
                }
            }
        }
    }

    /// The value of one counter series (tests and the demo read it).
    public func counter(_ name: String, _ labels: KeyValuePairs<String, String> = [:]) -> Double {
        let key = SeriesKey(name + Metrics.render(labels))
        return shards.reduce(0) { total, shard in total + shard.state.withLock { $0.counters[key]?.value ?? 0 } }
    }

    public func exposition(extra gauges: [(name: String, help: String, value: Double)] = []) -> String {
        let snapshot = shards.reduce(into: State()) { merged, shard in
            let state = shard.state.withLock { $0 }
            merged.help.merge(state.help) { first, _ in first }
            for (key, counter) in state.counters {
                merged.counters[key, default: Counter(name: counter.name, labels: counter.labels, value: 0)].value += counter.value
            }
            for (key, histogram) in state.histograms {
                var sum = merged.histograms[key] ?? Histogram(name: histogram.name, labels: histogram.labels, bounds: histogram.bounds)
                sum.buckets = zip(sum.buckets, histogram.buckets).map(+)
                sum.count += histogram.count
                sum.sum += histogram.sum
                merged.histograms[key] = sum
            }
        }
        var output = ""
        var described = Set<String>()
        func describe(_ name: String) {
            guard described.insert(name).inserted, let help = snapshot.help[name] else { return }
            output += "# HELP \(name) \(help.text)\n# TYPE \(name) \(help.type)\n"
        }
        for (_, counter) in snapshot.counters.sorted(by: { $0.key.text < $1.key.text }) {
            describe(counter.name)
            output += "\(counter.name)\(counter.labels) \(Metrics.number(counter.value))\n"
        }
        for (_, histogram) in snapshot.histograms.sorted(by: { $0.key.text < $1.key.text }) {
            describe(histogram.name)
            var cumulative: UInt64 = 0
            for (index, bound) in histogram.bounds.enumerated() {
                cumulative += histogram.buckets[index]
                output += "\(histogram.name)_bucket\(Metrics.with(histogram.labels, "le=\"\(bound)\"")) \(cumulative)\n"
            }
            output += "\(histogram.name)_bucket\(Metrics.with(histogram.labels, "le=\"+Inf\"")) \(histogram.count)\n"
            output += "\(histogram.name)_sum\(histogram.labels) \(histogram.sum)\n"
            output += "\(histogram.name)_count\(histogram.labels) \(histogram.count)\n"
        }
        for gauge in gauges {
            output += "# HELP \(gauge.name) \(gauge.help)\n# TYPE \(gauge.name) gauge\n\(gauge.name) \(Metrics.number(gauge.value))\n"
        }
        return output
    }

    /// `{a="1",b="2"}`, or "" without labels.
    static func render(_ labels: KeyValuePairs<String, String>) -> String {
        guard !labels.isEmpty else { return "" }
        var text = "{"
        text.reserveCapacity(96)
        for (index, label) in labels.enumerated() {
            if index > 0 { text += "," }
            text += label.key
            text += "=\""
            text += escape(label.value)
            text += "\""
        }
        return text + "}"
    }

    /// Rendered labels with one more appended.
    private static func with(_ labels: String, _ extra: String) -> String {
        labels.isEmpty ? "{\(extra)}" : String(labels.dropLast()) + ",\(extra)}"
    }

    private static func escape(_ value: String) -> String {
        guard value.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\n") }) else {
            return value
        }
        return value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }

    private static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}
