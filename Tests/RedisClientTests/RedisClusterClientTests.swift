import EventLoop
import Foundation
import RedisClient
import TestSupport
import XCTest

/// The Cluster client's redirects against a real Cluster: ASK while a slot migrates (ASKING on the same
/// connection), MOVED once it moved (and the map updated, so the old owner is not asked again).
final class RedisClusterClientTests: XCTestCase {
    private func command(_ redis: Redis, _ words: String...) throws -> RedisReply {
        let arguments = words.map { Array($0.utf8) }
        let key = arguments.dropFirst().first
        let outcome = waitFor(timeoutMs: 5000) { () async -> Unchecked<Result<RedisReply, RedisClientError>> in
            do throws(RedisClientError) {
                return Unchecked(.success(try await redis.command(arguments, key: key)))
            } catch {
                return Unchecked(.failure(error))
            }
        }
        return try XCTUnwrap(outcome).value.get()
    }

    private func movedCount(_ node: RedisNode) throws -> Int {
        let line = try node.info("errorstats")["errorstat_MOVED"] ?? "count=0"
        return Int(line.split(separator: "=").last ?? "0") ?? 0
    }

    func testAskDuringAMigrationThenMovedOnceAfterIt() throws {
        let cluster = try RedisTestCluster.shared()
        try cluster.waitUntilHealthy()
        let redis = Redis(options: RedisOptions(topology: .cluster(seeds: [RedisAddress(host: "127.0.0.1", port: cluster.nodes[0].port)]),
                                                timeoutMs: 1000))
        let tag = "{migrate-\(UUID().uuidString)}"
        let slot = try cluster.slot(ofKey: tag)
        XCTAssertEqual(try command(redis, "SET", "\(tag):a", "1"), .status("OK"))
        let source = try cluster.owner(ofSlot: slot)
        let target = try XCTUnwrap(try cluster.primaries().first { $0 !== source })
        let migration = try cluster.beginMigration(ofSlot: slot, to: target)
        var finished = false
        defer { if !finished { try? cluster.finishMigration(migration) } }

        XCTAssertEqual(try command(redis, "GET", "\(tag):a"), .string(Array("1".utf8)), "still on the source")
        XCTAssertEqual(try command(redis, "SET", "\(tag):b", "2"), .status("OK"), "a new key: ASK, created on the target")
        XCTAssertEqual(try target.query("DBSIZE").isEmpty, false)
        try cluster.moveKeys(of: migration)
        XCTAssertEqual(try command(redis, "GET", "\(tag):a"), .string(Array("1".utf8)), "moved: ASK, read from the target")
        XCTAssertEqual(try command(redis, "GET", "\(tag):b"), .string(Array("2".utf8)))

        try cluster.finishMigration(migration)
        finished = true
        let before = try movedCount(source)
        for _ in 0..<10 { XCTAssertEqual(try command(redis, "GET", "\(tag):a"), .string(Array("1".utf8))) }
        XCTAssertEqual(try movedCount(source) - before, 1, "one MOVED, then the map sends the slot's commands to the target")
    }

    func testNoReachableSeedIsUnavailableWithTheReason() throws {
        let port = TestPaths.freePort()
        let redis = Redis(options: RedisOptions(topology: .cluster(seeds: [RedisAddress(host: "127.0.0.1", port: port)]), timeoutMs: 300))
        XCTAssertThrowsError(try command(redis, "GET", "k")) { error in
            guard case .unavailable(let message)? = error as? RedisClientError else { return XCTFail("\(error)") }
            XCTAssertTrue(message.contains("CLUSTER SLOTS") || message.contains("127.0.0.1:\(port)"), message)
        }
    }
}
