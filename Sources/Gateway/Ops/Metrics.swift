import RedisClient
import EventLoop
import AttestStore
import Foundation
import Synchronization

/// Prometheus text exposition of counters and histograms. Label sets are small and fixed by the
/// configuration (routes, reason codes), so series stay bounded. Each series gets a slot once (by its
/// rendered name and labels); its values live in an array of cells by slot, one array per shard picked by
/// thread, a request's updates applied under one shard lock — one lock shared by every connection thread
/// was the gateway's most contended. A scrape adds the shards up.
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
    /// no label rendering and no key building (those were a tenth of a relayed request's instructions), and
    /// it remembers its slot in the `Metrics` that last used it, so an update is an add into a cell (finding
    /// the slot by the key's hash was a third of a request's metrics).
    public final class Series: Sendable {
        let name: String
        let labels: String
        let key: SeriesKey
        let help: String
        let bounds: [Double]
        /// `Binding.word` of the slot this series has in a `Metrics`, or 0.
        fileprivate let binding = Atomic<Int>(0)

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

    /// A series' name and rendered labels with its hash computed once: a lookup hashes one integer, not
    /// the whole text.
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

    /// A series' slot in one `Metrics`, packed into one word a `Series` keeps: the metrics' id, whether it
    /// is a histogram, the slot.
    private struct Binding {
        let word: Int

        init(word: Int) {
            self.word = word
        }

        init(metrics: Int, histogram: Bool, slot: Int) {
            word = metrics << 33 | (histogram ? 1 << 32 : 0) | slot
        }

        func slot(metrics: Int, histogram: Bool) -> Int? {
            word >> 33 == metrics && (word >> 32 & 1 == 1) == histogram ? word & 0xFFFF_FFFF : nil
        }
    }

    /// What a slot holds, fixed when it is made.
    private struct Entry {
        let name: String
        let labels: String
        let key: SeriesKey
        /// Bucket bounds of a histogram; nil for a counter.
        let bounds: [Double]?
    }

    /// The series made so far (slots are indices into `entries`) and each name's type and help, recorded
    /// with the first series of that name.
    private struct Registry {
        var counters: [SeriesKey: Int] = [:]
        var histograms: [SeriesKey: Int] = [:]
        var entries: [Entry] = []
        var help: [String: (type: String, text: String)] = [:]
    }

    /// One shard's values of one slot: a counter's value, or a histogram's sum, count and buckets (not
    /// cumulative; empty until its first observation in this shard).
    fileprivate struct Cell {
        var value: Double = 0
        var count: UInt64 = 0
        var buckets: [UInt64] = []

        /// One observation into a histogram's cell (its buckets made on the first).
        mutating func observe(_ value: Double, bounds: [Double]) {
            if buckets.isEmpty { buckets = Array(repeating: 0, count: bounds.count) }
            var bucket = 0
            while bucket < bounds.count && !(value <= bounds[bucket]) { bucket += 1 }  // NaN: no bucket
            if bucket < bounds.count { buckets[bucket] += 1 }
            count += 1
            self.value += value
        }
    }

    private static let shardCount = 16
    private final class Shard: Sendable {
        let cells = Locked<[Cell]>([])
    }

    private static let nextID = Atomic<Int>(1)
    private let id = Metrics.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
    private let registry = Locked(Registry())
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
        record { batch in
            for update in updates { batch.apply(update) }
        }
    }

    /// Applies what `body` adds under one lock: a request's updates, without an array of them.
    func record(_ body: (inout Batch) -> Void) {
        shard.cells.withLock { cells in
            var batch = Batch(metrics: self)
            swap(&batch.cells, &cells)
            body(&batch)
            swap(&batch.cells, &cells)
        }
    }

    /// Updates to the calling thread's shard, its lock held.
    struct Batch {
        fileprivate let metrics: Metrics
        fileprivate var cells: [Cell] = []

        mutating func count(_ series: Series, by value: Double = 1) {
            let slot = metrics.slot(of: series, histogram: false).slot
            grow(to: slot)
            cells[slot].value += value
        }

        /// One access to the cell (an access per field of it checked the cells' uniqueness each time).
        mutating func observe(_ series: Series, _ value: Double) {
            let (slot, bounds) = metrics.slot(of: series, histogram: true)
            grow(to: slot)
            cells[slot].observe(value, bounds: bounds ?? series.bounds)
        }

        mutating func apply(_ update: Update) {
            switch update.kind {
            case .count(let value): count(update.series, by: value)
            case .observe(let value): observe(update.series, value)
            case .declare: _ = metrics.slot(of: update.series, histogram: true)
            }
        }

        private mutating func grow(to slot: Int) {
            if slot >= cells.count { cells += repeatElement(Cell(), count: slot + 1 - cells.count) }
        }
    }

    /// The series' slot here, and its histogram bounds when they are not the series' own (the first series of
    /// a key fixed them; nil spares a reference to the series' own): from the series itself when it was bound
    /// here last, else from the registry (made there if new).
    private func slot(of series: Series, histogram: Bool) -> (slot: Int, bounds: [Double]?) {
        if let slot = Binding(word: series.binding.load(ordering: .relaxed)).slot(metrics: id, histogram: histogram) {
            return (slot, nil)
        }
        let (slot, bounds) = registry.withLock { registry in
            if registry.help[series.name] == nil { registry.help[series.name] = (histogram ? "histogram" : "counter", series.help) }
            if let slot = histogram ? registry.histograms[series.key] : registry.counters[series.key] {
                return (slot, registry.entries[slot].bounds ?? series.bounds)  // a counter has none: any will do
            }
            let slot = registry.entries.count
            registry.entries.append(Entry(name: series.name, labels: series.labels, key: series.key, bounds: histogram ? series.bounds : nil))
            if histogram { registry.histograms[series.key] = slot } else { registry.counters[series.key] = slot }
            return (slot, series.bounds)
        }
        // Only a series whose bounds are its slot's: a fast-path observation buckets by the series' own.
        guard bounds == series.bounds else { return (slot, bounds) }
        series.binding.store(Binding(metrics: id, histogram: histogram, slot: slot).word, ordering: .relaxed)
        return (slot, nil)
    }

    /// The value of one counter series (tests and the demo read it).
    public func counter(_ name: String, _ labels: KeyValuePairs<String, String> = [:]) -> Double {
        let key = SeriesKey(name + Metrics.render(labels))
        guard let slot = registry.withLock({ $0.counters[key] }) else { return 0 }
        return shards.reduce(0) { total, shard in total + shard.cells.withLock { slot < $0.count ? $0[slot].value : 0 } }
    }

    public func exposition(extra gauges: [(name: String, help: String, value: Double)] = []) -> String {
        let registry = registry.withLock { $0 }
        var totals = Array(repeating: Cell(), count: registry.entries.count)
        for shard in shards {
            let cells = shard.cells.withLock { $0 }
            for (slot, cell) in zip(cells.indices, cells) where slot < totals.count {
                totals[slot].value += cell.value
                totals[slot].count += cell.count
                if totals[slot].buckets.isEmpty { totals[slot].buckets = cell.buckets } else if !cell.buckets.isEmpty {
                    totals[slot].buckets = zip(totals[slot].buckets, cell.buckets).map(+)
                }
            }
        }
        var output = ""
        var described = Set<String>()
        func describe(_ name: String) {
            guard described.insert(name).inserted, let help = registry.help[name] else { return }
            output += "# HELP \(name) \(help.text)\n# TYPE \(name) \(help.type)\n"
        }
        for slot in registry.counters.values.sorted(by: { registry.entries[$0].key.text < registry.entries[$1].key.text }) {
            let counter = registry.entries[slot]
            describe(counter.name)
            output += "\(counter.name)\(counter.labels) \(Metrics.number(totals[slot].value))\n"
        }
        for slot in registry.histograms.values.sorted(by: { registry.entries[$0].key.text < registry.entries[$1].key.text }) {
            let histogram = registry.entries[slot], bounds = histogram.bounds ?? [], total = totals[slot]
            describe(histogram.name)
            var cumulative: UInt64 = 0
            for (index, bound) in bounds.enumerated() {
                cumulative += total.buckets.isEmpty ? 0 : total.buckets[index]
                output += "\(histogram.name)_bucket\(Metrics.with(histogram.labels, "le=\"\(bound)\"")) \(cumulative)\n"
            }
            output += "\(histogram.name)_bucket\(Metrics.with(histogram.labels, "le=\"+Inf\"")) \(total.count)\n"
            output += "\(histogram.name)_sum\(histogram.labels) \(total.value)\n"
            output += "\(histogram.name)_count\(histogram.labels) \(total.count)\n"
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
