@testable import RedisClient
import TestSupport
import XCTest

/// The client's slot function against a real Cluster's CLUSTER KEYSLOT, and the redirects it understands.
final class ClusterSlotsTests: XCTestCase {
    func testTheSlotOfAKeyIsTheClusters() throws {
        let cluster = try RedisTestCluster.shared()
        let keys = ["foo", "{user1000}.following", "{user1000}.followers", "a{}b", "{}{x}", "x{y}z{w}", "été", "", "{", "}{abc}",
                    "aag:{AbC-_09}:production:key"] + (0..<40).map { _ in String(UInt64.random(in: .min ... .max), radix: 36) }
        for key in keys {
            XCTAssertEqual(ClusterSlots.slot(of: Array(key.utf8)), try cluster.slot(ofKey: key), key)
        }
    }

    func testRedirectsAreParsed() {
        XCTAssertEqual(ClusterSlots.redirect("MOVED 3999 127.0.0.1:6381"), .moved(slot: 3999, to: RedisAddress(host: "127.0.0.1", port: 6381)))
        XCTAssertEqual(ClusterSlots.redirect("ASK 3999 [::1]:7000"), .ask(RedisAddress(host: "::1", port: 7000)))
        XCTAssertEqual(ClusterSlots.redirect("MOVED 12 :7001"), .moved(slot: 12, to: RedisAddress(host: "", port: 7001)))
        XCTAssertEqual(ClusterSlots.redirect("TRYAGAIN Multiple keys request during rehashing of slot"), .tryAgain)
        for other in ["MOVED 16384 a:1", "MOVED x a:1", "ASK 1 nohost", "ERR unknown command", "MOVED 1 a:1 extra"] {
            XCTAssertNil(ClusterSlots.redirect(other), other)
        }
    }
}
