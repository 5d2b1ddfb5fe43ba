/// Reading the gateway's Prometheus exposition in tests.
public enum MetricsText {
    /// The value of the sample `series` (name and labels exactly as exported), nil when it is not there.
    /// Series the gateway declares at start are exported at 0: a test of a count reads the value.
    public static func sample(_ series: String, in text: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.dropFirst(series.count + 1)) }
    }
}
