import AttestStore
import Foundation
@testable import Gateway
import TestSupport
import RedisClient
import XCTest

/// `redis:` beyond the URL: the password outside the YAML, and the Cluster, Sentinel and TLS keys.
final class RedisConfigTests: XCTestCase {
    private var directory = ""

    override func setUp() { directory = TestPaths.temporaryDirectory("redis-config") }

    private func yaml(_ redis: String) -> String {
        """
        redis:
        \(redis)
        app_attest: { apps: ["ABCDE12345.com.example.app"] }
        upstreams: { api: { url: "http://127.0.0.1:9000" } }
        routes: [{ path_prefix: "/", upstream: api, policy: pass }]
        """
    }

    private func config(_ redis: String, _ environment: [String: String] = [:]) throws -> RedisConfig {
        try GatewayConfig.parse(yaml: yaml(redis), baseDirectory: directory, environment: environment).redis
    }

    private func issues(_ redis: String, _ environment: [String: String] = [:]) -> [String] {
        do {
            _ = try GatewayConfig.parse(yaml: yaml(redis), baseDirectory: directory, environment: environment)
            XCTFail("expected the configuration to be refused")
            return []
        } catch {
            return error.issues.map(\.description)
        }
    }

    private func write(_ text: String, _ name: String) throws {
        try text.write(toFile: "\(directory)/\(name)", atomically: true, encoding: .utf8)
    }

    // MARK: - Secrets

    func testThePasswordComesFromAFileAnEnvironmentVariableOrTheURL() throws {
        try write("file-secret/with@odd%chars\n", "redis-password")
        let fromFile = try config("  url: \"redis://10.0.0.5:6380/2\"\n  username: gateway\n  password_file: redis-password")
        XCTAssertEqual(fromFile.password, "file-secret/with@odd%chars", "the final newline is not part of it")
        XCTAssertEqual(fromFile.username, "gateway")
        XCTAssertEqual(fromFile.passwordFile, "\(directory)/redis-password")
        let options = try fromFile.options()
        XCTAssertEqual(options.topology, .single(RedisAddress(host: "10.0.0.5", port: 6380)))
        XCTAssertEqual(options.username, "gateway")
        XCTAssertEqual(options.password, "file-secret/with@odd%chars")
        XCTAssertEqual(options.database, 2)
        XCTAssertEqual(fromFile.redacted, "redis://gateway:***@10.0.0.5:6380/2")
        XCTAssertFalse("\(fromFile)".contains("file-secret"), "\(fromFile)")

        let fromEnvironment = try config("  password: ${REDIS_PASSWORD}", ["REDIS_PASSWORD": "env:secret@/#"])
        XCTAssertEqual(try fromEnvironment.options().password, "env:secret@/#", "no percent-encoding needed outside the URL")
        XCTAssertNil(fromEnvironment.username)

        let fromURL = try config("  url: \"redis://app%40x:p%2Fw@127.0.0.1/0\"")
        XCTAssertEqual(fromURL.username, "app@x")
        XCTAssertEqual(fromURL.password, "p/w", "percent-decoded, as the client logs in with it")
    }

    func testSentinelsHaveALoginOfTheirOwn() throws {
        try write("sentinel-secret\n", "sentinel-password")
        let sentinels = "  sentinels: [\"s1:26379\"]\n  master_name: m\n  password: ${DATA}\n"
        let fromFile = try config(sentinels + "  sentinel_auth: { username: watcher, password_file: sentinel-password }", ["DATA": "data-secret"])
        let options = try fromFile.options()
        XCTAssertEqual(options.sentinelUsername, "watcher")
        XCTAssertEqual(options.sentinelPassword, "sentinel-secret")
        XCTAssertEqual(options.password, "data-secret", "the data servers keep their own")
        XCTAssertFalse("\(fromFile)".contains("secret"), "\(fromFile)")
        let fromEnvironment = try config(sentinels + "  sentinel_auth: { password: \"${S}\" }", ["DATA": "d", "S": "env-secret"])
        XCTAssertEqual(try fromEnvironment.options().sentinelPassword, "env-secret")
        XCTAssertNil(try config(sentinels, ["DATA": "d"]).options().sentinelPassword, "no login unless asked")

        XCTAssertEqual(issues("  sentinel_auth: { password: x }"), ["redis.sentinel_auth: sentinel_auth is only used with sentinels (line 2)"])
        XCTAssertEqual(issues(sentinels + "  sentinel_auth: {}", ["DATA": "d"]),
                       ["redis.sentinel_auth.password: sentinel_auth needs password or password_file (line 5)"])
        XCTAssertEqual(issues(sentinels + "  sentinel_auth: { password: a, password_file: sentinel-password }", ["DATA": "d"]),
                       ["redis.sentinel_auth: the password is set in password and password_file: keep one (line 5)"])
        let typo = issues(sentinels + "  sentinel_auth: { pasword: a }", ["DATA": "d"])
        XCTAssertTrue(typo.contains { $0.hasPrefix("redis.sentinel_auth.pasword") }, "\(typo)")
    }

    func testAPasswordSetTwiceOrBrokenIsRefusedWithoutShowingIt() throws {
        try write("from-the-file", "redis-password")
        let found = issues("  url: \"redis://:in-the-url@127.0.0.1/0\"\n  password_file: redis-password")
        XCTAssertEqual(found, ["redis: the password is set in url and password_file: keep one (line 2)"])
        XCTAssertEqual(issues("  password: ${P}\n  password_file: redis-password", ["P": "from-env-var"]),
                       ["redis: the password is set in password and password_file: keep one (line 2)"])
        XCTAssertEqual(issues("  url: \"redis://user:pw@127.0.0.1/0\"\n  username: other"),
                       ["redis.username: the username is also in url: keep one (line 3)"])
        XCTAssertEqual(issues("  username: gateway"), ["redis.username: username needs a password (password_file, password or the url) (line 2)"])
        XCTAssertEqual(issues("  password_file: missing-file"), ["redis.password_file: cannot read \(directory)/missing-file (line 2)"])
        try write("line one\nline two\n", "two-lines")
        XCTAssertEqual(issues("  password_file: two-lines"), ["redis.password_file: \(directory)/two-lines must hold the password on one line (line 2)"])
        try write("\n", "empty")
        XCTAssertEqual(issues("  password_file: empty"), ["redis.password_file: \(directory)/empty is empty (line 2)"])
        XCTAssertEqual(issues("  password: \"\""), ["redis.password: the password is empty (line 2)"])
        let leaked = issues("  url: \"http://:leak-me@127.0.0.1/0\"")
        XCTAssertEqual(leaked, [#"redis.url: scheme must be redis:// or rediss://, got "http://***@127.0.0.1/0" (line 2)"#])
    }

    func testThePasswordFileIsReadAgainOnEveryLoad() throws {
        try write("first", "redis-password")
        let yamlText = yaml("  password_file: redis-password")
        try yamlText.write(toFile: directory + "/gateway.yaml", atomically: true, encoding: .utf8)
        XCTAssertEqual(try GatewayConfig.load(path: directory + "/gateway.yaml").redis.password, "first")
        try write("second", "redis-password")
        let reloaded = try GatewayConfig.load(path: directory + "/gateway.yaml").redis
        XCTAssertEqual(reloaded.password, "second")
        XCTAssertNotEqual(reloaded, try config("  password_file: \(directory)/redis-password\n  pool_size: 31"),
                          "a changed password makes a changed redis section: reload opens a new pool")
    }

    // MARK: - Cluster, Sentinel, TLS

    func testClusterAndSentinelKeysAreRead() throws {
        let cluster = try config("  cluster: [\"10.0.0.1:7000\", \"redis-b:7001\", \"[::1]:7002\", \"redis-c\"]\n  password: ${P}", ["P": "pw12"])
        XCTAssertEqual(cluster.topology, .cluster(seeds: [
            RedisAddress(host: "10.0.0.1", port: 7000), RedisAddress(host: "redis-b", port: 7001),
            RedisAddress(host: "::1", port: 7002), RedisAddress(host: "redis-c", port: 6379),
        ]))
        XCTAssertEqual(cluster.redacted, "cluster 10.0.0.1:7000,redis-b:7001,[::1]:7002,redis-c:6379")
        XCTAssertEqual(try cluster.options().topology, .cluster(seeds: [
            RedisAddress(host: "10.0.0.1", port: 7000), RedisAddress(host: "redis-b", port: 7001),
            RedisAddress(host: "::1", port: 7002), RedisAddress(host: "redis-c", port: 6379),
        ]))
        XCTAssertEqual(try cluster.options().password, "pw12")
        let sentinel = try config("  sentinels: [\"s1:26379\", \"s2\"]\n  master_name: mymaster")
        XCTAssertEqual(sentinel.topology, .sentinel(sentinels: [RedisAddress(host: "s1", port: 26379), RedisAddress(host: "s2", port: 26379)],
                                                    masterName: "mymaster"))
        XCTAssertEqual(try sentinel.options().topology, .sentinel(sentinels: [RedisAddress(host: "s1", port: 26379), RedisAddress(host: "s2", port: 26379)], masterName: "mymaster"))
    }

    func testExactlyOneModeAndWellFormedNodeLists() {
        XCTAssertEqual(issues("  url: \"redis://127.0.0.1/0\"\n  cluster: [\"a:1\"]"),
                       ["redis: set exactly one of url, cluster, sentinels (found url and cluster) (line 2)"])
        XCTAssertEqual(issues("  sentinels: [\"a:1\"]"), ["redis.master_name: required with sentinels (line 2)"])
        XCTAssertEqual(issues("  cluster: [\"a:1\"]\n  master_name: m"), ["redis.master_name: master_name is only used with sentinels (line 3)"])
        XCTAssertEqual(issues("  cluster: []"), [#"redis.cluster: expected 1-64 "host:port" entries, got 0 (line 2)"#])
        XCTAssertEqual(issues("  cluster: [\"a:1\", \"a:1\", \"redis://b:2\", \"c:0\", \"u:p@d:1\"]"), [
            "redis.cluster[1]: a:1 is listed twice (line 2)",
            #"redis.cluster[2]: expected "host:port" (a name, IPv4 or [IPv6]; port 1-65535), got "redis://b:2" (line 2)"#,
            #"redis.cluster[3]: expected "host:port" (a name, IPv4 or [IPv6]; port 1-65535), got "c:0" (line 2)"#,
            #"redis.cluster[4]: expected "host:port" (a name, IPv4 or [IPv6]; port 1-65535), got "u:p@d:1" (line 2)"#,
        ])
        XCTAssertEqual(issues("  sentinels: \"a:1\"\n  master_name: \"two words\""), [
            "redis.master_name: expected the primary's name as the sentinels know it (1-256 characters, no spaces) (line 3)",
            #"redis.sentinels: expected a list, got quoted text "a:1" (line 2)"#,
        ])
    }

    func testTLSFilesAreCheckedForPEMShapeAndRedissTurnsTLSOn() throws {
        let certificates = try TestCertificates(directory: directory)
        let rediss = try config("  url: \"rediss://:pw@redis.example.com:6380/0\"")
        XCTAssertEqual(rediss.tls, RedisTLSSettings(), "system CAs by default")
        XCTAssertEqual(rediss.redacted, "rediss://:***@redis.example.com:6380/0")
        XCTAssertNotNil(try rediss.options().tls, "rediss:// turns TLS on")
        XCTAssertNil(try config("  url: \"redis://127.0.0.1/0\"").options().tls)

        let full = try config("""
              cluster: ["127.0.0.1:7000"]
              tls: { ca_file: ca.crt, cert_file: client.crt, key_file: client.key, server_name: redis.internal }
            """)
        XCTAssertEqual(full.tls, RedisTLSSettings(caFile: certificates.caFile, certFile: certificates.clientCertFile,
                                          keyFile: certificates.clientKeyFile, serverName: "redis.internal"))
        XCTAssertEqual(try config("  sentinels: [\"s:1\"]\n  master_name: m\n  tls: {}").tls, RedisTLSSettings())

        try write("-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n", "broken.crt")
        XCTAssertEqual(issues("""
              url: "redis://127.0.0.1/0"
              tls: { ca_file: broken.crt, cert_file: client.key, server_name: "bad name" }
            """), [
            "redis.tls: tls needs a rediss:// url (redis:// is plain TCP) (line 3)",
            "redis.tls.ca_file: \(directory)/broken.crt holds no PEM CERTIFICATE block (-----BEGIN CERTIFICATE-----, base64, -----END CERTIFICATE-----) (line 3)",
            "redis.tls.cert_file: \(directory)/client.key holds no PEM CERTIFICATE block (-----BEGIN CERTIFICATE-----, base64, -----END CERTIFICATE-----) (line 3)",
            "redis.tls.cert_file: cert_file and key_file go together (the client certificate and its key) (line 3)",
            #"redis.tls.server_name: expected a DNS name like redis.example.com, got "bad name" (line 3)"#,
        ])
        XCTAssertEqual(issues("  url: \"rediss://127.0.0.1/0\"\n  tls: { key_file: client.crt, ca_file: nothing-here }"), [
            "redis.tls.ca_file: cannot read \(directory)/nothing-here (line 3)",
            "redis.tls.key_file: \(directory)/client.crt holds no PEM PRIVATE KEY block (-----BEGIN PRIVATE KEY-----, base64, -----END PRIVATE KEY-----) (line 3)",
            "redis.tls.key_file: cert_file and key_file go together (the client certificate and its key) (line 3)",
        ])
    }
}
