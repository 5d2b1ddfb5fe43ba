/// `host:port` of a Redis server, Cluster node or sentinel.
public struct RedisAddress: Sendable, Hashable, CustomStringConvertible {
    public let host: String
    public let port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Which Redis deployment to talk to, how to log in, and how long anything may take.
public struct RedisOptions: Sendable {
    public enum Topology: Sendable, Equatable {
        /// One server.
        case single(RedisAddress)
        /// A Redis Cluster: the slot map is discovered from the seeds and kept current from redirects.
        case cluster(seeds: [RedisAddress])
        /// A primary that the sentinels name; asked again after a failover.
        case sentinel(sentinels: [RedisAddress], masterName: String)
    }

    public var topology: Topology
    public var username: String?
    public var password: String?
    /// The sentinels' own login (Sentinel's `requirepass`), not the data servers'.
    public var sentinelUsername: String?
    public var sentinelPassword: String?
    /// Always 0 on a Cluster.
    public var database: Int
    /// TLS to every server (Cluster nodes and sentinels included), or nil for plain TCP.
    public var tls: RedisTLSContext?
    /// Bounds every command, connection and login.
    public var timeoutMs: Int
    /// Pipelined connections per server and event loop.
    public var connectionsPerNode: Int
    /// After a failed attempt, commands to that server fail at once for this long instead of each trying to
    /// connect (an outage must not turn every request into a connect attempt). Tests lengthen it.
    public var reconnectPauseMs = 200

    public init(topology: Topology, username: String? = nil, password: String? = nil, database: Int = 0,
                tls: RedisTLSContext? = nil, timeoutMs: Int = 500, connectionsPerNode: Int = 2,
                sentinelUsername: String? = nil, sentinelPassword: String? = nil) {
        self.topology = topology
        self.username = username
        self.password = password
        self.sentinelUsername = sentinelUsername
        self.sentinelPassword = sentinelPassword
        self.database = database
        self.tls = tls
        self.timeoutMs = max(1, timeoutMs)
        self.connectionsPerNode = max(1, connectionsPerNode)
    }

    /// Where the data is, for messages: never the password.
    public var description: String {
        let scheme = tls == nil ? "redis" : "rediss"
        switch topology {
        case .single(let address): return "\(scheme)://\(address)/\(database)"
        case .cluster(let seeds): return "cluster \(seeds.map(\.description).joined(separator: ","))\(tls == nil ? "" : " (TLS)")"
        case .sentinel(let sentinels, let name):
            return "sentinel master \(name) via \(sentinels.map(\.description).joined(separator: ","))\(tls == nil ? "" : " (TLS)")"
        }
    }
}
