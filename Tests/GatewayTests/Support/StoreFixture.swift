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
    let endpoint: RedisEndpoint
    /// The Redis URL a gateway config would name.
    let url: String
    let pool: RedisPool
    let store: AttestStore
    let prefix = "test-\(UUID().uuidString.prefix(13))"

    init(poolSize: Int = 16, timeoutMs: Int = 1000) throws {
        if let url = ProcessInfo.processInfo.environment["TEST_REDIS_URL"], !url.isEmpty {
            server = nil
            endpoint = try RedisEndpoint.parse(url: url)
            self.url = url
        } else {
            let own = try RedisTestServer()
            server = own
            endpoint = own.endpoint
            url = "redis://127.0.0.1:\(own.port)/0"
        }
        pool = try RedisPool(endpoint: endpoint, size: poolSize, timeoutMs: timeoutMs)
        store = try AttestStore(pool: pool, keyPrefix: prefix)
    }

    /// On a shared Redis, removes this fixture's keys (SCAN, never KEYS); a server of its own just stops.
    deinit {
        guard server == nil, let connection = try? connection() else { return }
        var cursor = "0"
        repeat {
            guard case .array(let page)? = try? connection.command("SCAN", cursor, "MATCH", "\(prefix):*", "COUNT", "1000"),
                  page.count == 2, case .string(let next) = page[0], case .array(let names) = page[1] else { return }
            for case .string(let name) in names { _ = try? connection.command([Array("DEL".utf8), name]) }
            cursor = String(decoding: next, as: UTF8.self)
        } while cursor != "0"
    }

    /// A direct connection for looking behind the store's back (TTL, SCRIPT FLUSH, raw keys).
    func connection() throws -> RedisConnection {
        try RedisConnection(endpoint: endpoint, timeoutMs: 1000)
    }

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
    var endpoint: RedisEndpoint {
        RedisEndpoint(address: .tcp(host: "127.0.0.1", port: port), password: password)
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
