import AssertionCheck
import Foundation
import GoogleServices
import TestSupport
import Upstream
import XCTest

/// decodeIntegrityToken and the access tokens behind it, against the fake Google over real loopback HTTP.
final class PlayIntegrityAPITests: XCTestCase {
    private var google: FakeGooglePlayServer!
    private let calls = GoogleCallLog()
    private let clock = TestClock()
    private let fastRetry = RetryPolicy(maxAttempts: 3, initialDelay: 0.05, maxDelay: 0.2, jitter: 0)

    override func setUpWithError() throws {
        google = try FakeGooglePlayServer(clock: { [clock] in clock.date })
    }

    override func tearDown() {
        google?.stop()
        google = nil
    }

    private func api(apiURL: String? = nil, changes: [String: Any?] = [:], timeoutMs: Int = 5000, retry: RetryPolicy? = nil,
                     tokenWaitTimeoutMs: Int = 5000) throws -> PlayIntegrityAPI {
        let account = try GoogleServiceAccount.load(path: google.serviceAccountFile(changes: changes))
        let options = GoogleServiceOptions(connectTimeoutMs: 1000, timeoutMs: timeoutMs, retry: retry ?? fastRetry,
                                           tokenWaitTimeoutMs: tokenWaitTimeoutMs, observer: calls.observer, clock: { [clock] in clock.date })
        return try PlayIntegrityAPI(serviceAccount: account, apiURL: apiURL ?? google.baseURL, options: options)
    }

    private func decode(_ api: PlayIntegrityAPI, _ token: String, packageName: String = Verdicts.packageName) async throws -> [UInt8] {
        try await api.decodeIntegrityToken(packageName: packageName, token: token)
    }

    // MARK: - Google's documented exchange

    func testDecodeAnswersTheVerdictOverGooglesRequests() async throws {
        let token = google.standardToken(for: Verdicts.genuine)
        let payload = try await decode(try api(), token)
        XCTAssertEqual(try jsonObject(payload), try jsonObject(Array(Verdicts.genuine.utf8)))
        // Re-serialised without turning booleans into numbers or strings into anything else.
        let text = String(decoding: payload, as: UTF8.self)
        for member in [#""testFlag":true"#, #""testNumber":12"#, #""timestampMillis":"1617893780000""#] {
            XCTAssertTrue(text.contains(member), text)
        }

        let requests = google.requests
        XCTAssertEqual(requests.map(\.endpoint), [.token, .decode])
        XCTAssertEqual(requests.map(\.refusal), [nil, nil])
        let exchange = requests[0]
        XCTAssertEqual(exchange.header("Content-Type"), "application/x-www-form-urlencoded")
        XCTAssertEqual(Set(exchange.form.keys), ["grant_type", "assertion"])
        XCTAssertEqual(exchange.form["grant_type"], "urn:ietf:params:oauth:grant-type:jwt-bearer")
        let call = requests[1]
        XCTAssertEqual(call.path, "/v1/com.example.app:decodeIntegrityToken")
        XCTAssertEqual(call.header("Content-Type"), "application/json")
        XCTAssertEqual(call.header("Authorization")?.hasPrefix("Bearer ya29.fake-"), true)
        XCTAssertEqual(try jsonObject(call.body), ["integrity_token": token])
        XCTAssertEqual(calls.all.map(\.endpoint), [.token, .decode])
        XCTAssertEqual(calls.all.map(\.outcome), ["ok", "ok"])
        XCTAssertEqual(calls.all.map(\.status), [200, 200])
    }

    func testAssertionCarriesGooglesHeaderAndClaims() async throws {
        let started = Int(clock.date.timeIntervalSince1970)
        _ = try await decode(try api(), google.standardToken(for: Verdicts.genuine))
        let assertion = try JWSParts(XCTUnwrap(google.requests(to: .token).first?.form["assertion"]))
        XCTAssertEqual(assertion.header.count, 3)
        XCTAssertEqual(assertion.header["alg"] as? String, "RS256")
        XCTAssertEqual(assertion.header["typ"] as? String, "JWT")
        XCTAssertEqual(assertion.header["kid"] as? String, google.account.keyID)
        XCTAssertEqual(Set(assertion.claims.keys), ["iss", "scope", "aud", "iat", "exp"])
        XCTAssertEqual(assertion.claims["iss"] as? String, google.account.clientEmail)
        XCTAssertEqual(assertion.claims["scope"] as? String, "https://www.googleapis.com/auth/playintegrity")
        XCTAssertEqual(assertion.claims["aud"] as? String, google.tokenURI)
        XCTAssertEqual(assertion.claims["iat"] as? Int, started)
        XCTAssertEqual(assertion.claims["exp"] as? Int, started + 3600)
        XCTAssertEqual(assertion.signature.count, 256, "RSA-2048")
        XCTAssertTrue(google.account.publicKey.isValidRS256Signature(assertion.signature, for: Array(assertion.signingInput.utf8)))
    }

    // MARK: - Access tokens: cached, shared, renewed

    func testOneExchangeServesManyDecodesSequentialAndConcurrent() async throws {
        let api = try api()
        // The exchange is slow, so the concurrent decodes all need a token while it is in flight.
        google.script(.token, [.slow(0.5)])
        let token = google.standardToken(for: Verdicts.genuine)
        let payloads = try await withThrowingTaskGroup(of: [UInt8].self) { group in
            for _ in 0..<8 { group.addTask { try await api.decodeIntegrityToken(packageName: Verdicts.packageName, token: token) } }
            return try await group.reduce(into: [[UInt8]]()) { $0.append($1) }
        }
        XCTAssertEqual(payloads.count, 8)
        for _ in 0..<5 { _ = try await decode(api, token) }
        XCTAssertEqual(google.requests(to: .token).count, 1)
        XCTAssertEqual(google.requests(to: .decode).count, 13)
        XCTAssertEqual(Set(google.requests(to: .decode).compactMap { $0.header("Authorization") }).count, 1)
    }

    func testTokenIsExchangedAgainFiveMinutesBeforeItExpires() async throws {
        let api = try api()
        let token = google.standardToken(for: Verdicts.genuine)
        let start = Int(clock.date.timeIntervalSince1970)
        _ = try await decode(api, token)
        // Google's tokens live 3599 s: reused up to 3599 - 300.
        clock.advance(3298)
        _ = try await decode(api, token)
        XCTAssertEqual(google.requests(to: .token).count, 1)
        clock.advance(2)
        _ = try await decode(api, token)
        let exchanges = google.requests(to: .token)
        XCTAssertEqual(exchanges.count, 2)
        XCTAssertEqual(try JWSParts(XCTUnwrap(exchanges.last?.form["assertion"])).claims["iat"] as? Int, start + 3300)
        let bearers = google.requests(to: .decode).compactMap { $0.header("Authorization") }
        XCTAssertEqual(bearers.count, 3)
        XCTAssertEqual(bearers[0], bearers[1])
        XCTAssertNotEqual(bearers[1], bearers[2])
    }

    func testShortLivedTokenIsRenewedHalfway() async throws {
        google.setAccessTokenLifetime(120)
        let api = try api()
        let token = google.standardToken(for: Verdicts.genuine)
        _ = try await decode(api, token)
        clock.advance(59)
        _ = try await decode(api, token)
        XCTAssertEqual(google.requests(to: .token).count, 1)
        clock.advance(2)
        _ = try await decode(api, token)
        XCTAssertEqual(google.requests(to: .token).count, 2)
    }

    func testRevokedAccessTokenIsDroppedAfterGoogles401() async throws {
        let api = try api()
        let token = google.standardToken(for: Verdicts.genuine)
        _ = try await decode(api, token)
        google.revokeAccessTokens()
        let refused = await serviceError { _ = try await self.decode(api, token) }
        XCTAssertEqual(refused?.reasonCode, "google_credentials_refused")
        XCTAssertTrue(String(describing: refused).contains("check the service account"), String(describing: refused))
        XCTAssertEqual(google.requests(to: .decode).count, 2, "a 401 is not retried")
        _ = try await decode(api, token)
        XCTAssertEqual(google.requests(to: .token).count, 2, "the next call exchanges again")
    }

    func testWaitForAnExchangeInFlightIsBounded() async throws {
        let api = try api(tokenWaitTimeoutMs: 200)
        google.script(.token, [.slow(1.5)])
        let token = google.standardToken(for: Verdicts.genuine)
        let started = Date()
        let outcomes = await withTaskGroup(of: (String?, TimeInterval).self) { group in
            for _ in 0..<2 {
                group.addTask {
                    let code = await reasonCode { _ = try await api.decodeIntegrityToken(packageName: Verdicts.packageName, token: token) }
                    return (code, Date().timeIntervalSince(started))
                }
            }
            return await group.reduce(into: [(String?, TimeInterval)]()) { $0.append($1) }
        }.sorted { $0.1 < $1.1 }
        XCTAssertEqual(outcomes.map(\.0), ["google_unavailable", nil], "the waiter gives up, the exchanging call succeeds")
        XCTAssertLessThan(outcomes[0].1, 1.4)
        XCTAssertEqual(google.requests(to: .token).count, 1)
    }

    // MARK: - Refusals

    func testUnknownIntegrityTokenIsRejectedWithoutRetry() async throws {
        let api = try api()
        let unknown = await serviceError { _ = try await self.decode(api, "standard.never-issued") }
        XCTAssertEqual(unknown?.reasonCode, "google_token_rejected")
        XCTAssertTrue(String(describing: unknown).contains("INVALID_ARGUMENT"), String(describing: unknown))
        // A token issued for another app is no better.
        let elsewhere = google.standardToken(for: Verdicts.genuine, packageName: "com.example.other")
        await assertReason("google_token_rejected") { _ = try await self.decode(api, elsewhere) }
        XCTAssertEqual(google.requests(to: .decode).count, 2)
        XCTAssertEqual(calls.all.filter { $0.endpoint == .decode }.map(\.willRetry), [false, false])
        XCTAssertEqual(calls.all.filter { $0.endpoint == .decode }.map(\.status), [400, 400])
    }

    func testPackageTheAccountIsNotLinkedToIsACredentialsRefusal() async throws {
        let token = google.standardToken(for: Verdicts.genuine, packageName: "com.example.unlinked")
        let refused = await serviceError { _ = try await self.decode(try self.api(), token, packageName: "com.example.unlinked") }
        XCTAssertEqual(refused?.reasonCode, "google_credentials_refused")
        XCTAssertTrue(String(describing: refused).contains("PERMISSION_DENIED"), String(describing: refused))
    }

    func testInvalidPackageNamesAndTokensAreNotSent() async throws {
        let api = try api()
        for name in ["", "com", "com.example/../x", "com.example.app:x", "1com.example", "com.ex ample", "com..example", "com.example.", "cöm.example"] {
            await assertReason("google_invalid_configuration", name) { _ = try await api.decodeIntegrityToken(packageName: name, token: "t") }
        }
        for token in ["", "a\nb", "a b", String(repeating: "A", count: PlayIntegrityAPI.maxIntegrityTokenBytes + 1)] {
            await assertReason("google_token_rejected") { _ = try await self.decode(api, token) }
        }
        XCTAssertTrue(google.requests.isEmpty)
    }

    func testAnswersWithoutAVerdictAreBadResponses() async throws {
        let api = try api()
        let token = google.standardToken(for: Verdicts.genuine)
        google.script(.decode, [.body(200, #"{"somethingElse":{}}"#), .body(200, #"{"tokenPayloadExternal":"text"}"#),
                                .body(200, "not json"), .body(404, #"{"error":{"code":404,"status":"NOT_FOUND"}}"#)])
        for _ in 0..<4 { await assertReason("google_bad_response") { _ = try await self.decode(api, token) } }
        XCTAssertEqual(google.requests(to: .decode).count, 4)
    }

    func testMalformedTokenEndpointAnswersAreBadResponses() async throws {
        let api = try api(retry: .never)
        google.script(.token, [.body(200, #"{"expires_in":3599,"token_type":"Bearer"}"#),
                               .body(200, #"{"access_token":"ya29.x","expires_in":3599,"token_type":"MAC"}"#),
                               .body(200, #"{"access_token":"ya29.x","expires_in":-5,"token_type":"Bearer"}"#),
                               .body(200, #"{"access_token":"ya29.x\r\nX-Injected: 1","expires_in":3599}"#)])
        let token = google.standardToken(for: Verdicts.genuine)
        for _ in 0..<4 { await assertReason("google_bad_response") { _ = try await self.decode(api, token) } }
        XCTAssertTrue(google.requests(to: .decode).isEmpty)
    }

    // MARK: - Retries, timeouts, outages

    func testServerErrorAndRateLimitAreRetriedThenSucceed() async throws {
        let api = try api()
        google.script(.decode, [.status(500), .status(429)])
        let payload = try await decode(api, google.standardToken(for: Verdicts.genuine))
        XCTAssertEqual(try jsonObject(payload), try jsonObject(Array(Verdicts.genuine.utf8)))
        let decodes = calls.all.filter { $0.endpoint == .decode }
        XCTAssertEqual(decodes.map(\.status), [500, 429, 200])
        XCTAssertEqual(decodes.map(\.outcome), ["google_unavailable", "google_unavailable", "ok"])
        XCTAssertEqual(decodes.map(\.attempt), [1, 2, 3])
        XCTAssertEqual(decodes.map(\.willRetry), [true, true, false])
        XCTAssertEqual(google.requests(to: .token).count, 1, "retries reuse the access token")
    }

    func testPersistentServerErrorsAreUnavailableAfterTheRetries() async throws {
        let api = try api()
        google.script(.decode, Array(repeating: .status(503), count: 3))
        await assertReason("google_unavailable") { _ = try await self.decode(api, self.google.standardToken(for: Verdicts.genuine)) }
        XCTAssertEqual(google.requests(to: .decode).count, 3)
        XCTAssertEqual(calls.all.filter { $0.endpoint == .decode }.map(\.willRetry), [true, true, false])
    }

    func testTokenEndpointErrorsAreRetried() async throws {
        let api = try api()
        google.script(.token, [.status(503), .drop])
        _ = try await decode(api, google.standardToken(for: Verdicts.genuine))
        let exchanges = calls.all.filter { $0.endpoint == .token }
        XCTAssertEqual(exchanges.map(\.status), [503, nil, 200])
        XCTAssertEqual(exchanges.map(\.outcome), ["google_unavailable", "google_unavailable", "ok"])
    }

    func testSlowGoogleTimesOutAsUnavailable() async throws {
        let api = try api(timeoutMs: 300, retry: .never)
        _ = try await decode(api, google.standardToken(for: Verdicts.genuine))
        google.script(.decode, [.slow(3)])
        let started = Date()
        let error = await serviceError { _ = try await self.decode(api, self.google.standardToken(for: Verdicts.genuine)) }
        XCTAssertEqual(error?.reasonCode, "google_unavailable")
        XCTAssertLessThan(Date().timeIntervalSince(started), 2.5)
        XCTAssertNil(calls.all.last?.status)
    }

    func testGoogleDownIsUnavailableWithinTheTimeout() async throws {
        let closed = "http://127.0.0.1:\(TestPaths.freePort())"
        let retry = RetryPolicy(maxAttempts: 2, initialDelay: 0.05, maxDelay: 0.05, jitter: 0)
        // The token endpoint down.
        let noTokens = try api(changes: ["token_uri": closed + "/token"], retry: retry)
        let started = Date()
        await assertReason("google_unavailable") { _ = try await noTokens.decodeIntegrityToken(packageName: Verdicts.packageName, token: "t") }
        // The API down, with a token in hand.
        let noAPI = try api(apiURL: closed, retry: retry)
        await assertReason("google_unavailable") { _ = try await noAPI.decodeIntegrityToken(packageName: Verdicts.packageName, token: "t") }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        XCTAssertEqual(calls.all.map(\.endpoint), [.token, .token, .token, .decode, .decode])
        XCTAssertEqual(calls.all.map(\.status), [nil, nil, 200, nil, nil])
    }

    func testObserverAndErrorsHoldNoSecrets() async throws {
        let api = try api()
        let token = google.standardToken(for: Verdicts.genuine)
        _ = try await decode(api, token)
        google.revokeAccessTokens()
        let error = await serviceError { _ = try await self.decode(api, token) }
        let bearer = try XCTUnwrap(google.requests(to: .decode).first?.header("Authorization")).dropFirst("Bearer ".count)
        let assertion = try XCTUnwrap(google.requests(to: .token).first?.form["assertion"])
        var printed = ""
        dump(calls.all, to: &printed)
        printed += "\(String(describing: error))"
        for secret in [String(bearer), assertion, token, String(google.account.privateKeyPEM.dropFirst(28).prefix(40))] {
            XCTAssertFalse(printed.contains(secret), secret)
        }
    }

    func testDefaultsAndURLChecks() async throws {
        XCTAssertEqual(PlayIntegrityAPI.defaultURL, "https://playintegrity.googleapis.com")
        let account = try GoogleServiceAccount.load(path: google.serviceAccountFile())
        XCTAssertThrowsError(try PlayIntegrityAPI(serviceAccount: account, apiURL: "ftp://127.0.0.1")) { error in
            XCTAssertEqual((error as? GoogleServiceError)?.reasonCode, "google_invalid_configuration")
        }
        XCTAssertNoThrow(try PlayIntegrityAPI(serviceAccount: account))
    }
}
