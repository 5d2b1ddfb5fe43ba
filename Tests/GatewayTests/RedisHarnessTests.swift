import Foundation
import TestSupport
import XCTest

/// The real Redis Cluster, Sentinel and TLS setups in Tests/Support work as the Cluster, Sentinel and TLS
/// client tests need them: these tests check the harness itself, with redis-cli as the client.
final class RedisClusterHarnessTests: XCTestCase {
    private var cluster: RedisTestCluster!

    override class func tearDown() { RedisTestCluster.stopShared() }

    override func setUpWithError() throws {
        cluster = try RedisTestCluster.shared()
        try cluster.waitUntilHealthy()
    }

    func testThreePrimariesAndThreeReplicasCoverEverySlot() throws {
        let nodes = try cluster.clusterNodes()
        let primaries = nodes.filter(\.isPrimary)
        XCTAssertEqual(primaries.count, 3)
        XCTAssertEqual(nodes.filter { !$0.isPrimary }.count, 3)
        XCTAssertEqual(Set(nodes.compactMap(\.primaryId)), Set(primaries.map(\.id)), "each primary has a replica")
        var covered = IndexSet()
        for range in primaries.flatMap(\.slots) { covered.insert(integersIn: range) }
        XCTAssertEqual(covered.count, RedisTestCluster.slotCount)
        XCTAssertEqual(try cluster.nodes[0].clusterInfo()["cluster_slots_assigned"], "16384")
        XCTAssertEqual(try cluster.primaries().count, 3)
    }

    func testAKeyLivesOnItsSlotsPrimaryAndOthersRedirect() throws {
        let key = "aag:{harness-\(UUID().uuidString)}:k"
        let slot = try cluster.slot(ofKey: key)
        let owner = try cluster.owner(ofSlot: slot)
        XCTAssertEqual(try owner.query("SET", key, "v"), "OK")
        let other = try XCTUnwrap(cluster.primaries().first { $0 !== owner })
        XCTAssertEqual(try other.cli(["GET", key]).output.trimmingCharacters(in: .whitespacesAndNewlines),
                       "MOVED \(slot) \(owner.address)")
        let crossSlot = try owner.cli(["MGET", key, "aag:{another-tag}:k"]).output
        XCTAssertTrue(crossSlot.contains("CROSSSLOT"), crossSlot)
    }

    func testAMigratingSlotAnswersAskThenMovedAndRedisCliReshardMovesKeys() throws {
        let key = "aag:{migrate-\(UUID().uuidString)}:k"
        let slot = try cluster.slot(ofKey: key)
        let source = try cluster.owner(ofSlot: slot)
        XCTAssertEqual(try source.query("SET", key, "before"), "OK")
        let target = try XCTUnwrap(cluster.primaries().first { $0 !== source })
        let migration = try cluster.beginMigration(ofSlot: slot, to: target)
        XCTAssertEqual(try source.query("GET", key), "before", "keys not moved yet are still served by the source")
        // This key, and any an earlier test left in the slot of the shared Cluster.
        XCTAssertGreaterThanOrEqual(try cluster.moveKeys(of: migration), 1)
        XCTAssertEqual(try source.cli(["GET", key]).output.trimmingCharacters(in: .whitespacesAndNewlines), "ASK \(slot) \(target.address)")
        XCTAssertEqual(try target.cli(["GET", key]).output.trimmingCharacters(in: .whitespacesAndNewlines), "MOVED \(slot) \(source.address)",
                       "without ASKING the importing node redirects back")
        try cluster.finishMigration(migration)
        XCTAssertTrue(try cluster.owner(ofSlot: slot) === target)
        XCTAssertEqual(try target.query("GET", key), "before")
        XCTAssertEqual(try source.cli(["GET", key]).output.trimmingCharacters(in: .whitespacesAndNewlines), "MOVED \(slot) \(target.address)")

        // redis-cli --cluster reshard moves slots with their keys and leaves the cluster healthy. Counted from
        // the source's share before (the shared Cluster may have been resharded by an earlier test).
        let slotsOfSource = { try self.cluster.clusterNodes().first { $0.address == source.address }?.slots.flatMap { Array($0) }.count ?? 0 }
        let before = try slotsOfSource()
        try cluster.reshard(count: 20, from: target, to: source)
        XCTAssertTrue(try cluster.isHealthy())
        XCTAssertEqual(try slotsOfSource(), before + 20, "20 slots moved to the source")
    }

    func testACrashedPrimaryIsReplacedByItsReplicaAndRejoinsAsReplica() throws {
        let key = "aag:{failover-\(UUID().uuidString)}:k"
        let slot = try cluster.slot(ofKey: key)
        let owner = try cluster.owner(ofSlot: slot)
        XCTAssertEqual(try owner.query("SET", key, "kept"), "OK")
        try owner.waitForReplicas()
        let crashed = try cluster.crashPrimary(servingSlot: slot)
        XCTAssertFalse(crashed.isRunning)
        let started = Date()
        let promoted = try cluster.waitForPromotion(ofSlot: slot, replacing: crashed)
        XCTAssertLessThan(Date().timeIntervalSince(started), 15)
        XCTAssertEqual(try promoted.query("GET", key), "kept")
        try cluster.restore()
        XCTAssertTrue(crashed.isRunning)
        XCTAssertEqual(try crashed.info("replication")["role"], "slave", "the old primary comes back as a replica")
        XCTAssertEqual(try cluster.primaries().count, 3)
    }
}

final class RedisSentinelHarnessTests: XCTestCase {
    override class func tearDown() { RedisTestSentinel.stopShared() }

    func testSentinelsReportThePrimaryAndFollowAFailover() throws {
        let setup = try RedisTestSentinel.shared()
        try setup.waitUntilSettled()
        let old = try setup.primary()
        for sentinel in setup.sentinels {
            XCTAssertEqual(try setup.reportedPrimary(by: sentinel), old.address)
        }
        let key = "aag:{sentinel-\(UUID().uuidString)}:k"
        XCTAssertEqual(try old.query("SET", key, "kept"), "OK")
        try old.waitForReplicas()
        let replica = try XCTUnwrap(setup.servers.first { $0 !== old })
        XCTAssertEqual(try replica.info("replication")["role"], "slave")

        try setup.crashPrimary()
        let promoted = try setup.waitForFailover(from: old)
        XCTAssertTrue(promoted === replica)
        for sentinel in setup.sentinels {
            XCTAssertEqual(try setup.reportedPrimary(by: sentinel), replica.address)
        }
        XCTAssertEqual(try promoted.query("GET", key), "kept")
        XCTAssertEqual(try promoted.query("SET", key, "written after the failover"), "OK")

        try setup.restore()
        XCTAssertEqual(try old.info("replication")["role"], "slave", "the old primary returns as a replica of the new one")
        XCTAssertTrue(try setup.primary() === promoted)
    }

    /// The TLS setup has no plain port and wants the client certificate, so a client that reached it spoke TLS
    /// with that certificate; the sentinels settled, so they reached the servers and each other over TLS too.
    func testTLSSentinelsAndServersSpeakOnlyTLS() throws {
        let setup = try RedisTestSentinel(tls: true)
        defer { setup.stop() }
        let certificates = try XCTUnwrap(setup.certificates)
        let primary = try setup.primary()
        XCTAssertEqual(try setup.reportedPrimary(by: setup.sentinels[0]), primary.address)
        for node in [primary, setup.sentinels[0]] {
            let address = ["-h", "127.0.0.1", "-p", String(node.port)]
            let plain = try Command.run("redis-cli", address + ["PING"], timeout: 10)
            XCTAssertFalse(plain.output.contains("PONG"), "\(node.address) speaks TLS only: \(plain.output)")
            let anonymous = try Command.run("redis-cli", address + ["--tls", "--cacert", certificates.caFile, "PING"], timeout: 10)
            XCTAssertFalse(anonymous.output.contains("PONG"), "\(node.address) wants a client certificate: \(anonymous.output)")
            XCTAssertEqual(try node.query("PING"), "PONG")
        }
    }
}

final class RedisTLSHarnessTests: XCTestCase {
    func testTheTLSServerAnswersWithTheTestCAAndRefusesAWrongCAAndPlainTCP() throws {
        let server = try RedisTLSTestServer(password: "tls-pass-\(UUID().uuidString.prefix(8))")
        let good = try server.ping(caFile: server.certificates.caFile)
        XCTAssertEqual(good.output.trimmingCharacters(in: .whitespacesAndNewlines), "PONG")
        XCTAssertEqual(try server.ping(caFile: server.certificates.caFile, clientCertificate: false, serverName: "localhost")
            .output.trimmingCharacters(in: .whitespacesAndNewlines), "PONG", "client certificates are optional by default")

        let wrong = try server.ping(caFile: server.certificates.wrongCAFile)
        XCTAssertFalse(wrong.output.contains("PONG"))
        XCTAssertTrue(wrong.output.contains("certificate verify failed"), wrong.output)

        let plain = try Command.run("redis-cli", ["-h", "127.0.0.1", "-p", String(server.port), "PING"], timeout: 10)
        XCTAssertFalse(plain.output.contains("PONG"), "the server speaks TLS only: \(plain.output)")
    }

    func testAServerRequiringClientCertificatesRefusesAClientWithout() throws {
        let server = try RedisTLSTestServer(requireClientCertificate: true)
        XCTAssertEqual(try server.ping(caFile: server.certificates.caFile).output.trimmingCharacters(in: .whitespacesAndNewlines), "PONG")
        XCTAssertFalse(try server.ping(caFile: server.certificates.caFile, clientCertificate: false).output.contains("PONG"))
    }
}
