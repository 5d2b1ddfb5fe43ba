import EventLoop

/// The metric series one request's end updates, named and labelled once per shape (route, decision, reason,
/// status class, attest method) rather than per request: rendering the labels and building the keys was a
/// tenth of a relayed request's instructions. Shapes come from sets the configuration fixes (routes, reason
/// codes), so there are as few of them as series. A class: a request takes one reference to its series, not four.
final class RequestSeries: Sendable {
    let requests: Metrics.Series
    let duration: Metrics.Series
    let upstream: Metrics.Series
    /// Assert routes only.
    let attest: Metrics.Series?

    struct Shape: Hashable {
        let route: String
        let decision: String
        let reason: String
        let code: String
        let attestMethod: String?
    }

    static let verify = Metrics.Series("gateway_verify_duration_seconds", [:], help: MetricHelp.verifyDuration)
    static let store = Metrics.Series("gateway_store_duration_seconds", [:], help: MetricHelp.storeDuration)

    private static let known = Locked(Known())
    /// Should a shape ever vary without bound, the cache starts over rather than grow.
    private static let capacity = 4096
    /// Shapes looked up lately, searched first: their strings are mostly the same storage each time (the
    /// route's name from the configuration, literals), so comparing them is a pointer compare, where the
    /// dictionary hashed five strings per request.
    private static let recentCount = 8

    private struct Known {
        var all: [Shape: RequestSeries] = [:]
        var recent: [(shape: Shape, series: RequestSeries)] = []
        var next = 0

        /// The series of the shape `matches` accepts if it is among the recent ones, which is moved first (a few
        /// shapes make most requests).
        mutating func recent(_ matches: (Shape) -> Bool) -> RequestSeries? {
            guard let index = recent.firstIndex(where: { matches($0.shape) }) else { return nil }
            if index > 0 { recent.swapAt(0, index) }
            return recent[0].series
        }

        mutating func remember(_ shape: Shape, _ series: RequestSeries) {
            if all.count >= capacity { all.removeAll() }
            all[shape] = series
            if recent.count < recentCount { recent.append((shape, series)) } else { recent[next] = (shape, series) }
            next = (next + 1) % recentCount
        }
    }

    /// The series of a request's shape: a recent one is found by comparing the strings in place (building a
    /// `Shape` to compare, and releasing it, cost more than the search).
    static func of(route: String, decision: String, reason: String, code: String, attestMethod: String?) -> RequestSeries {
        let found = known.withLock { known in
            known.recent { $0.route == route && $0.decision == decision && $0.reason == reason && $0.code == code && $0.attestMethod == attestMethod }
        }
        if let found { return found }
        let shape = Shape(route: route, decision: decision, reason: reason, code: code, attestMethod: attestMethod)
        let series = known.withLock { $0.all[shape] } ?? RequestSeries(shape)
        known.withLock { $0.remember(shape, series) }
        return series
    }

    private init(_ shape: Shape) {
        requests = Metrics.Series("gateway_requests_total",
                                  ["route": shape.route, "decision": shape.decision, "reason": shape.reason, "code": shape.code],
                                  help: MetricHelp.requests)
        duration = Metrics.Series("gateway_request_duration_seconds", ["route": shape.route, "code": shape.code],
                                  help: MetricHelp.requestDuration)
        upstream = Metrics.Series("gateway_upstream_duration_seconds", ["route": shape.route], help: MetricHelp.upstreamDuration)
        attest = shape.attestMethod.map { method in
            Metrics.Series("gateway_attest_requests_total",
                           ["route": shape.route, "attest_method": method, "decision": shape.decision, "reason": shape.reason],
                           help: "Assert-route requests by how they proved themselves, decision and reason code.")
        }
    }
}
