import Dispatch
import EventLoop
import Foundation
import RedisClient
import Synchronization
import TestSupport
import XCTest

/// The Sentinel client against real sentinels during a planned failover (`SENTINEL FAILOVER`): the old
/// primary stays up and keeps taking writes until the sentinels demote it 8–10 s later, dropping them.
/// Neither a failed connection nor READONLY says anything meanwhile; the client must notice the sentinels'
/// new answer by itself.
final class RedisSentinelClientTests: XCTestCase {
    /// How long after the sentinel names the new primary a write may still be answered by the old one:
    /// the client asks every second (plus a question's round trip), with margin for a loaded machine.
    static let switchBound: TimeInterval = 2.0

    /// SET `key` 1 through `redis`'s helper loop, or through `loop` (its own router) when given.
    private static func set(_ redis: Redis, _ key: String, on loop: EventLoop? = nil) -> Bool {
        let outcome = waitFor(timeoutMs: 3000) { () async -> Bool in
            let set = { () async -> Bool in
                (try? await redis.command(["SET", key, "1"].map { Array($0.utf8) }, key: Array(key.utf8))) == .status("OK")
            }
            guard let loop else { return await set() }
            return await withTaskExecutorPreference(loop) { await set() }
        }
        return outcome ?? false
    }

    private static func subscribe(_ redis: Redis, _ channel: String) -> RedisSubscription? {
        waitFor(timeoutMs: 3000) { () async -> RedisSubscription? in try? await redis.subscribe(Array(channel.utf8)) } ?? nil
    }

    /// Connections to `server` other than the sentinels' (named), the replicas' and this query's own.
    private static func unnamedClients(of server: RedisNode) throws -> Int {
        try server.query("CLIENT", "LIST", "TYPE", "normal").split(whereSeparator: \.isNewline)
            .filter { $0.contains(" name= ") && !$0.contains("cmd=client|list") }.count
    }

    /// Seconds since a client last asked `sentinel` for the primary: the least `idle` of CLIENT LIST's
    /// connections whose last command was that question.
    private static func sinceAsked(_ sentinel: RedisNode) throws -> Int {
        let idles = try sentinel.query("CLIENT", "LIST").split(whereSeparator: \.isNewline)
            .filter { $0.contains("cmd=sentinel|get-master-addr-by-name") }
            .compactMap { line in line.split(separator: " ").first { $0.hasPrefix("idle=") }.flatMap { Int($0.dropFirst(5)) } }
        return try XCTUnwrap(idles.min(), "no client asked \(sentinel.address) for the primary")
    }

    /// CLIENT LIST's `idle` counts whole seconds between two truncated clocks: it may read one more than
    /// elapsed, hence the margins (a check every ~1.1 s reads at most 2; 4 s without a question at least 3).
    func testTheSentinelsAreAskedEverySecondWhileInUseAndNotWhenIdle() throws {
        let setup = try RedisTestSentinel.shared()
        try setup.waitUntilSettled()
        let sentinel = setup.sentinels[0]
        let redis = Redis(options: RedisOptions(topology: .sentinel(sentinels: [RedisAddress(host: "127.0.0.1", port: sentinel.port)],
                                                                    masterName: RedisTestSentinel.masterName), timeoutMs: 300))
        let key = "in-use:\(UUID().uuidString.prefix(8))"
        let busyUntil = Date().addingTimeInterval(4)
        while Date() < busyUntil {
            XCTAssertTrue(Self.set(redis, key))
            usleep(100_000)
        }
        XCTAssertLessThanOrEqual(try Self.sinceAsked(sentinel), 2, "asked again about every second, 4 s after the first command")
        sleep(5)
        XCTAssertGreaterThanOrEqual(try Self.sinceAsked(sentinel), 3, "an idle client stops asking (one check after its last command)")
        XCTAssertTrue(Self.set(redis, key))
        XCTAssertLessThanOrEqual(try Self.sinceAsked(sentinel), 1, "after a while idle, the sentinel is asked before the next command")
    }

    /// Sentinels that take the connection and never answer (a host gone behind a firewall that drops
    /// packets) listed before a working one. Every sentinel is asked at once: the client waits one timeout
    /// for the one it prefers, then takes the working one's answer, instead of one timeout per sentinel in
    /// turn (3 × 1.5 s here); from then on the working one is preferred.
    func testBlackholedSentinelsCostOneTimeoutNotOneEach() throws {
        let setup = try RedisTestSentinel.shared()
        try setup.waitUntilSettled()
        let blackholes = (0..<3).map { _ in TestPaths.listeningSocket(backlog: 16) }
        defer { blackholes.forEach { close($0.socket) } }
        let sentinels = blackholes.map { RedisAddress(host: "127.0.0.1", port: $0.port) }
            + [RedisAddress(host: "127.0.0.1", port: setup.sentinels[0].port)]
        let redis = Redis(options: RedisOptions(topology: .sentinel(sentinels: sentinels, masterName: RedisTestSentinel.masterName),
                                                timeoutMs: 1500))
        let key = "blackholed:\(UUID().uuidString.prefix(8))"
        let timedSet = { () -> (done: Bool, seconds: TimeInterval) in
            let started = Date()
            let done = waitFor(timeoutMs: 10_000) { () async -> Bool in
                (try? await redis.command(["SET", key, "1"].map { Array($0.utf8) }, key: Array(key.utf8))) == .status("OK")
            } ?? false
            return (done, Date().timeIntervalSince(started))
        }
        let first = timedSet()
        XCTAssertTrue(first.done, "the working sentinel's answer was used")
        XCTAssertGreaterThan(first.seconds, 1.0, "the preferred (first listed) sentinel was given its timeout")
        XCTAssertLessThan(first.seconds, 3.0, "one timeout (1.5 s) in all, not one per blackholed sentinel (4.5 s)")
        sleep(3)  // idle past two check periods: the next command asks the sentinels first
        let afterIdle = timedSet()
        XCTAssertTrue(afterIdle.done)
        XCTAssertLessThan(afterIdle.seconds, 0.75, "the sentinel that answered is the one listened to now")
    }

    func testAPlannedFailoverIsFollowedWithinAboutASecondOfTheSentinels() throws {
        let setup = try RedisTestSentinel.shared()
        try setup.waitUntilSettled()
        let sentinels = setup.sentinels.map { RedisAddress(host: "127.0.0.1", port: $0.port) }
        let redis = Redis(options: RedisOptions(topology: .sentinel(sentinels: sentinels, masterName: RedisTestSentinel.masterName),
                                                timeoutMs: 300))
        let run = "switch:\(UUID().uuidString.prefix(8))"
        let old = try setup.primary()
        XCTAssertTrue(Self.set(redis, "\(run):first"), "connected to the primary before the failover")
        // Another loop's router, idle through the failover: told by the busy one, it closes its connection too.
        let idleLoop = try EventLoop(name: "idle-router")
        idleLoop.start()
        defer { idleLoop.stop() }
        XCTAssertTrue(Self.set(redis, "\(run):idle", on: idleLoop))
        // Replication is asynchronous: what the last check below claims holds only once the replica has them.
        let replica = try XCTUnwrap(setup.servers.first { $0 !== old })
        do {
            try waitUntil(timeout: 5, "the replica to have the writes made before the failover") {
                try replica.query("EXISTS", "\(run):first", "\(run):idle") == "2"
            }
        } catch {
            return XCTFail("\(error)\n\(setup.diagnostics())")
        }
        let subscription = try XCTUnwrap(Self.subscribe(redis, run))

        // One write every 150 ms, with when it was acknowledged (nil: it failed, 503 in the gateway).
        let writes = Mutex<[(key: String, acknowledgedAt: Date?)]>([])
        let traffic = BackgroundTraffic(pause: 0.15) { index in
            let key = "\(run):\(index)"
            let acknowledged = Self.set(redis, key)
            writes.withLock { $0.append((key, acknowledged ? Date() : nil)) }
        }
        defer { traffic.stop(within: 10) }

        usleep(500_000)
        let failoverAt = try setup.startFailover(by: setup.sentinels[0])
        let (promoted, announcedAt) = try setup.waitForAnnouncement(by: setup.sentinels[0], replacing: old)
        Thread.sleep(until: announcedAt.addingTimeInterval(Self.switchBound))
        XCTAssertEqual(try Self.unnamedClients(of: old), 0, "the connections to the old primary (the idle loop's too) are closed, though it is still a primary")
        XCTAssertThrowsError(try subscription.next(waitingMs: 0), "the subscription there is closed too (its reader subscribes again)")
        XCTAssertEqual(Self.subscribe(redis, run)?.address.port, promoted.port, "subscribing again reaches the new primary")
        // Past the sentinels' demotion of the old primary, which drops what it alone took.
        while Date() < failoverAt.addingTimeInterval(12) { usleep(100_000) }
        XCTAssertTrue(traffic.stop(within: 10))
        try setup.waitUntilSettled()

        let kept = Set(try promoted.query("KEYS", "\(run):*").split(whereSeparator: \.isNewline).map(String.init))
        let all = writes.withLock { $0 }
        let lost = all.compactMap { write in write.acknowledgedAt.flatMap { kept.contains(write.key) ? nil : $0 } }
        let window = lost.map { $0.timeIntervalSince(announcedAt) }.max() ?? 0
        print("planned failover: sentinel named \(promoted.address) \(String(format: "%.2f", announcedAt.timeIntervalSince(failoverAt))) s "
              + "after the command; \(lost.count) acknowledged writes lost, the last \(String(format: "%.2f", window)) s after that")
        let late = lost.filter { $0 > announcedAt.addingTimeInterval(Self.switchBound) }
        XCTAssertEqual(late.count, 0, "\(late.count) writes acknowledged by the old primary more than \(Self.switchBound) s after "
                       + "the sentinels named the new one are lost (the last \(String(format: "%.2f", window)) s after)")
        let afterSwitch = all.filter { ($0.acknowledgedAt ?? .distantPast) > announcedAt.addingTimeInterval(Self.switchBound) }
        XCTAssertGreaterThan(afterSwitch.count, 30, "writes kept being acknowledged, on the new primary")
        XCTAssertTrue(kept.contains("\(run):first"), "a write made before the failover was replicated and kept; "
                      + "acknowledged and lost at \(lost.map { String(format: "%.2f", $0.timeIntervalSince(failoverAt)) }) s after the "
                      + "failover command\n\(setup.diagnostics())")
    }
}
