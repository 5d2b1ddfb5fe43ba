import RedisClient
import EventLoop
import AttestStore
import Gateway
import XCTest

/// Parsing of the Redis URL from the configuration.
final class StoreTestsEndpoint: XCTestCase {
    func parse(_ url: String) throws -> RedisEndpoint { try RedisEndpoint.parse(url: url) }

    func testTCPForms() throws {
        XCTAssertEqual(try parse("redis://localhost"), RedisEndpoint(address: .tcp(host: "localhost", port: 6379)))
        XCTAssertEqual(try parse("redis://10.0.0.5:6380/"), RedisEndpoint(address: .tcp(host: "10.0.0.5", port: 6380)))
        XCTAssertEqual(try parse("redis://:pw@redis:6379/2"),
                       RedisEndpoint(address: .tcp(host: "redis", port: 6379), password: "pw", database: 2))
        XCTAssertEqual(try parse("redis://gateway:p%40ss:word@redis"),
                       RedisEndpoint(address: .tcp(host: "redis", port: 6379), username: "gateway", password: "p@ss:word"))
        XCTAssertEqual(try parse("redis://secret@[::1]:7000/1"),
                       RedisEndpoint(address: .tcp(host: "::1", port: 7000), password: "secret", database: 1))
    }

    func testUnixForms() throws {
        XCTAssertEqual(try parse("unix:///run/redis/redis.sock"), RedisEndpoint(address: .unix(path: "/run/redis/redis.sock")))
        XCTAssertEqual(try parse("unix://:pw@/tmp/r.sock?db=4"),
                       RedisEndpoint(address: .unix(path: "/tmp/r.sock"), password: "pw", database: 4))
    }

    func testRedactedFormHidesThePassword() throws {
        let endpoint = try parse("redis://user:hunter2@redis:6379/1")
        XCTAssertEqual(endpoint.redacted, "redis://user:***@redis:6379/1")
        XCTAssertEqual(try parse("redis://[::1]").redacted, "redis://[::1]:6379/0")
    }

    func testMalformedURLsAreTypedErrors() {
        let bad = ["", "localhost:6379", "http://redis", "rediss://redis", "redis://", "redis://:6379",
                   "redis://redis:0", "redis://redis:70000", "redis://redis:port", "redis://redis/-1",
                   "redis://redis/db", "redis://[::1", "redis://[::1]x", "unix://", "unix:///",
                   "unix://host/path", "unix:///tmp/r.sock?database=1", "redis://:%zz@redis"]
        for url in bad {
            XCTAssertThrowsError(try parse(url), url) { error in
                XCTAssertEqual((error as? StoreError)?.reasonCode, "store_invalid_argument", url)
            }
        }
    }
}
