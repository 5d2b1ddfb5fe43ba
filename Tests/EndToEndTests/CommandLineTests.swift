import Foundation
import TestSupport
import XCTest

/// The offline commands, run as an operator would: output, exit codes.
final class CommandLineTests: XCTestCase {
    func vector(_ name: String) throws -> [String: Any] {
        let data = try Data(contentsOf: URL(fileURLWithPath: TestPaths.vectors + "/\(name).json"))
        return try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    func gateway(_ arguments: [String]) throws -> (status: Int32?, output: String) {
        let process = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: arguments)
        let status = process.waitForExit(timeout: 30)
        usleep(50_000)
        return (status, process.lines.joined(separator: "\n"))
    }

    func json(_ output: String) throws -> [String: Any] {
        let line = try XCTUnwrap(output.split(separator: "\n").last { $0.hasPrefix("{") })
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }

    func attestationArguments(_ v: [String: Any], environment: String) -> [String] {
        ["verify", "attestation", "--attestation-b64", v["attestation_b64"] as! String, "--key-id", v["key_id_b64"] as! String,
         "--challenge-b64", v["challenge_b64"] as! String, "--app", "\(v["team_id"]!).\(v["bundle_id"]!)",
         "--environment", environment, "--at", v["verify_at"] as! String]
    }

    func testVerifyAttestationPrintsTheKeyAndExplains() throws {
        let v = try vector("att-uebelack-production")
        let (status, output) = try gateway(attestationArguments(v, environment: "production") + ["--explain"])
        XCTAssertEqual(status, 0, output)
        let result = try json(output)
        XCTAssertEqual(result["valid"] as? Bool, true)
        XCTAssertEqual(result["key_id"] as? String, v["key_id_b64"] as? String)
        XCTAssertEqual(result["environment"] as? String, "production")
        XCTAssertGreaterThanOrEqual((result["checks"] as? [String])?.count ?? 0, 9)

        let (wrongStatus, wrongOutput) = try gateway(attestationArguments(v, environment: "development"))
        XCTAssertEqual(wrongStatus, 1)
        XCTAssertEqual(try json(wrongOutput)["reason"] as? String, "environment_mismatch")
    }

    func testVerifyAttestationWithTheRawClientDataHashOfApplesSample() throws {
        let v = try vector("att-apple-guide-2026-sample")
        let (status, output) = try gateway(["verify", "attestation", "--attestation-b64", v["attestation_b64"] as! String,
                                            "--key-id", v["key_id_b64"] as! String, "--client-data-hash-b64", v["client_data_hash_b64"] as! String,
                                            "--app", "1234567890.com.example.myapp", "--environment", "any", "--at", v["verify_at"] as! String])
        XCTAssertEqual(status, 0, output)
        XCTAssertEqual(try json(output)["bundle_version"] as? String, "1")
    }

    func testVerifyAssertionAndItsFailures() throws {
        let v = try vector("ass-basd-2021-04")
        let arguments = ["verify", "assertion", "--assertion-b64", v["assertion_b64"] as! String, "--client-data-b64", v["client_data_b64"] as! String,
                         "--public-key-b64", v["public_key_b64"] as! String, "--app", "35MFYY2JY5.co.chiff.attestation-test"]
        let (status, output) = try gateway(arguments + ["--previous-counter", "0"])
        XCTAssertEqual(status, 0, output)
        XCTAssertEqual(try json(output)["counter"] as? Int, 3)
        let (replayStatus, replayOutput) = try gateway(arguments + ["--previous-counter", "3"])
        XCTAssertEqual(replayStatus, 1)
        XCTAssertEqual(try json(replayOutput)["reason"] as? String, "counter_not_increasing")
    }

    /// Without a public key the candidates are recovered from the signature; --key-id names the one to use.
    func testVerifyAssertionWithoutAKeyRecoversIt() throws {
        let v = try vector("ass-warden-ios17")
        let base = ["verify", "assertion", "--assertion-b64", v["assertion_b64"] as! String, "--client-data-b64", v["client_data_b64"] as! String,
                    "--app", "\(v["team_id"]!).\(v["bundle_id"]!)", "--previous-counter", "0"]
        let (status, output) = try gateway(base)
        XCTAssertEqual(status, 0, output)
        let result = try json(output)
        XCTAssertTrue((result["key_id_candidates"] as? [String] ?? []).contains(v["key_id_b64"] as! String), output)
        XCTAssertNil(result["key_id"], "two candidates verify alike: none is named without --key-id or --config")
        let (namedStatus, namedOutput) = try gateway(base + ["--key-id", v["key_id_b64"] as! String])
        XCTAssertEqual(namedStatus, 0, namedOutput)
        XCTAssertEqual(try json(namedOutput)["key_id"] as? String, v["key_id_b64"] as? String)
        let (wrongStatus, wrongOutput) = try gateway(base + ["--key-id", Data(repeating: 1, count: 32).base64EncodedString()])
        XCTAssertEqual(wrongStatus, 1)
        XCTAssertEqual(try json(wrongOutput)["reason"] as? String, "key_id_mismatch")
        XCTAssertEqual(try gateway(base + ["--key-id", "AA==", "--config", "x.yaml"]).status, 2)
    }

    func testUsageErrorsExitTwo() throws {
        XCTAssertEqual(try gateway(["verify", "assertion", "--assertion-b64", "!!"]).status, 2)
        XCTAssertEqual(try gateway(["verify", "attestation", "--bogus", "1"]).status, 2)
        XCTAssertEqual(try gateway(["no-such-command"]).status, 2)
        XCTAssertEqual(try gateway(["bench", "verify", "--seconds", "0"]).status, 2)
    }

    func testBenchVerifyPrintsItsRateLast() throws {
        let (status, output) = try gateway(["bench", "verify", "--seconds", "1"])
        XCTAssertEqual(status, 0, output)
        let last = try XCTUnwrap(output.split(separator: "\n").last)
        XCTAssertTrue(last.hasPrefix("assertions_per_second="), output)
        XCTAssertTrue(output.contains("ratio_recovery_to_plain="), output)
        XCTAssertGreaterThan(Int(last.dropFirst("assertions_per_second=".count)) ?? 0, 100)
    }
}

extension CommandLineTests {
    func testCheckConfigWarnsAboutDebugTokensOnAProductionOnlyGateway() throws {
        let directory = TestPaths.temporaryDirectory("debugtokens")
        let config = { (environments: String) in
            """
            app_attest:
              apps: ["ABCDE12345.com.example.app"]
              environments: \(environments)
              debug_tokens: [{ name: ci, sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" }]
            upstreams: { api: { url: "http://127.0.0.1:9000" } }
            routes:
              - { path_prefix: "/", upstream: api, policy: assert, allow_debug: false }
            """
        }
        try config("[production]").write(toFile: directory + "/production.yaml", atomically: true, encoding: .utf8)
        try config("[production, development]").write(toFile: directory + "/staging.yaml", atomically: true, encoding: .utf8)
        let (status, output) = try gateway(["check-config", directory + "/production.yaml"])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(output.contains("warning: app_attest.debug_tokens is set on a gateway that accepts production keys only"), output)
        let (stagingStatus, stagingOutput) = try gateway(["check-config", directory + "/staging.yaml"])
        XCTAssertEqual(stagingStatus, 0, stagingOutput)
        XCTAssertFalse(stagingOutput.contains("debug_tokens"), stagingOutput)
    }

    /// The redis.tls files are loaded into OpenSSL as serve would: a key that is not the certificate's stops it.
    func testCheckConfigLoadsTheRedisTLSFiles() throws {
        let directory = TestPaths.temporaryDirectory("redis-tls-check")
        _ = try TestCertificates(directory: directory)  // ca.crt, client.crt/.key, server.key in the directory
        let config = { (key: String) in
            """
            redis: { url: "rediss://localhost:6380/0", tls: { ca_file: ca.crt, cert_file: client.crt, key_file: \(key) } }
            app_attest: { apps: ["ABCDE12345.com.example.app"] }
            upstreams: { api: { url: "http://127.0.0.1:9000" } }
            routes: [{ path_prefix: "/", upstream: api, policy: pass }]
            """
        }
        try config("client.key").write(toFile: directory + "/good.yaml", atomically: true, encoding: .utf8)
        try config("server.key").write(toFile: directory + "/mismatch.yaml", atomically: true, encoding: .utf8)
        let (status, output) = try gateway(["check-config", directory + "/good.yaml"])
        XCTAssertEqual(status, 0, output)
        let (mismatchStatus, mismatchOutput) = try gateway(["check-config", directory + "/mismatch.yaml"])
        XCTAssertEqual(mismatchStatus, 1, mismatchOutput)
        XCTAssertTrue(mismatchOutput.contains("redis.tls: ") && mismatchOutput.contains("does not match"), mismatchOutput)
        XCTAssertFalse(mismatchOutput.contains("PRIVATE KEY"), "the key's content is never printed")
    }

    /// An upstream's tls files are checked the same way, and tls is refused on an http:// upstream.
    func testCheckConfigLoadsTheUpstreamTLSFiles() throws {
        let directory = TestPaths.temporaryDirectory("upstream-tls-check")
        _ = try TestCertificates(directory: directory)
        let config = { (url: String, key: String) in
            """
            app_attest: { apps: ["ABCDE12345.com.example.app"] }
            upstreams: { api: { url: "\(url)", tls: { ca_file: ca.crt, cert_file: client.crt, key_file: \(key), server_name: api.internal } } }
            routes: [{ path_prefix: "/", upstream: api, policy: pass }]
            """
        }
        try config("https://10.0.0.7:8443", "client.key").write(toFile: directory + "/good.yaml", atomically: true, encoding: .utf8)
        try config("https://10.0.0.7:8443", "server.key").write(toFile: directory + "/mismatch.yaml", atomically: true, encoding: .utf8)
        try config("http://10.0.0.7:8080", "client.key").write(toFile: directory + "/plain.yaml", atomically: true, encoding: .utf8)
        let (status, output) = try gateway(["check-config", directory + "/good.yaml"])
        XCTAssertEqual(status, 0, output)
        let (mismatchStatus, mismatchOutput) = try gateway(["check-config", directory + "/mismatch.yaml"])
        XCTAssertEqual(mismatchStatus, 1, mismatchOutput)
        XCTAssertTrue(mismatchOutput.contains("upstreams.api.tls: ") && mismatchOutput.contains("does not match"), mismatchOutput)
        XCTAssertFalse(mismatchOutput.contains("PRIVATE KEY"), "the key's content is never printed")
        let (plainStatus, plainOutput) = try gateway(["check-config", directory + "/plain.yaml"])
        XCTAssertEqual(plainStatus, 1, plainOutput)
        XCTAssertTrue(plainOutput.contains("upstreams.api.tls: tls applies to https:// upstreams only"), plainOutput)
    }
}
