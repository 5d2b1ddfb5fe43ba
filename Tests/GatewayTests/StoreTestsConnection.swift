import RedisClient
import EventLoop
import AttestStore
import Foundation
import Gateway
import TestSupport
import XCTest

/// The Redis client from threads that may block, against a real server: binary-safe arguments, every reply
/// type, login and database.
final class StoreTestsConnection: XCTestCase {
    var fixture: StoreFixture!

    override func setUpWithError() throws { fixture = try StoreFixture() }
    override func tearDown() { fixture = nil }

    func testArgumentsAndRepliesAreBinarySafe() throws {
        let connection = fixture.connection()
        let key = Array("\(fixture.prefix):binary\0key".utf8)
        let value: [UInt8] = [0, 0x0D, 0x0A, 0xFF, 0, 0x24, 0x2A] + StoreFixture.randomBytes(100_000)
        XCTAssertEqual(try connection.command([Array("SET".utf8), key, value]), .status("OK"))
        XCTAssertEqual(try connection.command([Array("GET".utf8), key]), .string(value))
        XCTAssertEqual(try connection.command([Array("SET".utf8), key, []]), .status("OK"))
        XCTAssertEqual(try connection.command([Array("GET".utf8), key]), .string([]))
    }

    func testEveryReplyTypeIsMapped() throws {
        let connection = fixture.connection()
        let list = "\(fixture.prefix):list"
        XCTAssertEqual(try connection.command("PING"), .status("PONG"))
        XCTAssertEqual(try connection.command("RPUSH", list, "a", "b"), .integer(2))
        XCTAssertEqual(try connection.command("LRANGE", list, "0", "-1"), .array([.string(Array("a".utf8)), .string(Array("b".utf8))]))
        XCTAssertEqual(try connection.command("GET", "\(fixture.prefix):missing"), .null)
        guard case .error(let message) = try connection.command("NOSUCHCOMMAND") else { return XCTFail() }
        XCTAssertTrue(message.hasPrefix("ERR"), message)
        XCTAssertEqual(try connection.command("PING"), .status("PONG"), "an error reply leaves the connection usable")
    }

    func testPasswordAndDatabase() throws {
        let server = try RedisTestServer(password: "s3cret/pass")
        var options = server.options()
        options.database = 3
        let inDatabase3 = BlockingRedis(options: options)
        XCTAssertEqual(try inDatabase3.command("SET", "where", "db3"), .status("OK"))
        XCTAssertEqual(try BlockingRedis(options: server.options()).command("GET", "where"), .null)
        XCTAssertEqual(try inDatabase3.command("GET", "where"), .string(Array("db3".utf8)))

        options.password = "wrong"
        let store = try AttestStore(redis: Redis(options: options))
        XCTAssertThrowsError(try store.loadKey(keyId: [1, 2, 3])) { error in
            XCTAssertEqual((error as? StoreError)?.reasonCode, "store_unavailable")
            XCTAssertTrue("\(error)".contains("AUTH"), "\(error)")
            XCTAssertFalse("\(error)".contains("wrong"), "the password stays out of messages")
        }
    }
}
