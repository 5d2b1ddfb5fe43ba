import EventLoop
import Foundation
import RedisClient
import TestSupport
import XCTest

/// The Redis client on an event loop against a real redis-server: pipelining, login, timeouts, reconnection.
final class RedisClientSingleServerTests: XCTestCase {
    private var loop: EventLoop!

    override func setUpWithError() throws {
        loop = try EventLoop(name: "redis-test")
        loop.start()
    }

    override func tearDown() {
        loop.stop()
    }

    /// Runs `body` as a task on the loop and waits for it: a hang of the client fails the test (TestSupport).
    private func onLoop<T: Sendable>(_ body: @escaping @Sendable () async -> T) throws -> T {
        try loop.waitForTask(timeout: 10, body)
    }

    private func client(_ server: RedisTestServer, password: String? = nil, database: Int = 0, timeoutMs: Int = 500,
                        connections: Int = 2, reconnectPauseMs: Int? = nil) -> Unchecked<Redis> {
        var options = RedisOptions(topology: .single(RedisAddress(host: "127.0.0.1", port: server.port)), password: password,
                                   database: database, timeoutMs: timeoutMs, connectionsPerNode: connections)
        if let reconnectPauseMs { options.reconnectPauseMs = reconnectPauseMs }
        return Unchecked(Redis(options: options))
    }

    private static func bytes(_ words: String...) -> [[UInt8]] { words.map { Array($0.utf8) } }

    /// The error a command ends with, nil when it got a reply.
    private static func failure(_ redis: Unchecked<Redis>, _ words: String...) async -> RedisClientError? {
        do throws(RedisClientError) {
            _ = try await redis.value.command(words.map { Array($0.utf8) })
            return nil
        } catch {
            return error
        }
    }

    func testManyConcurrentCommandsGetTheirOwnRepliesInOrder() throws {
        let server = try RedisTestServer()
        defer { server.stop() }
        let redis = client(server)
        let loop = Unchecked(self.loop!)
        let replies = try onLoop { () -> [RedisReply] in
            await withTaskGroup(of: (Int, RedisReply).self) { group in
                for index in 0..<500 {
                    group.addTask(executorPreference: loop.value) {
                        let reply = try? await redis.value.command(Self.bytes("SET", "k\(index)", "v\(index)"))
                        _ = reply
                        return (index, (try? await redis.value.command(Self.bytes("GET", "k\(index)"))) ?? .null)
                    }
                }
                var collected = [RedisReply](repeating: .null, count: 500)
                for await (index, reply) in group { collected[index] = reply }
                return collected
            }
        }
        XCTAssertEqual(replies, (0..<500).map { .string(Array("v\($0)".utf8)) })
    }

    /// Commands issued in one loop iteration leave in one write: Redis reads them in a go (its
    /// total_reads_processed), not one read per command, and each still gets its own reply.
    func testCommandsOfOneLoopIterationLeaveInOneWrite() throws {
        let server = try RedisTestServer()
        defer { server.stop() }
        let redis = client(server, connections: 4)
        let loop = Unchecked(self.loop!)
        for _ in 0..<4 { XCTAssertEqual(try onLoop { try? await redis.value.command(Self.bytes("PING")) }, .status("PONG")) }
        let before = try onLoop { await Self.readsProcessed(redis) }
        let accepted = try onLoop { () -> Int in
            await withTaskGroup(of: Bool.self) { group in
                for index in 0..<200 {
                    group.addTask(executorPreference: loop.value) {
                        (try? await redis.value.command(Self.bytes("SET", "k\(index)", "v\(index)"))) == .status("OK")
                    }
                }
                var accepted = 0
                for await ok in group where ok { accepted += 1 }
                return accepted
            }
        }
        let after = try onLoop { await Self.readsProcessed(redis) }
        XCTAssertEqual(accepted, 200)
        let reads = try XCTUnwrap(after) - XCTUnwrap(before)
        XCTAssertLessThanOrEqual(reads, 6, "200 commands of one iteration took \(reads) reads on Redis' side")
        XCTAssertEqual(try onLoop { try? await redis.value.command(Self.bytes("GET", "k199")) }, .string(Array("v199".utf8)))
    }

    /// `total_reads_processed` of INFO stats.
    private static func readsProcessed(_ redis: Unchecked<Redis>) async -> Int? {
        guard case .string(let info)? = try? await redis.value.command(bytes("INFO", "stats")) else { return nil }
        let line = String(decoding: info, as: UTF8.self).split(whereSeparator: \.isNewline).first { $0.hasPrefix("total_reads_processed:") }
        return line.flatMap { Int($0.dropFirst("total_reads_processed:".count)) }
    }

    /// Sentinels that ask for a password of their own (`requirepass` in sentinel.conf) are logged in to with
    /// the sentinel login, not the data servers'; without it the error names what the sentinel said.
    func testSentinelsWithAPasswordOfTheirOwn() throws {
        let setup = try RedisTestGuardedSentinel(password: "watch-secret")
        defer { setup.stop() }
        func client(sentinelPassword: String?) -> Unchecked<Redis> {
            let topology = RedisOptions.Topology.sentinel(sentinels: [RedisAddress(host: "127.0.0.1", port: setup.sentinel.port)],
                                                          masterName: RedisTestSentinel.masterName)
            return Unchecked(Redis(options: RedisOptions(topology: topology, timeoutMs: 1000, sentinelPassword: sentinelPassword)))
        }
        let loggedIn = client(sentinelPassword: "watch-secret")
        let reply = try onLoop { () -> RedisReply? in
            _ = try? await loggedIn.value.command(Self.bytes("SET", "guarded", "yes"))
            return try? await loggedIn.value.command(Self.bytes("GET", "guarded"))
        }
        XCTAssertEqual(reply, .string(Array("yes".utf8)))
        let anonymous = client(sentinelPassword: nil), guessing = client(sentinelPassword: "guess")
        let refused = try onLoop { await Self.failure(anonymous, "PING") }
        XCTAssertTrue(refused?.message.contains("NOAUTH") == true, "\(String(describing: refused))")
        let wrong = try onLoop { await Self.failure(guessing, "PING") }
        XCTAssertNotNil(wrong)
        XCTAssertFalse(wrong?.message.contains("guess") ?? true, "the password is never in an error")
    }

    func testLogsInAndSelectsTheDatabase() throws {
        let server = try RedisTestServer(password: "s3cret")
        defer { server.stop() }
        let good = client(server, password: "s3cret", database: 3)
        let reply = try onLoop { () -> RedisReply? in
            _ = try? await good.value.command(Self.bytes("SET", "where", "db3"))
            return try? await good.value.command(Self.bytes("CLIENT", "INFO"))
        }
        guard case .string(let info)? = reply else { return XCTFail("no CLIENT INFO: \(String(describing: reply))") }
        XCTAssertTrue(String(decoding: info, as: UTF8.self).contains("db=3"))
        let bad = client(server, password: "wrong")
        let refused = try onLoop { await Self.failure(bad, "PING") }
        guard case .unreachable(let message)? = refused else { return XCTFail("a wrong password must fail the command") }
        XCTAssertTrue(message.contains("AUTH"), message)
        XCTAssertFalse(message.contains("wrong"), "the password is never in an error")
    }

    func testAServerThatStopsAnsweringTimesOutAndTheClientRecovers() throws {
        let server = try RedisTestServer()
        defer { server.stop() }
        // A 2 s pause: the command right after the timeout falls inside it even on a loaded machine.
        let redis = client(server, timeoutMs: 300, connections: 1, reconnectPauseMs: 2000)
        XCTAssertEqual(try onLoop { try? await redis.value.command(Self.bytes("PING")) }, .status("PONG"))
        server.pause()
        let started = Date()
        let failed = try onLoop { await Self.failure(redis, "PING") }
        server.resume()
        guard case .timeout? = failed else { return XCTFail("expected a timeout, got \(String(describing: failed))") }
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
        guard case .unreachable? = try onLoop({ await Self.failure(redis, "PING") }) else {
            return XCTFail("right after a timeout the client pauses instead of reconnecting at once")
        }
        usleep(useconds_t(2_000_000 + 50_000))  // the reconnect pause
        XCTAssertEqual(try onLoop { try? await redis.value.command(Self.bytes("PING")) }, .status("PONG"), "a new connection")
    }

    func testARestartedServerIsReconnectedAndARefusedOneIsUnavailable() throws {
        let server = try RedisTestServer()
        defer { server.stop() }
        let redis = client(server, connections: 1)
        XCTAssertEqual(try onLoop { try? await redis.value.command(Self.bytes("PING")) }, .status("PONG"))
        try server.restart()
        // The first command may meet the dead connection; the next one opens a new one.
        _ = try onLoop { try? await redis.value.command(Self.bytes("PING")) }
        XCTAssertEqual(try onLoop { try? await redis.value.command(Self.bytes("PING")) }, .status("PONG"))
        server.stop()
        let refused = try onLoop { await Self.failure(redis, "PING") }
        guard case .unreachable? = refused else { return XCTFail("expected unreachable (not sent), got \(String(describing: refused))") }
    }
}
