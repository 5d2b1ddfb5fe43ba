import AppAttestClient
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SimulatedAppAttest
import TestSupport
import XCTest

/// `AttestClient` driven against the real `gateway serve`, Redis, the example upstream and a fake Apple,
/// with a simulated iPhone behind the `AppAttestService` protocol.
final class AttestClientTests: XCTestCase {
    static let shared = SharedFixture<ClientEnvironment>()
    var env: ClientEnvironment { Self.shared.value }

    override class func setUp() {
        super.setUp()
        shared.make { try ClientEnvironment() }
    }

    override class func tearDown() {
        shared.tearDown { $0.stop() }
        super.tearDown()
    }

    override func setUpWithError() throws { try Self.shared.check() }

    func url(_ pathAndQuery: String) -> URL { URL(string: env.gateway.baseURL + pathAndQuery)! }

    // MARK: - Registration and signed requests

    func testRegistersOnceAndKeepsTheKeyId() async throws {
        let service = env.service()
        let store = InMemoryKeyIdStore()
        let client = env.client(service: service, keyStore: store)
        async let first = client.register()
        async let second = client.register()
        let (a, b) = try await (first, second)
        XCTAssertEqual(a, b, "concurrent callers share one registration")
        XCTAssertEqual(store.load(), a)
        XCTAssertEqual(service.keyIds, [a])
        let again = try await client.register()
        XCTAssertEqual(again, a, "a stored key is not registered again")
        XCTAssertEqual(service.attestations.count, 1)
        let registrations = env.requestLines("/attest/verify", count: 1) { ($0["key_id"] as? String) == a }
        XCTAssertEqual(registrations.map { $0["status"] as? Int }, [200])
    }

    func testSignedPostWithBodyIsForwardedAsVerified() async throws {
        let store = InMemoryKeyIdStore()
        let client = env.client(keyStore: store)
        let body = #"{"prompt":"Write a haiku about attestation","max_tokens":64}"#
        let (data, response) = try await client.data(for: URLRequest("POST", url("/secure/generate"), body: body))
        XCTAssertEqual(response.status, 200, String(decoding: data, as: UTF8.self))
        let echo = try Echo(data)
        XCTAssertEqual(echo.path, "/echo/secure/generate")
        XCTAssertEqual(echo.body, Data(body.utf8))
        XCTAssertEqual(echo.header("X-Attest-Status"), ["verified"])
        XCTAssertEqual(echo.header("X-Attest-Key-Id"), [try XCTUnwrap(store.load())])
        XCTAssertEqual(echo.header("X-App-Attest-Assertion"), [], "the gateway consumes the App Attest headers")
    }

    func testGetWithQueryPercentEncodedPathAndTrailingSlash() async throws {
        let client = env.client()
        let (data, response) = try await client.data(for: URLRequest("GET", url("/secure/caf%C3%A9/items/?q=a%20b&tag=x+y&empty=")))
        XCTAssertEqual(response.status, 200, String(decoding: data, as: UTF8.self))
        let echo = try Echo(data)
        XCTAssertEqual(echo.path, "/echo/secure/caf%C3%A9/items/", "sent as written: encoded, trailing slash kept")
        XCTAssertEqual(echo.query, "q=a%20b&tag=x+y&empty=")
        XCTAssertEqual(echo.header("X-Attest-Status"), ["verified"])

        let (root, rootResponse) = try await client.data(for: URLRequest("DELETE", url("/secure/")))
        XCTAssertEqual(rootResponse.status, 200, String(decoding: root, as: UTF8.self))
    }

    func testSignReturnsARequestTheAppSendsItself() async throws {
        let client = env.client()
        let signed = try await client.sign(URLRequest("PUT", url("/secure/items/7"), body: #"{"qty":2}"#))
        for header in ["X-App-Attest-Key-Id", "X-App-Attest-Assertion", "X-App-Attest-Client-Data"] {
            XCTAssertNotNil(signed.value(forHTTPHeaderField: header), header)
        }
        let (_, response) = try await env.session.data(for: signed)
        XCTAssertEqual(response.status, 200)
        // The same bytes again are a replay: the challenge is used up.
        let (replay, replayResponse) = try await env.session.data(for: signed)
        XCTAssertEqual(replayResponse.status, 409)
        XCTAssertEqual((replayResponse as? HTTPURLResponse)?.value(forHTTPHeaderField: "X-Attest-Error"), "challenge_reused",
                       String(decoding: replay, as: UTF8.self))
    }

    func testTwentyParallelRequestsOfOneKeyAllPassWithCountersInOrder() async throws {
        let service = env.service()
        let store = InMemoryKeyIdStore()
        let client = env.client(service: service, keyStore: store)
        let base = env.gateway.baseURL
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<20 {
                group.addTask {
                    let request = URLRequest("POST", URL(string: base + "/secure/parallel/\(index)")!, body: "{\"n\":\(index)}")
                    let (_, response) = try await client.data(for: request)
                    return response.status
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        XCTAssertEqual(statuses, Array(repeating: 200, count: 20))
        XCTAssertEqual(service.counters, Array(1...20))
        let keyId = try XCTUnwrap(store.load())
        let lines = env.requestLines("/secure/parallel/", count: 20) { ($0["key_id"] as? String) == keyId }
        XCTAssertEqual(lines.compactMap { $0["counter"] as? Int }, Array(1...20), "the gateway accepted them in counter order")
        XCTAssertEqual(Set(lines.compactMap { $0["decision"] as? String }), ["verified"])
    }

    // MARK: - Recovery

    func testRevokedKeyIsReplacedAndReregisteredTransparently() async throws {
        let store = InMemoryKeyIdStore()
        let client = env.client(keyStore: store)
        let (_, before) = try await client.data(for: URLRequest("GET", url("/secure/profile")))
        XCTAssertEqual(before.status, 200)
        let revoked = try XCTUnwrap(store.load())
        try env.revoke(revoked)

        let (data, after) = try await client.data(for: URLRequest("GET", url("/secure/profile")))
        XCTAssertEqual(after.status, 200, String(decoding: data, as: UTF8.self))
        let current = try XCTUnwrap(store.load())
        XCTAssertNotEqual(current, revoked)
        XCTAssertEqual(try Echo(data).header("X-Attest-Key-Id"), [current])
        let refused = env.requestLines("/secure/profile", count: 1) { ($0["reason"] as? String) == "key_revoked" }
        XCTAssertEqual(refused.count, 1)
    }

    func testKeyTheGatewayForgotIsReplaced() async throws {
        let store = InMemoryKeyIdStore()
        let client = env.client(keyStore: store)
        let first = try await client.register()
        try env.flushRedis()
        let (data, response) = try await client.data(for: URLRequest("GET", url("/secure/after-flush")))
        XCTAssertEqual(response.status, 200, String(decoding: data, as: UTF8.self))
        XCTAssertNotEqual(store.load(), first)
        XCTAssertEqual(env.requestLines("/secure/after-flush", count: 2).compactMap { $0["reason"] as? String }, ["key_unknown"])
    }

    func testKeyLostOnTheDeviceIsReplaced() async throws {
        let service = env.service()
        let store = InMemoryKeyIdStore()
        let client = env.client(service: service, keyStore: store)
        let first = try await client.register()
        service.forget(first)  // generateAssertion now throws invalidKey, as after a device restore
        let (data, response) = try await client.data(for: URLRequest("GET", url("/secure/restored")))
        XCTAssertEqual(response.status, 200, String(decoding: data, as: UTF8.self))
        XCTAssertNotEqual(store.load(), first)
        XCTAssertEqual(service.attestations.count, 2)
    }

    func testAppleUnavailableDuringAttestationIsRetriedWithTheSameKeyAndHash() async throws {
        let service = env.service()
        service.failAttestations(2)
        let client = env.client(service: service)
        let keyId = try await client.register()
        let attempts = service.attestations
        XCTAssertEqual(attempts.count, 3)
        XCTAssertEqual(Set(attempts.map(\.keyId)), [keyId])
        XCTAssertEqual(Set(attempts.map(\.clientDataHash)).count, 1, "Apple's advice: the same clientDataHash")
    }

    func testExpiredChallengeIsRetriedOnceWithAFreshOne() async throws {
        let service = env.service()
        let client = env.client(service: service)
        try await client.register()
        // The first assertion takes longer than the challenge lives.
        service.delayAssertions([Double(ClientEnvironment.challengeTTL) + 1])
        let (data, response) = try await client.data(for: URLRequest("POST", url("/secure/slow-device"), body: "{}"))
        XCTAssertEqual(response.status, 200, String(decoding: data, as: UTF8.self))
        XCTAssertEqual(env.requestLines("/secure/slow-device", count: 2).map { $0["reason"] as? String }, ["challenge_expired", nil])
        XCTAssertEqual(service.counters, [1, 2])
    }

    func testGatewayOutageIsRiddenOutWithBackoff() async throws {
        let client = env.client()
        try await client.register()
        env.redis.pause()
        let redis = env.redis
        let resumed = Task.detached {
            try await Task.sleep(nanoseconds: 900_000_000)
            redis.resume()
        }
        let (data, response) = try await client.data(for: URLRequest("GET", url("/secure/during-outage")))
        _ = try await resumed.value
        XCTAssertEqual(response.status, 200, String(decoding: data, as: UTF8.self))
        let outage = env.gateway.events.filter { ($0["reason"] as? String) == "store_unavailable" }
        XCTAssertFalse(outage.isEmpty, "the gateway answered 503 at least once before the client got through")
    }

    // MARK: - Errors

    func testGatewayRefusalsAreTypedErrors() async throws {
        let client = env.client()
        _ = try await client.data(for: URLRequest("GET", url("/limited/once")))
        do {
            _ = try await client.data(for: URLRequest("GET", url("/limited/twice")))
            XCTFail("the second request is over the route's rate limit")
        } catch AttestClientError.rateLimited(let rejection) {
            XCTAssertEqual(rejection.status, 429)
            XCTAssertEqual(rejection.reason, "rate_limited")
            XCTAssertGreaterThan(rejection.retryAfterSeconds ?? 0, 0)
            XCTAssertNotNil(rejection.requestId)
        }
        do {
            _ = try await client.data(for: URLRequest("GET", url("/closed/x")))
            XCTFail("deny route")
        } catch AttestClientError.routeRefused(let rejection) {
            XCTAssertEqual(rejection.reason, "route_denied")
        }
        do {
            var streamed = URLRequest("POST", url("/secure/upload"))
            streamed.httpBodyStream = InputStream(data: Data("{}".utf8))
            _ = try await client.data(for: streamed)
            XCTFail("a body stream cannot be hashed")
        } catch AttestClientError.invalidRequest {}
        // An upstream's own error is an answer, not a refusal.
        let (_, passed) = try await client.data(for: URLRequest("GET", url("/anything")))
        XCTAssertEqual(passed.status, 200)
    }

    func testUnsupportedDeviceWithoutDeviceCheckIsToldSo() async throws {
        let service = env.service()
        service.isSupported = false
        let client = env.client(service: service)
        do {
            _ = try await client.data(for: URLRequest("GET", url("/secure/x")))
            XCTFail("nothing can prove this device")
        } catch AttestClientError.unsupported {}
        XCTAssertEqual(service.keyIds, [], "no key is generated where App Attest is unsupported")
    }

    // MARK: - DeviceCheck

    func testDeviceCheckFallbackWhereAppAttestIsUnsupported() async throws {
        let service = env.service()
        service.isSupported = false
        let client = env.client(service: service, deviceCheck: FakeDeviceTokens(device: "old-iphone"))
        for _ in 0..<2 {
            let (data, response) = try await client.data(for: URLRequest("POST", url("/fallback/feed"), body: "{}"))
            XCTAssertEqual(response.status, 200, String(decoding: data, as: UTF8.self))
            let echo = try Echo(data)
            XCTAssertEqual(echo.header("X-Attest-Status"), ["devicecheck"])
            XCTAssertEqual(echo.header("X-App-Attest-Key-Id"), [])
        }
        let tokens = env.apple.requests(to: "/v1/validate_device_token").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any])?["device_token"] as? String
        }.filter { Data(base64Encoded: $0).map { String(decoding: $0, as: UTF8.self).hasPrefix("old-iphone:") } ?? false }
        XCTAssertEqual(Set(tokens).count, 2, "a fresh token for every request")
        XCTAssertEqual(service.keyIds, [])
    }

    func testSignedRequestGetsADeviceTokenWhenTheRouteAsksForOne() async throws {
        let client = env.client(deviceCheck: FakeDeviceTokens(device: "new-iphone"))
        let (data, response) = try await client.data(for: URLRequest("GET", url("/flagged/feed")))
        XCTAssertEqual(response.status, 200, String(decoding: data, as: UTF8.self))
        XCTAssertEqual(try Echo(data).header("X-Attest-Status"), ["verified"])
        XCTAssertEqual(env.requestLines("/flagged/feed", count: 2).map { $0["reason"] as? String }, ["device_token_missing", nil])
    }

    // MARK: - Debug provider

    func testDebugTokenPassesWhereAllowedAndIsLoggedAndCounted() async throws {
        let service = env.service()
        let client = env.client(service: service, debug: DebugProvider(token: ClientEnvironment.debugSecret))
        let (data, response) = try await client.data(for: URLRequest("POST", url("/secure/from-simulator"), body: "{}"))
        XCTAssertEqual(response.status, 200, String(decoding: data, as: UTF8.self))
        let echo = try Echo(data)
        XCTAssertEqual(echo.header("X-Attest-Status"), ["debug"])
        XCTAssertEqual(echo.header("X-Attest-Debug-Name"), ["ci"])
        XCTAssertEqual(echo.header("X-App-Attest-Debug-Token"), [], "the secret never reaches the upstream")
        XCTAssertEqual(service.keyIds, [], "no App Attest key is made in debug mode")
        let line = try XCTUnwrap(env.requestLines("/secure/from-simulator", count: 1).last)
        XCTAssertEqual(line["decision"] as? String, "debug")
        XCTAssertEqual(line["debug_token"] as? String, "ci")
        XCTAssertFalse(env.gateway.process.lines.joined().contains(ClientEnvironment.debugSecret), "the secret is never logged")
        // Exported at 0 from the start: the count is read (counted just after the log line, hence the retries).
        let series = #"gateway_debug_requests_total{token="ci"}"#
        var metrics = try await env.metrics()
        for _ in 0..<100 where (MetricsText.sample(series, in: metrics) ?? 0) < 1 {
            try await Task.sleep(nanoseconds: 20_000_000)
            metrics = try await env.metrics()
        }
        XCTAssertGreaterThanOrEqual(MetricsText.sample(series, in: metrics) ?? 0, 1, metrics)
    }

    func testDebugTokenIsRefusedWhereNotAllowedOrNotConfigured() async throws {
        let client = env.client(debug: DebugProvider(token: ClientEnvironment.debugSecret))
        do {
            _ = try await client.data(for: URLRequest("GET", url("/no-debug/x")))
            XCTFail("allow_debug: false")
        } catch AttestClientError.debugTokenRefused(let rejection) {
            XCTAssertEqual(rejection.status, 403)
            XCTAssertEqual(rejection.reason, "debug_token_refused")
        }
        let stranger = env.client(debug: DebugProvider(token: "not-a-configured-secret"))
        do {
            _ = try await stranger.data(for: URLRequest("GET", url("/secure/x")))
            XCTFail("a token the gateway does not list")
        } catch AttestClientError.debugTokenRefused(let rejection) {
            XCTAssertEqual(rejection.status, 401)
            XCTAssertEqual(rejection.reason, "debug_token_invalid")
        }
        // In report mode a bad token is forwarded, marked like any failed check.
        let (reported, _) = try await stranger.data(for: URLRequest("GET", url("/report/x")))
        XCTAssertEqual(try Echo(reported).header("X-Attest-Status"), ["report_failed:debug_token_invalid"])
        // A client's own X-Attest-Status is dropped even on pass routes, and the debug header never forwarded.
        var forged = URLRequest("GET", url("/public"))
        forged.setValue("debug", forHTTPHeaderField: "X-Attest-Status")
        let (data, _) = try await stranger.data(for: forged)
        XCTAssertEqual(try Echo(data).header("X-Attest-Status"), ["unverified"])
        XCTAssertEqual(try Echo(data).header("X-App-Attest-Debug-Token"), [])
    }
}
