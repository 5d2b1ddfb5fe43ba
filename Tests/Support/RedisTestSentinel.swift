import Foundation

/// A Sentinel setup on 127.0.0.1: a primary, one replica, and 3 sentinels (quorum 2) watching it under
/// `masterName`, with short timeouts so a failover completes in a few seconds. Shared per test run through
/// `shared()`; a test that crashes the primary calls `restore()` when done. With `tls`, every server and
/// sentinel speaks only TLS (no plain port), with `certificates` made for it, and requires the client certificate.
public final class RedisTestSentinel: @unchecked Sendable {
    public static let masterName = "gateway-primary"
    public static let downAfterMs = 1000

    /// The primary at start, then the replica; which one is primary now is `primary()`.
    public let servers: [RedisNode]
    public let sentinels: [RedisNode]
    public let directory: String
    /// With `tls`: the test CA, the servers' certificate, the client certificate and a wrong CA.
    public let certificates: TestCertificates?

    /// "127.0.0.1:port" of every sentinel: what `redis.sentinels` lists.
    public var sentinelAddresses: [String] { sentinels.map(\.address) }

    private nonisolated(unsafe) static var sharedSetup: RedisTestSentinel?
    private static let sharedLock = NSLock()

    /// Stops the shared one (a test class's `tearDown`), so idle servers do not linger through the rest of the run.
    public static func stopShared() {
        sharedLock.withLock {
            sharedSetup?.stop()
            sharedSetup = nil
        }
    }

    public static func shared() throws -> RedisTestSentinel {
        try sharedLock.withLock {
            if let running = sharedSetup { return running }
            let setup = try RedisTestSentinel()
            sharedSetup = setup
            atexit { RedisTestSentinel.sharedSetup?.stop() }
            return setup
        }
    }

    public init(tls: Bool = false) throws {
        directory = TestPaths.temporaryDirectory("redis-sentinel")
        let certificates = tls ? try TestCertificates(directory: directory) : nil
        self.certificates = certificates
        let tlsArguments = certificates?.redisServerArguments(requireClientCertificate: true) ?? []
        let portArgument = certificates == nil ? "--port" : "--tls-port"
        let cliOptions = certificates?.redisCLIOptions ?? []
        let primary = try RedisNode.launch(directory: directory) { [directory] port in
            RedisNode(port: port, directory: directory, arguments: tlsArguments, portArgument: portArgument, cliOptions: cliOptions)
        }
        let replica = try RedisNode.launch(directory: directory) { [directory] port in
            RedisNode(port: port, directory: directory, arguments: ["--replicaof", "127.0.0.1", String(primary.port)] + tlsArguments,
                      portArgument: portArgument, cliOptions: cliOptions)
        }
        servers = [primary, replica]
        var watchers: [RedisNode] = []
        for _ in 0..<3 {
            watchers.append(try RedisNode.launch(directory: directory) { [directory] port in
                // A sentinel rewrites its config file: one per sentinel.
                let file = "\(directory)/sentinel-\(port).conf"
                try """
                    sentinel monitor \(Self.masterName) 127.0.0.1 \(primary.port) 2
                    sentinel down-after-milliseconds \(Self.masterName) \(Self.downAfterMs)
                    sentinel failover-timeout \(Self.masterName) 10000
                    sentinel parallel-syncs \(Self.masterName) 1
                    """.write(toFile: file, atomically: true, encoding: .utf8)
                return RedisNode(port: port, directory: directory, arguments: ["--sentinel"] + tlsArguments, portArgument: portArgument,
                                 cliOptions: cliOptions, configFile: file)
            })
        }
        sentinels = watchers
        try waitUntilSettled(timeout: 30)
    }

    deinit { stop() }

    public func stop() {
        (sentinels + servers).forEach { $0.stop() }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// What `sentinel` answers to SENTINEL GET-MASTER-ADDR-BY-NAME: "127.0.0.1:port".
    public func reportedPrimary(by sentinel: RedisNode) throws -> String {
        let lines = try sentinel.query("SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self.masterName).split(whereSeparator: \.isNewline)
        guard lines.count == 2 else { throw TestSupportError("sentinel \(sentinel.address) does not know \(Self.masterName)") }
        return "\(lines[0]):\(lines[1])"
    }

    /// The server every running sentinel names as primary, which itself answers role:master.
    public func primary() throws -> RedisNode {
        let named = Set(try sentinels.filter(\.isRunning).map { try reportedPrimary(by: $0) })
        guard named.count == 1, let server = servers.first(where: { $0.address == named.first }), server.isRunning,
              try server.info("replication")["role"] == "master" else {
            throw TestSupportError("the sentinels do not agree on a running primary: \(named.sorted())")
        }
        return server
    }

    /// Every sentinel knows the other two and the replica, and the replica is in sync with the primary.
    /// The replica is asked too: after a full sync the primary reports it `online` as soon as the snapshot is
    /// sent, while the replica may still be writing it to disk and loading it (seconds on a busy disk); what
    /// the primary takes meanwhile waits in its buffer, and a failover then would lose it.
    public func isSettled() throws -> Bool {
        let primary = try primary()
        let sentinelsAgree = try sentinels.allSatisfy { sentinel in
            let fields = try sentinel.info("sentinel")
            return fields["master0"]?.contains("status=ok") == true && fields["master0"]?.contains("sentinels=3") == true
                && fields["master0"]?.contains("slaves=1") == true
        }
        let replication = try primary.info("replication")
        let replicasStreaming = try servers.filter { $0 !== primary }.allSatisfy { replica in
            let fields = try replica.info("replication")
            return fields["master_link_status"] == "up" && fields["master_sync_in_progress"] == "0"
        }
        return sentinelsAgree && replicasStreaming && replication["connected_slaves"] == "1"
            && replication["slave0"]?.contains("state=online") == true
    }

    public func waitUntilSettled(timeout: TimeInterval = 30) throws {
        try waitUntil(timeout: timeout, "the sentinels to agree on the primary, each other and a replica in sync") { try isSettled() }
    }

    /// SIGKILL to the current primary; the sentinels promote the replica after `downAfterMs` plus an election.
    @discardableResult
    public func crashPrimary() throws -> RedisNode {
        let old = try primary()
        old.crash()
        return old
    }

    /// Waits until every sentinel names a running primary other than `old`; returns it.
    @discardableResult
    public func waitForFailover(from old: RedisNode, timeout: TimeInterval = 30) throws -> RedisNode {
        var promoted: RedisNode?
        try waitUntil(timeout: timeout, "the sentinels to promote a replica") {
            let now = try primary()
            guard now !== old else { return false }
            promoted = now
            return true
        }
        return promoted!
    }

    /// A planned failover: `SENTINEL FAILOVER` to `sentinel`, asked again while it cannot start one yet
    /// (NOGOODSLAVE while its view of a just-demoted replica is old, INPROG). When it was accepted.
    /// The old primary stays up and a primary until the sentinels demote it, about 8–10 s later.
    @discardableResult
    public func startFailover(by sentinel: RedisNode, timeout: TimeInterval = 20) throws -> Date {
        var accepted: Date?
        try waitUntil(timeout: timeout, "\(sentinel.address) to accept SENTINEL FAILOVER") {
            guard try sentinel.query("SENTINEL", "FAILOVER", Self.masterName) == "OK" else { return false }
            accepted = Date()
            return true
        }
        return accepted!
    }

    /// Asks `sentinel` every 20 ms until it names a primary other than `old`: that server, and when the
    /// answer was first seen (what a client asking this sentinel could know from then on).
    public func waitForAnnouncement(by sentinel: RedisNode, replacing old: RedisNode,
                                    timeout: TimeInterval = 15) throws -> (primary: RedisNode, at: Date) {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let named = try? reportedPrimary(by: sentinel), named != old.address,
               let server = servers.first(where: { $0.address == named }) {
                return (server, Date())
            }
            usleep(20_000)
        }
        throw TestSupportError("\(sentinel.address) still names \(old.address) after \(timeout) s")
    }

    /// Every server's and sentinel's role line and log tail: what a failed failover test prints to be understood.
    public func diagnostics(lines: Int = 25) -> String {
        (servers + sentinels).map { node in
            let replication = servers.contains { $0 === node } ? try? node.info("replication") : nil
            let state = !node.isRunning ? "stopped" : replication.map { "role=\($0["role"] ?? "?") offset=\($0["master_repl_offset"] ?? "?")" } ?? "sentinel"
            return "--- \(node.address) \(state)\n\(node.logTail(lines: lines))"
        }.joined(separator: "\n")
    }

    /// Restarts crashed servers as replicas of the current primary (the sentinels would convert a returning
    /// old primary too, but only after about 8 s) and waits until settled.
    public func restore(timeout: TimeInterval = 30) throws {
        for node in sentinels where !node.isRunning { try node.start() }
        let primary = try primary()
        for node in servers where !node.isRunning {
            try node.start()
            _ = try node.query("REPLICAOF", "127.0.0.1", String(primary.port))
        }
        try waitUntilSettled(timeout: timeout)
    }
}

/// One server and one sentinel (quorum 1) that asks its clients for `password` (sentinel.conf `requirepass`,
/// as Helm charts set it), for the sentinels' own login.
public final class RedisTestGuardedSentinel: @unchecked Sendable {
    public let server: RedisNode
    public let sentinel: RedisNode
    public let directory: String

    public init(password: String) throws {
        directory = TestPaths.temporaryDirectory("redis-guarded-sentinel")
        let server = try RedisNode.launch(directory: directory) { [directory] port in
            RedisNode(port: port, directory: directory, arguments: [])
        }
        self.server = server
        sentinel = try RedisNode.launch(directory: directory) { [directory] port in
            let file = "\(directory)/sentinel-\(port).conf"
            try """
                sentinel monitor \(RedisTestSentinel.masterName) 127.0.0.1 \(server.port) 1
                requirepass \(password)
                """.write(toFile: file, atomically: true, encoding: .utf8)
            return RedisNode(port: port, directory: directory, arguments: ["--sentinel"], cliOptions: ["-a", password], configFile: file)
        }
    }

    deinit { stop() }

    public func stop() {
        sentinel.stop()
        server.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
