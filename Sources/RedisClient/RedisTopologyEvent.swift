import EventLoop

/// A change in where the data is, for the operator's log: a Sentinel failover followed, or a Cluster's set of
/// primaries changed (a failover, a node added or removed).
public enum RedisTopologyEvent: Sendable, Equatable {
    /// The sentinels name a primary; `previous` is nil the first time.
    case primaryChanged(masterName: String, previous: RedisAddress?, primary: RedisAddress)
    /// The Cluster's slot map names these primaries; `previous` is empty the first time.
    case clusterPrimariesChanged(previous: [RedisAddress], primaries: [RedisAddress])
}

/// Tells the sink of each change once per `Redis` object, though every event loop's router notices it.
final class TopologyReporter: Sendable {
    private let sink: (@Sendable (RedisTopologyEvent) -> Void)?
    private let primary = Locked<RedisAddress?>(nil)
    private let clusterPrimaries = Locked<[RedisAddress]>([])

    init(sink: (@Sendable (RedisTopologyEvent) -> Void)?) {
        self.sink = sink
    }

    /// True when this is news: the first router to see a primary replace another (not the first one found).
    @discardableResult
    func primary(_ address: RedisAddress, masterName: String) -> Bool {
        guard let previous = primary.withLock({ (known: inout RedisAddress?) -> RedisAddress?? in
            guard known != address else { return nil }
            defer { known = address }
            return .some(known)
        }) else { return false }
        sink?(.primaryChanged(masterName: masterName, previous: previous, primary: address))
        return previous != nil
    }

    func clusterPrimaries(_ addresses: [RedisAddress]) {
        let sorted = addresses.sorted { ($0.host, $0.port) < ($1.host, $1.port) }
        guard let sink, let previous = clusterPrimaries.withLock({ (known: inout [RedisAddress]) -> [RedisAddress]? in
            guard known != sorted else { return nil }
            defer { known = sorted }
            return known
        }) else { return }
        sink(.clusterPrimariesChanged(previous: previous, primaries: sorted))
    }
}
