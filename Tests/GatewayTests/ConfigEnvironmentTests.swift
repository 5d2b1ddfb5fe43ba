import Foundation
@testable import Gateway
import XCTest

/// `${NAME}` in configuration values.
final class ConfigEnvironmentTests: XCTestCase {
    private func yaml(redis: String) -> String {
        """
        redis:
        \(redis)
        app_attest: { apps: ["ABCDE12345.com.example.app"] }
        upstreams: { api: { url: "${UPSTREAM_URL}" } }
        routes: [{ path_prefix: "/", upstream: api, policy: pass }]
        """
    }

    private func issues(_ text: String, _ environment: [String: String]) -> [String] {
        do {
            _ = try GatewayConfig.parse(yaml: text, environment: environment)
            XCTFail("expected the configuration to be refused")
            return []
        } catch {
            return error.issues.map(\.description)
        }
    }

    func testVariablesAreExpandedInValuesOfEveryTypeAndNotInKeys() throws {
        let config = try GatewayConfig.parse(yaml: yaml(redis: """
              url: "redis://${REDIS_HOST}:6380/${REDIS_DB}"
              pool_size: ${POOL}
            """), environment: ["REDIS_HOST": "10.1.2.3", "REDIS_DB": "4", "POOL": "12", "PREFIX": "a_b",
                                "UPSTREAM_URL": "http://127.0.0.1:9000"])
        XCTAssertEqual(config.redis.host, "10.1.2.3")
        XCTAssertEqual(config.redis.database, 4)
        XCTAssertEqual(config.redis.poolSize, 12, "a plain ${…} stays plain, so an integer key takes it")
        XCTAssertEqual(config.upstream(named: "api")?.port, 9000)
        // key_prefix refuses "$" and "{": the value shows what the expansion produced, unchanged "$x" and a literal "${".
        XCTAssertEqual(issues(yaml(redis: "  key_prefix: pre-${PREFIX}-$x-$${LITERAL}"), ["PREFIX": "a_b", "UPSTREAM_URL": "http://h"]),
                       [#"redis.key_prefix: expected 1-64 characters from A-Z a-z 0-9 _ . : -, got "pre-a_b-$x-${LITERAL}" (line 2)"#])
    }

    func testAnUnsetVariableIsNamedWithItsKeyPathAndLineAndNothingElseIsReported() {
        XCTAssertEqual(issues(yaml(redis: "  url: \"redis://:${REDIS_PASSWORD}@redis:6379/0\"\n  pool_size: ${POOL}"), [:]), [
            "redis.url: environment variable REDIS_PASSWORD is not set (${REDIS_PASSWORD}) (line 2)",
            "redis.pool_size: environment variable POOL is not set (${POOL}) (line 3)",
            "upstreams.api.url: environment variable UPSTREAM_URL is not set (${UPSTREAM_URL}) (line 5)",
        ])
        do {
            _ = try GatewayConfig.parse(yaml: yaml(redis: "  pool_size: ${POOL}"), environment: ["UPSTREAM_URL": "http://h"])
        } catch {
            XCTAssertEqual(error.issues.map(\.reasonCode), ["undefined_variable"])
        }
    }

    func testMalformedReferencesAreRefused() {
        for bad in ["${}", "${1ABC}", "${A-B}", "${OPEN", "${ A}"] {
            XCTAssertEqual(issues(yaml(redis: "  key_prefix: \"x\(bad)\""), ["UPSTREAM_URL": "http://h", "A": "1", "OPEN": "1"]),
                           ["redis.key_prefix: malformed ${…}: write ${NAME} with NAME of A-Z a-z 0-9 _ (not starting with a digit), "
                            + "or $${ for a literal ${ (line 2)"], bad)
        }
    }

    func testAnExpandedValueNeverAppearsInAMessage() {
        let secret = "hunter2-very-secret"
        let found = issues(yaml(redis: "  url: \"http://:${REDIS_PASSWORD}@redis:6379/0\"\n  key_prefix: \"${REDIS_PASSWORD}!\""),
                           ["REDIS_PASSWORD": secret, "UPSTREAM_URL": "http://h"])
        XCTAssertEqual(found.count, 2, "\(found)")
        XCTAssertFalse(found.joined().contains(secret), "\(found)")
        XCTAssertTrue(found.joined().contains("${REDIS_PASSWORD}"), "\(found)")
    }

    func testAnExpandedValueCannotAddStructure() {
        // Expanded after parsing: the text is one value, never a new key (which would be unknown_key). The
        // message shows the reference, not the value.
        XCTAssertEqual(issues(yaml(redis: "  key_prefix: ${PREFIX}"), ["PREFIX": "a\nunknown: 1", "UPSTREAM_URL": "http://h"]),
                       ["redis.key_prefix: expected 1-64 characters from A-Z a-z 0-9 _ . : -, got \"${PREFIX}\" (line 2)"])
    }
}
