import AssertionCheck
import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// The standard path through the real binary: tokens the gateway cannot decrypt go to Google's
/// decodeIntegrityToken (the fake, which verifies the service account's assertion and checks the bearer),
/// and the verdict is judged by the same rules, bound by `requestHash`; Google down → 503, then recovery.
final class PlayIntegrityStandardTests: XCTestCase {
    static let shared = SharedFixture<(environment: GatewayEnvironment, google: FakeGooglePlayServer, maker: PlayIntegrityTokenMaker)>()
    var env: GatewayEnvironment { Self.shared.value.environment }
    var google: FakeGooglePlayServer { Self.shared.value.google }
    var maker: PlayIntegrityTokenMaker { Self.shared.value.maker }

    static let package = PlayIntegrityTests.package

    override class func setUp() {
        super.setUp()
        shared.make {
            let google = try FakeGooglePlayServer(packageNames: [package])
            let maker = try PlayIntegrityTokenMaker()
            let keys = try maker.writeKeys(to: TestPaths.temporaryDirectory("play-standard"))
            let extra = PlayIntegrityTests.section(keys: keys, extra: """
              service_account_file: "\(try google.serviceAccountFile())"
              api_url: "\(google.baseURL)"
            """)
            do {
                return (try GatewayEnvironment(routes: PlayIntegrityTests.routes, appAttestExtra: TokenKeys().section(), extra: extra), google, maker)
            } catch {
                google.stop()
                throw error
            }
        }
    }

    override class func tearDown() {
        shared.tearDown {
            $0.environment.stop()
            $0.google.stop()
        }
        super.tearDown()
    }

    override func setUpWithError() throws { try Self.shared.check() }

    func challenge() throws -> String {
        let reply = try env.request("GET", "/play-integrity/challenge")
        XCTAssertEqual(reply.status, 200, reply.text)
        return reply.text
    }

    /// A standard request's verdict: the challenge comes back as `requestHash`.
    func standardToken(_ challenge: String, _ change: (inout PlayIntegrityVerdict) -> Void = { _ in }) -> String {
        var verdict = PlayIntegrityVerdict(packageName: Self.package, nonce: nil, certificateDigests: [PlayIntegrityTests.certificate])
        verdict.requestHash = challenge
        change(&verdict)
        return google.standardToken(for: String(decoding: verdict.json, as: UTF8.self), packageName: Self.package)
    }

    func exchange(_ token: String, challenge: String) throws -> Reply {
        let body = try JSONSerialization.data(withJSONObject: ["integrity_token": token, "challenge": challenge])
        return try env.request("POST", "/play-integrity/token", headers: [HTTPField("Content-Type", "application/json")], body: Array(body))
    }

    func testStandardTokenMintsAGatewayTokenThroughGoogle() throws {
        let decodes = google.requests(to: .decode).count
        let challenge = try challenge()
        let reply = try exchange(standardToken(challenge), challenge: challenge)
        XCTAssertEqual(reply.status, 200, reply.text)
        let token = try XCTUnwrap(reply.json["token"] as? String)
        XCTAssertEqual(TokenKeys.claims(of: token)?["amr"] as? [String], ["play_integrity"])
        let call = try XCTUnwrap(google.requests(to: .decode).last)
        XCTAssertEqual(google.requests(to: .decode).count, decodes + 1)
        XCTAssertNil(call.refusal, "the fake accepted the bearer and the package")
        XCTAssertEqual(call.path, "/v1/\(Self.package):decodeIntegrityToken")
        let passed = try env.request("GET", "/android-only/x", headers: [HTTPField("X-App-Attest-Token", token)])
        XCTAssertEqual(passed.status, 200, passed.text)
        XCTAssertEqual(passed.forwarded("X-Attest-Method"), ["play_integrity"])
        XCTAssertEqual(try exchange(standardToken(challenge), challenge: challenge).error, "integrity_challenge_reused")

        let logged = env.gateway.waitForEvent {
            $0["event"] as? String == "google_call" && $0["endpoint"] as? String == "decode" && $0["outcome"] as? String == "ok"
        }
        XCTAssertEqual(logged?["status"] as? Int, 200)
        XCTAssertFalse(env.gateway.process.lines.joined().contains("ya29."), "no access token in the log")
        let series = [#"gateway_google_calls_total{endpoint="decode",outcome="ok"}"#, #"gateway_google_calls_total{endpoint="token",outcome="ok"}"#]
        let metrics = try env.metrics { text in series.allSatisfy { (MetricsText.sample($0, in: text) ?? 0) >= 1 } }
        for line in series { XCTAssertGreaterThanOrEqual(MetricsText.sample(line, in: metrics) ?? 0, 1, "\(line)\n\(metrics)") }
        XCTAssertTrue(metrics.contains(#"gateway_google_call_duration_seconds_count{endpoint="decode"}"#), metrics)
    }

    func testStandardVerdictsAreJudgedByTheSameRules() throws {
        let challenge = try challenge()
        let cases: [(String, String, String, Int)] = [
            ("another requestHash", standardToken(challenge) { $0.requestHash = String(repeating: "h", count: 72) }, "integrity_nonce_mismatch", 401),
            ("nonce instead of requestHash", standardToken(challenge) { $0.requestHash = nil; $0.nonce = challenge }, "integrity_nonce_mismatch", 401),
            ("basic device", standardToken(challenge) { $0.deviceRecognitionVerdict = ["MEETS_BASIC_INTEGRITY"] }, "integrity_device_not_trusted", 403),
            ("other package", standardToken(challenge) { $0.requestPackageName = "com.example.other" }, "integrity_package_not_allowed", 403),
            ("too old", standardToken(challenge) { $0.timestamp = Date().addingTimeInterval(-600) }, "integrity_token_too_old", 401),
            ("unknown to Google", "standard.not-a-token-google-issued", "integrity_token_rejected", 401),
        ]
        for (what, token, code, status) in cases {
            let reply = try exchange(token, challenge: challenge)
            XCTAssertEqual(reply.status, status, "\(what): \(reply.text)")
            XCTAssertEqual(reply.error, code, what)
        }
        XCTAssertEqual(try exchange(standardToken(challenge), challenge: challenge).status, 200, "no refusal spent the challenge")
    }

    func testGoogleDownAnswers503ThenRecovers() throws {
        let challenge = try challenge()
        let token = standardToken(challenge)
        google.script(.decode, Array(repeating: .status(503), count: 3))
        let down = try exchange(token, challenge: challenge)
        XCTAssertEqual(down.status, 503, down.text)
        XCTAssertEqual(down.error, "integrity_unavailable")
        XCTAssertEqual(down.headers.values(named: "Retry-After"), ["5"])
        XCTAssertFalse(down.text.contains("127.0.0.1"), "the client learns which part failed, not where: \(down.text)")
        let logged = env.gateway.waitForEvent { $0["event"] as? String == "request" && $0["reason"] as? String == "integrity_unavailable" }
        XCTAssertTrue((logged?["detail"] as? String)?.contains("google_unavailable") ?? false, "\(String(describing: logged))")

        let recovered = try exchange(token, challenge: challenge)
        XCTAssertEqual(recovered.status, 200, "Google answers again; the challenge was not spent: \(recovered.text)")
        let unavailable = #"gateway_google_calls_total{endpoint="decode",outcome="google_unavailable"}"#
        let metrics = try env.metrics { (MetricsText.sample(unavailable, in: $0) ?? 0) >= 3 }
        XCTAssertGreaterThanOrEqual(MetricsText.sample(unavailable, in: metrics) ?? 0, 3, metrics)
    }

    /// A Google that accepts the connection and never answers in time: each attempt is cut off, and the client
    /// gets its 503 within a bounded wait (3 attempts of 3 s; the bound asserted is loose, the machine is shared).
    func testAHangingGoogleIsCutOff() throws {
        let challenge = try challenge()
        google.script(.decode, Array(repeating: .slow(4), count: 3))
        let patient = UpstreamClient(target: try UpstreamTarget(baseURL: env.gateway.baseURL, connectTimeoutMs: 2000, timeoutMs: 60_000))
        let body = try JSONSerialization.data(withJSONObject: ["integrity_token": standardToken(challenge), "challenge": challenge])
        let start = Date()
        let reply = try Reply(patient.send(UpstreamRequest(method: "POST", pathAndQuery: "/play-integrity/token",
                                                           headers: [HTTPField("Host", "gateway.test"), HTTPField("Content-Type", "application/json")],
                                                           body: Array(body))))
        XCTAssertEqual(reply.status, 503, reply.text)
        XCTAssertEqual(reply.error, "integrity_unavailable")
        XCTAssertLessThan(Date().timeIntervalSince(start), 30)
        let timeout = env.gateway.waitForEvent { $0["event"] as? String == "request" && ($0["detail"] as? String)?.contains("google_unavailable") == true }
        XCTAssertNotNil(timeout)
    }

    /// Google forgot the cached access token (revoked, or a restart): the exchange gets a new one and succeeds.
    func testARevokedAccessTokenIsReplacedWithinTheSameExchange() throws {
        let first = try challenge()
        XCTAssertEqual(try exchange(standardToken(first), challenge: first).status, 200)
        let exchanges = google.requests(to: .token).count
        google.revokeAccessTokens()
        let second = try challenge()
        let reply = try exchange(standardToken(second), challenge: second)
        XCTAssertEqual(reply.status, 200, reply.text)
        XCTAssertEqual(google.requests(to: .token).count, exchanges + 1, "one new access token")
    }

    func testClassicTokensStayLocalWhenTheConsoleKeysAreConfigured() throws {
        let decodes = google.requests(to: .decode).count
        let challenge = try challenge()
        let verdict = PlayIntegrityVerdict(packageName: Self.package, nonce: challenge, certificateDigests: [PlayIntegrityTests.certificate])
        XCTAssertEqual(try exchange(maker.classicToken(verdict), challenge: challenge).status, 200)
        XCTAssertEqual(google.requests(to: .decode).count, decodes, "no call to Google")
    }

    func testGoogleSeriesExistFromStart() throws {
        let metrics = try env.admin("/metrics").text
        for line in [#"gateway_google_calls_total{endpoint="decode",outcome="google_token_rejected"}"#,
                     #"gateway_google_calls_total{endpoint="token",outcome="google_credentials_refused"}"#,
                     #"gateway_requests_total{route="builtin:/play-integrity/token",decision="denied",reason="integrity_unavailable",code="5xx"}"#] {
            XCTAssertTrue(metrics.contains(line), "\(line) missing")
        }
    }
}

/// docs/client.md's Python token maker, run as written against the real gateway: the doc's code makes the
/// keys the gateway is configured with, then a classic token the gateway accepts (an implementation not ours).
final class PlayIntegrityDocumentedMakerTests: XCTestCase {
    static func snippet() throws -> String {
        let client = try String(contentsOfFile: TestPaths.repository + "/docs/client.md", encoding: .utf8)
        let section = try XCTUnwrap(client.components(separatedBy: "## Android: Play Integrity").dropFirst().first)
        return try XCTUnwrap(section.components(separatedBy: "```python\n").dropFirst().first?.components(separatedBy: "```").first)
    }

    func python(_ code: String, in directory: String) throws -> [String] {
        let process = try ChildProcess(executable: "/usr/bin/env", arguments: ["python3", "-c", code], directory: directory)
        XCTAssertEqual(process.waitForExit(timeout: 30), 0, process.lines.joined(separator: "\n"))
        usleep(50_000)
        return process.lines
    }

    func testTheDocumentedMakersTokenIsAccepted() throws {
        let probe = try ChildProcess(executable: "/usr/bin/env", arguments: ["python3", "-c", "import cryptography"])
        guard probe.waitForExit(timeout: 30) == 0 else { throw XCTSkip("Python's cryptography is not installed (scripts/test.sh installs it)") }
        let snippet = try Self.snippet()
        let keys = TestPaths.temporaryDirectory("documented-maker")
        _ = try python(snippet + """

            open("signing.pem", "wb").write(ec_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                                 serialization.NoEncryption()))
            """, in: keys)
        let env = try GatewayEnvironment(routes: PlayIntegrityTests.routes, appAttestExtra: TokenKeys().section(),
                                         extra: PlayIntegrityTests.section(keys: (keys + "/decryption.key", keys + "/verification.key")))
        defer { env.stop() }
        let answer = try python(snippet + """

            import urllib.request
            aes = base64.b64decode(open("\(keys)/decryption.key").read())
            ec_key = serialization.load_pem_private_key(open("\(keys)/signing.pem", "rb").read(), None)
            challenge = urllib.request.urlopen("\(env.gateway.baseURL)/play-integrity/challenge").read().decode()
            token = classic_token(challenge, package="\(PlayIntegrityTests.package)", cert_digest="\(PlayIntegrityTests.certificate)")
            body = json.dumps({"integrity_token": token, "challenge": challenge}).encode()
            reply = urllib.request.urlopen(urllib.request.Request("\(env.gateway.baseURL)/play-integrity/token", data=body,
                                                                  headers={"Content-Type": "application/json"}))
            print(reply.status, json.loads(reply.read())["expires_in"])
            """, in: TestPaths.temporaryDirectory("documented-maker-run"))
        XCTAssertEqual(answer.last, "200 600", answer.joined(separator: "\n"))
    }
}
