import RedisClient
import EventLoop
import AttestStore
import Foundation
import Gateway
import TestSupport
import XCTest

/// `RedisConnection` against a real server: binary-safe arguments, every reply type, login and database.
final class StoreTestsConnection: XCTestCase {
    var fixture: StoreFixture!

    override func setUpWithError() throws { fixture = try StoreFixture() }
    override func tearDown() { fixture = nil }

    func testArgumentsAndRepliesAreBinarySafe() throws {
        let connection = try fixture.connection()
        let key = Array("\(fixture.prefix):binary\0key".utf8)
        let value: [UInt8] = [0, 0x0D, 0x0A, 0xFF, 0, 0x24, 0x2A] + StoreFixture.randomBytes(100_000)
        XCTAssertEqual(try connection.command([Array("SET".utf8), key, value]), .status("OK"))
        XCTAssertEqual(try connection.command([Array("GET".utf8), key]), .string(value))
        XCTAssertEqual(try connection.command([Array("SET".utf8), key, []]), .status("OK"))
        XCTAssertEqual(try connection.command([Array("GET".utf8), key]), .string([]))
    }

    func testEveryReplyTypeIsMapped() throws {
        let connection = try fixture.connection()
        let list = "\(fixture.prefix):list"
        XCTAssertEqual(try connection.command("PING"), .status("PONG"))
        XCTAssertEqual(try connection.command("RPUSH", list, "a", "b"), .integer(2))
        XCTAssertEqual(try connection.command("LRANGE", list, "0", "-1"), .array([.string(Array("a".utf8)), .string(Array("b".utf8))]))
        XCTAssertEqual(try connection.command("GET", "\(fixture.prefix):missing"), .null)
        guard case .error(let message) = try connection.command("NOSUCHCOMMAND") else { return XCTFail() }
        XCTAssertTrue(message.hasPrefix("ERR"), message)
        XCTAssertFalse(connection.isBroken, "an error reply leaves the connection usable")
        XCTAssertEqual(try connection.command("PING"), .status("PONG"))
        XCTAssertThrowsError(try connection.command([]))
    }

    func testPasswordAndDatabaseFromTheURL() throws {
        let server = try RedisTestServer(password: "s3cret/pass", unixSocket: true)
        let url = "redis://:s3cret%2Fpass@127.0.0.1:\(server.port)/3"
        let inDatabase3 = try RedisConnection(endpoint: RedisEndpoint.parse(url: url), timeoutMs: 1000)
        XCTAssertEqual(try inDatabase3.command("SET", "where", "db3"), .status("OK"))

        let inDatabase0 = try RedisConnection(endpoint: server.endpoint, timeoutMs: 1000)
        XCTAssertEqual(try inDatabase0.command("GET", "where"), .null)

        let socket = try RedisEndpoint.parse(url: "unix://:s3cret%2Fpass@\(try XCTUnwrap(server.unixSocket))?db=3")
        XCTAssertEqual(try RedisConnection(endpoint: socket, timeoutMs: 1000).command("GET", "where"), .string(Array("db3".utf8)))

        let wrong = try RedisEndpoint.parse(url: "redis://:wrong@127.0.0.1:\(server.port)")
        XCTAssertThrowsError(try RedisConnection(endpoint: wrong, timeoutMs: 1000)) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_unavailable")
            XCTAssertFalse("\(error)".contains("wrong"), "the password stays out of messages")
        }
    }
}
