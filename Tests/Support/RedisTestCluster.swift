import Foundation

/// A Redis Cluster of 3 primaries and 3 replicas on 127.0.0.1 (`redis-server --cluster-enabled yes` ×6 and
/// `redis-cli --cluster create … --cluster-replicas 1`), for the Cluster client's tests. Starting one takes a
/// few seconds, so tests share `RedisTestCluster.shared()` (stopped when the test process exits); a test that
/// kills or reshards calls `restore()` or `waitUntilHealthy()` when done, so the next test finds all 16384
/// slots served.
public final class RedisTestCluster: @unchecked Sendable {
    public static let slotCount = 16384
    /// Short, so that a killed primary's replica takes over in 2-3 s.
    public static let nodeTimeoutMs = 1000

    public let nodes: [RedisNode]
    public let directory: String
    /// `requirepass` and `masterauth` of every node, when given.
    public let password: String?
    /// With certificates, every node speaks only TLS (clients, the cluster bus, replication).
    public let certificates: TestCertificates?

    /// "127.0.0.1:port" of every node: what `redis.cluster` lists.
    public var seeds: [String] { nodes.map(\.address) }

    private nonisolated(unsafe) static var sharedCluster: RedisTestCluster?
    private static let sharedLock = NSLock()

    /// Stops the shared one (a test class's `tearDown`), so idle servers do not linger through the rest of the run.
    public static func stopShared() {
        sharedLock.withLock {
            sharedCluster?.stop()
            sharedCluster = nil
        }
    }

    /// The cluster of this test run, started on first use, healthy: one a test left broken (not healthy within
    /// 30 s) is replaced by a fresh one, so one failure does not fail every later Cluster test.
    public static func shared() throws -> RedisTestCluster {
        try sharedLock.withLock {
            if let running = sharedCluster {
                if (try? running.waitUntilHealthy(timeout: 30)) != nil { return running }
                running.stop()
            } else {
                atexit { RedisTestCluster.sharedCluster?.stop() }
            }
            let cluster = try RedisTestCluster()
            sharedCluster = cluster
            return cluster
        }
    }

    public init(password: String? = nil, certificates: TestCertificates? = nil) throws {
        directory = TestPaths.temporaryDirectory("redis-cluster")
        self.password = password
        self.certificates = certificates
        var started: [RedisNode] = []
        let login = password.map { ["--requirepass", $0, "--masterauth", $0] } ?? []
        let tls = certificates.map { ["--tls-cluster", "yes"] + $0.redisServerArguments(requireClientCertificate: false) } ?? []
        let cliOptions = Self.cliOptions(password: password, certificates: certificates)
        for _ in 0..<6 {
            started.append(try RedisNode.launch(directory: directory) { [directory] port in
                RedisNode(port: port, directory: directory,
                          arguments: ["--cluster-enabled", "yes", "--cluster-config-file", "nodes-\(port).conf",
                                      "--cluster-node-timeout", String(Self.nodeTimeoutMs),
                                      // A replica may take over however long ago it last heard from its primary
                                      // (an idle test cluster would otherwise refuse: "data too old").
                                      "--cluster-replica-validity-factor", "0", "--repl-ping-replica-period", "1"] + login + tls,
                          portArgument: certificates == nil ? "--port" : "--tls-port", cliOptions: cliOptions)
            })
        }
        nodes = started
        let create = try Command.run("redis-cli", ["--cluster", "create"] + started.map(\.address)
                                     + ["--cluster-replicas", "1", "--cluster-yes"] + redisCLIOptions, timeout: 60)
        guard create.status == 0 else {
            stop()
            throw TestSupportError("redis-cli --cluster create failed: \(create.output)")
        }
        try waitUntilHealthy(timeout: 30)
    }

    deinit { stop() }

    public func stop() {
        nodes.forEach { $0.stop() }
        try? FileManager.default.removeItem(atPath: directory)
    }

    // MARK: - State

    /// One line of CLUSTER NODES.
    public struct NodeInfo: Sendable {
        public let id: String
        public let address: String
        public let isPrimary: Bool
        public let failed: Bool
        /// The primary's id, for a replica.
        public let primaryId: String?
        /// Slot ranges served, for a primary ("0-5460"), without migration markers.
        public let slots: [ClosedRange<Int>]
    }

    /// CLUSTER NODES as seen by `node` (the first running node by default).
    public func clusterNodes(from node: RedisNode? = nil) throws -> [NodeInfo] {
        guard let asked = node ?? nodes.first(where: \.isRunning) else { throw TestSupportError("no cluster node is running") }
        return try asked.query("CLUSTER", "NODES").split(whereSeparator: \.isNewline).map { line in
            let fields = line.split(separator: " ").map(String.init)
            let flags = fields[2].split(separator: ",")
            let slots = fields.dropFirst(8).filter { !$0.hasPrefix("[") }.compactMap { range -> ClosedRange<Int>? in
                let bounds = range.split(separator: "-").compactMap { Int($0) }
                return bounds.isEmpty ? nil : bounds[0]...(bounds.last ?? bounds[0])
            }
            return NodeInfo(id: fields[0], address: String(fields[1].prefix { $0 != "@" }), isPrimary: flags.contains("master"),
                            failed: flags.contains("fail") || flags.contains("fail?"), primaryId: fields[3] == "-" ? nil : fields[3],
                            slots: slots)
        }
    }

    /// The running primaries, as the cluster sees them.
    public func primaries() throws -> [RedisNode] {
        let primaryAddresses = Set(try clusterNodes().filter { $0.isPrimary && !$0.failed && !$0.slots.isEmpty }.map(\.address))
        return nodes.filter { $0.isRunning && primaryAddresses.contains($0.address) }
    }

    /// The node serving `slot` now.
    public func owner(ofSlot slot: Int) throws -> RedisNode {
        guard let info = try clusterNodes().first(where: { $0.isPrimary && !$0.failed && $0.slots.contains { $0.contains(slot) } }),
              let node = nodes.first(where: { $0.address == info.address }) else {
            throw TestSupportError("no primary serves slot \(slot)")
        }
        return node
    }

    public func nodeId(_ node: RedisNode) throws -> String { try node.query("CLUSTER", "MYID") }

    /// The slot of a key, as the cluster computes it (hash tags included).
    public func slot(ofKey key: String) throws -> Int {
        guard let node = nodes.first(where: \.isRunning), let slot = Int(try node.query("CLUSTER", "KEYSLOT", key)) else {
            throw TestSupportError("CLUSTER KEYSLOT failed")
        }
        return slot
    }

    /// `redis-cli --cluster check` passes (all 16384 slots covered, no open slot, all nodes agree), every
    /// running node reports cluster_state:ok, and every replica is in sync with its primary.
    public func isHealthy() throws -> Bool { try healthProblem() == nil }

    /// Why the cluster is not healthy yet (nil: it is): `redis-cli --cluster check` finds every slot covered
    /// without warnings, and every running node reports `cluster_state:ok` and, if a replica, its link up.
    public func healthProblem() throws -> String? {
        guard let node = nodes.first(where: \.isRunning) else { return "no node is running" }
        let check = try Command.run("redis-cli", ["--cluster", "check", node.address] + redisCLIOptions, timeout: 20)
        guard check.status == 0, check.output.contains("[OK] All 16384 slots covered."),
              !check.output.contains("[WARNING]"), !check.output.contains("[ERR]") else {
            return "redis-cli --cluster check (status \(check.status)):\n" + check.output
        }
        for node in nodes where node.isRunning {
            let replication = try node.info("replication")
            let state = try node.clusterInfo()["cluster_state"]
            guard state == "ok", replication["role"] == "master" || replication["master_link_status"] == "up" else {
                return "\(node.address): cluster_state \(state ?? "?"), role \(replication["role"] ?? "?"), "
                    + "master_link_status \(replication["master_link_status"] ?? "-")\n" + node.logTail(lines: 15)
            }
        }
        return nil
    }

    /// On a timeout the error says what was still wrong (a failure here is rare and not reproduced on demand).
    public func waitUntilHealthy(timeout: TimeInterval = 30) throws {
        let deadline = Date().addingTimeInterval(timeout)
        var problem = "not checked"
        while Date() < deadline {
            do {
                guard let found = try healthProblem() else { return }
                problem = found
            } catch {
                problem = "\(error)"
            }
            usleep(50_000)
        }
        throw TestSupportError("timed out after \(timeout) s waiting for the cluster to report ok with all slots covered; last: \(problem)")
    }

    // MARK: - Failures

    /// Kills (SIGKILL) the primary serving `slot`; its replica is promoted after about `nodeTimeoutMs` × 2-3.
    @discardableResult
    public func crashPrimary(servingSlot slot: Int) throws -> RedisNode {
        let primary = try owner(ofSlot: slot)
        primary.crash()
        return primary
    }

    /// Waits until a running node other than `crashed` serves `slot`, and answers as that slot's primary.
    @discardableResult
    public func waitForPromotion(ofSlot slot: Int, replacing crashed: RedisNode, timeout: TimeInterval = 20) throws -> RedisNode {
        var promoted: RedisNode?
        try waitUntil(timeout: timeout, "a replica to take over slot \(slot)") {
            let owner = try owner(ofSlot: slot)
            guard owner !== crashed, owner.isRunning, try owner.info("replication")["role"] == "master" else { return false }
            promoted = owner
            return true
        }
        return promoted!
    }

    /// Restarts every crashed node (each rejoins as a replica, its config file remembering the cluster) and
    /// waits until the cluster is healthy again.
    public func restore(timeout: TimeInterval = 30) throws {
        for node in nodes where !node.isRunning { try node.start() }
        try waitUntil(timeout: timeout, "every node to be known and not failed") {
            try clusterNodes().count == nodes.count && clusterNodes().allSatisfy { !$0.failed }
        }
        try waitUntilHealthy(timeout: timeout)
    }

    // MARK: - Resharding

    /// `redis-cli --cluster reshard`: moves `count` slots (and their keys) from `source` to `target`.
    public func reshard(count: Int, from source: RedisNode, to target: RedisNode, timeout: TimeInterval = 60) throws {
        let result = try Command.run("redis-cli", ["--cluster", "reshard", source.address, "--cluster-from", try nodeId(source),
                                                   "--cluster-to", try nodeId(target), "--cluster-slots", String(count),
                                                   "--cluster-yes"] + redisCLIOptions, timeout: timeout)
        guard result.status == 0 else { throw TestSupportError("reshard failed: \(result.output.suffix(2000))") }
        try waitUntilHealthy()
    }

    /// One slot moved by hand, in the steps a client sees: after `beginMigration` the source answers `ASK` for
    /// keys already moved (and `-TRYAGAIN` for multi-key commands split across nodes); `moveKeys` migrates
    /// keys in batches; `finishMigration` assigns the slot to the target everywhere (`MOVED` from then on).
    public struct SlotMigration: Sendable {
        public let slot: Int
        public let source: RedisNode
        public let target: RedisNode
        let sourceId: String
        let targetId: String
    }

    public func beginMigration(ofSlot slot: Int, to target: RedisNode) throws -> SlotMigration {
        let source = try owner(ofSlot: slot)
        guard source !== target else { throw TestSupportError("slot \(slot) is already on \(target.address)") }
        let migration = SlotMigration(slot: slot, source: source, target: target, sourceId: try nodeId(source), targetId: try nodeId(target))
        _ = try target.query("CLUSTER", "SETSLOT", String(slot), "IMPORTING", migration.sourceId)
        _ = try source.query("CLUSTER", "SETSLOT", String(slot), "MIGRATING", migration.targetId)
        return migration
    }

    /// Moves up to `limit` keys of the slot from source to target; answers how many were moved.
    @discardableResult
    public func moveKeys(of migration: SlotMigration, limit: Int = 1000) throws -> Int {
        let keys = try migration.source.query("CLUSTER", "GETKEYSINSLOT", String(migration.slot), String(limit))
            .split(whereSeparator: \.isNewline).map(String.init)
        guard !keys.isEmpty else { return 0 }
        let target = migration.target.address.split(separator: ":")
        _ = try migration.source.cli(["MIGRATE", String(target[0]), String(target[1]), "", "0", "5000"]
                                     + (password.map { ["AUTH", $0] } ?? []) + ["KEYS"] + keys)
        return keys.count
    }

    public func finishMigration(_ migration: SlotMigration) throws {
        while try moveKeys(of: migration) > 0 {}
        for node in [migration.target, migration.source] + (try primaries()) {
            _ = try node.query("CLUSTER", "SETSLOT", String(migration.slot), "NODE", migration.targetId)
        }
        try waitUntilHealthy()
    }

    /// What redis-cli needs besides the address: the password, TLS with the test CA.
    private var redisCLIOptions: [String] { Self.cliOptions(password: password, certificates: certificates) }

    private static func cliOptions(password: String?, certificates: TestCertificates?) -> [String] {
        (password.map { ["-a", $0, "--no-auth-warning"] } ?? [])
            + (certificates?.redisCLIOptions ?? [])
    }
}
