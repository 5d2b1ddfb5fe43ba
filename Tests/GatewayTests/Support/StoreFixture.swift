import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation
import Gateway
import Synchronization
import TestSupport
import XCTest

/// The Redis a store test talks to: the runner's (TEST_REDIS_URL) when set, else a server of its own.
/// Every fixture gets its own key prefix, so tests sharing one Redis never see each other's keys.
final class StoreFixture {
    let server: RedisTestServer?
    let options: RedisOptions
    /// The Redis URL a gateway config would name.
    let url: String
    let store: AttestStore
    let prefix = "test-\(UUID().uuidString.prefix(13))"
    private let direct: BlockingRedis

    init(timeoutMs: Int = 1000) throws {
        if let url = ProcessInfo.processInfo.environment["TEST_REDIS_URL"], !url.isEmpty {
            server = nil
            options = try BlockingRedis.options(url: url, timeoutMs: timeoutMs)
            self.url = url
        } else {
            let own = try RedisTestServer()
            server = own
            options = own.options(timeoutMs: timeoutMs)
            url = "redis://127.0.0.1:\(own.port)/0"
        }
        store = try AttestStore(redis: Redis(options: options), keyPrefix: prefix)
        direct = BlockingRedis(options: options)
    }

    /// On a shared Redis, removes this fixture's keys (SCAN, never KEYS); a server of its own just stops.
    deinit {
        guard server == nil else { return }
        var cursor = "0"
        repeat {
            guard case .array(let page)? = try? direct.command("SCAN", cursor, "MATCH", "\(prefix):*", "COUNT", "1000"),
                  page.count == 2, case .string(let next) = page[0], case .array(let names) = page[1] else { return }
            for case .string(let name) in names { _ = try? direct.command([Array("DEL".utf8), name]) }
            cursor = String(decoding: next, as: UTF8.self)
        } while cursor != "0"
    }

    /// A client of its own for looking behind the store's back (TTL, SCRIPT FLUSH, raw keys).
    func connection() -> BlockingRedis { direct }

    /// A key record with a fresh random key id, as registration would store it.
    static func record(environment: AppAttestEnvironment = .production, counter: UInt32 = 0,
                       receipt: [UInt8] = Array("receipt".utf8)) -> KeyRecord {
        KeyRecord(keyId: randomBytes(32), environment: environment, appID: "TEAMID1234.com.example.app",
                  publicKeySPKI: randomBytes(91), counter: counter, receipt: receipt,
                  createdAt: Date(timeIntervalSince1970: 1_700_000_000))
    }

    static func randomBytes(_ count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8.random(in: .min ... .max) }
    }
}

/// Values gathered from several threads.
final class Collected<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])

    func append(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
}

/// Runs `body` on `count` threads released at the same moment and returns their results; fails the
/// test and returns what it has instead of hanging when they take longer than `timeout` seconds.
func onThreads<Value: Sendable>(_ count: Int, timeout: TimeInterval = 20,
                                _ body: @escaping @Sendable (Int) -> Value) -> [Value] {
    let results = Collected<Value>()
    let ready = DispatchSemaphore(value: 0)
    let go = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    for index in 0..<count {
        done.enter()
        Thread {
            ready.signal()
            go.wait()
            results.append(body(index))
            done.leave()
        }.start()
    }
    let deadline = DispatchTime.now() + timeout
    for _ in 0..<count where ready.wait(timeout: deadline) == .timedOut { XCTFail("threads did not start in time") }
    for _ in 0..<count { go.signal() }
    if done.wait(timeout: deadline) == .timedOut { XCTFail("threads still running after \(timeout) s") }
    return results.all
}

extension RedisTestServer {
    func options(timeoutMs: Int = 1000) -> RedisOptions {
        RedisOptions(topology: .single(RedisAddress(host: "127.0.0.1", port: port)), password: password, timeoutMs: timeoutMs)
    }
}

/// The Redis client from a test's thread: each command waited for (bounded).
struct BlockingRedis: Sendable {
    let redis: Redis

    init(options: RedisOptions) {
        redis = Redis(options: options)
    }

    /// `redis://[:password@]host:port[/db]`, as the test runner's TEST_REDIS_URL.
    static func options(url: String, timeoutMs: Int) throws -> RedisOptions {
        let parts = try XCTUnwrap(URLComponents(string: url))
        let database = Int(parts.path.dropFirst()) ?? 0
        return RedisOptions(topology: .single(RedisAddress(host: try XCTUnwrap(parts.host), port: parts.port ?? 6379)),
                            password: parts.password?.removingPercentEncoding, database: database, timeoutMs: timeoutMs)
    }

    func command(_ words: String...) throws -> RedisReply { try command(words.map { Array($0.utf8) }) }

    func command(_ arguments: [[UInt8]]) throws -> RedisReply {
        let redis = self.redis
        let outcome = waitFor(timeoutMs: redis.longestCommandMs) { () async -> Unchecked<Result<RedisReply, RedisClientError>> in
            do throws(RedisClientError) {
                return Unchecked(.success(try await redis.command(arguments)))
            } catch {
                return Unchecked(.failure(error))
            }
        }
        return try XCTUnwrap(outcome, "no answer in time").value.get()
    }
}

/// A test case with a fresh store and one registered key record (production) per test.
class RegisteredKeyTestCase: XCTestCase {
    var fixture: StoreFixture!
    var store: AttestStore { fixture.store }
    var record: KeyRecord!

    override func setUpWithError() throws {
        fixture = try StoreFixture()
        record = StoreFixture.record()
        XCTAssertEqual(try store.register(record), .created)
    }

    override func tearDown() { fixture = nil }
}
