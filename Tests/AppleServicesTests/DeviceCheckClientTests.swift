import AppleServices
import AssertionCheck
import Foundation
import TestSupport
import XCTest

/// DeviceCheck against the fake Apple server over real loopback HTTP.
final class DeviceCheckClientTests: XCTestCase {
    private var apple: FakeAppleServer!
    private let calls = CallLog()
    private let device = Base64.encode(Array("a device token from DCDevice".utf8))

    override func setUpWithError() throws {
        apple = try TestKeys.fakeApple()
    }

    override func tearDown() {
        apple?.stop()
        apple = nil
    }

    private func client(key: String = TestKeys.signing, baseURL: String? = nil, timeoutMs: Int = 5000,
                        retry: AppleRetryPolicy = AppleRetryPolicy(maxAttempts: 3, initialDelay: 0.1, maxDelay: 1, jitter: 0)) throws -> DeviceCheckClient {
        let options = AppleServiceOptions(connectTimeoutMs: 1000, timeoutMs: timeoutMs, retry: retry, observer: calls.observer)
        return try DeviceCheckClient(baseURL: baseURL ?? apple.baseURL, jwt: TestKeys.jwt(key), options: options)
    }

    private func json(_ request: FakeAppleServer.Request) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
    }

    // MARK: - Apple's documented answers

    func testQueryOfADeviceNeverSetAnswersBothBitsFalse() throws {
        let bits = try client().query(deviceToken: device)
        XCTAssertEqual(bits, TwoBits(bit0: false, bit1: false, lastUpdate: nil))
        XCTAssertEqual(apple.requests.count, 1)
    }

    func testUpdateThenQueryReturnsTheBitsAndTheMonth() throws {
        let client = try client()
        try client.update(deviceToken: device, bit0: true, bit1: false)
        let bits = try client.query(deviceToken: device)
        XCTAssertTrue(bits.bit0)
        XCTAssertFalse(bits.bit1)
        XCTAssertEqual(bits.lastUpdate, String(ISO8601DateFormatter().string(from: Date()).prefix(7)))

        try client.update(deviceToken: device, bit0: false, bit1: true)
        XCTAssertEqual(try client.query(deviceToken: device).bit1, true)
        // Bits belong to one device token.
        XCTAssertNil(try client.query(deviceToken: Base64.encode([1, 2, 3])).lastUpdate)
    }

    func testRequestsCarryApplesPayloadAndABearerJWT() throws {
        let client = try client()
        let before = Date().timeIntervalSince1970 * 1000
        try client.validate(deviceToken: device)
        try client.update(deviceToken: device, bit0: true, bit1: true)
        let after = Date().timeIntervalSince1970 * 1000

        let requests = apple.requests
        XCTAssertEqual(requests.map(\.path), ["/v1/validate_device_token", "/v1/update_two_bits"])
        let validate = try json(requests[0])
        XCTAssertEqual(Set(validate.keys), ["device_token", "transaction_id", "timestamp"])
        XCTAssertEqual(validate["device_token"] as? String, device)
        let timestamp = try XCTUnwrap(validate["timestamp"] as? Double)
        XCTAssertTrue((before.rounded(.down)...after).contains(timestamp), "\(timestamp)")
        let update = try json(requests[1])
        XCTAssertEqual(update["bit0"] as? Bool, true)
        XCTAssertEqual(update["bit1"] as? Bool, true)
        let transactions = [validate, update].compactMap { $0["transaction_id"] as? String }
        XCTAssertEqual(Set(transactions).count, 2)
        XCTAssertNotNil(UUID(uuidString: transactions[0]))
        for request in requests {
            XCTAssertTrue(request.jwtVerified)
            XCTAssertEqual(request.header("Authorization")?.hasPrefix("Bearer ey"), true)
            XCTAssertEqual(request.header("Content-Type"), "application/json")
        }
        // The cached JWT served both calls.
        XCTAssertEqual(requests[0].header("Authorization"), requests[1].header("Authorization"))
    }

    // MARK: - Failures that are not retried

    func testRejectedDeviceTokenIsNotRetried() throws {
        assertFails("apple_rejected_token") { try client().validate(deviceToken: Base64.encode(Array("bad token".utf8))) }
        XCTAssertEqual(apple.requests.count, 1)
        XCTAssertEqual(calls.all.map(\.status), [400])
        XCTAssertEqual(calls.all.map(\.willRetry), [false])
    }

    func testMalformedDeviceTokenIsNotSent() throws {
        let client = try client()
        for token in ["", "not base64!", String(repeating: "A", count: 16 * 1024 + 4)] {
            assertFails("apple_rejected_token") { _ = try client.query(deviceToken: token) }
        }
        XCTAssertTrue(apple.requests.isEmpty)
    }

    func testUnknownSigningKeyIsAnAuthFailureThatDropsTheToken() throws {
        let client = try client(key: TestKeys.other)
        assertFails("apple_auth_failed") { _ = try client.query(deviceToken: device) }
        XCTAssertEqual(apple.requests.count, 1)
        assertFails("apple_auth_failed") { _ = try client.query(deviceToken: device) }
        let tokens = apple.requests.compactMap { $0.header("Authorization") }
        XCTAssertEqual(tokens.count, 2)
        XCTAssertNotEqual(tokens[0], tokens[1], "a refused JWT must not be sent again")
        XCTAssertFalse(apple.requests.contains { $0.jwtVerified })
    }

    func testUndocumentedAnswersAreBadResponses() throws {
        apple.script("/v1/query_two_bits", [.status(403, "Forbidden"), .status(200, "{\"bit0\":1}"), .status(302, "")])
        let client = try client()
        for _ in 0..<3 { assertFails("apple_bad_response") { _ = try client.query(deviceToken: device) } }
        XCTAssertEqual(apple.requests.count, 3)
    }

    // MARK: - Retries, backoff, timeouts

    func testTooManyRequestsIsRetriedAndThenSucceeds() throws {
        apple.script("/v1/query_two_bits", [.status(429, "Too Many Requests")])
        XCTAssertEqual(try client().query(deviceToken: device).bit0, false)
        let requests = apple.requests
        XCTAssertEqual(requests.count, 2)
        XCTAssertGreaterThanOrEqual(requests[1].receivedAt.timeIntervalSince(requests[0].receivedAt), 0.09)
        XCTAssertEqual(calls.all.map(\.status), [429, 200])
        XCTAssertEqual(calls.all.map(\.outcome), ["apple_unavailable", "ok"])
        XCTAssertEqual(calls.all.map(\.attempt), [1, 2])
        XCTAssertEqual(calls.all.map(\.willRetry), [true, false])
        XCTAssertEqual(Set(calls.all.map(\.endpoint)), [.queryTwoBits])
    }

    func testServerErrorsAreRetriedWithExponentialBackoffThenFail() throws {
        apple.script("/v1/update_two_bits", Array(repeating: .status(500, "Internal Server Error"), count: 3))
        assertFails("apple_unavailable") { try client().update(deviceToken: device, bit0: true, bit1: false) }
        let requests = apple.requests
        XCTAssertEqual(requests.count, 3)
        let gaps = zip(requests.dropFirst(), requests).map { $0.receivedAt.timeIntervalSince($1.receivedAt) }
        XCTAssertGreaterThanOrEqual(gaps[0], 0.09)
        XCTAssertGreaterThanOrEqual(gaps[1], 0.19, "the second pause doubles")
        XCTAssertLessThan(gaps[1], 1.5)
        // A retry is the same transaction.
        let transactions = try requests.map { try json($0)["transaction_id"] as? String }
        XCTAssertEqual(Set(transactions).count, 1)
        XCTAssertEqual(calls.all.map(\.willRetry), [true, true, false])
    }

    func testJitterShortensPausesWithinItsFraction() {
        let policy = AppleRetryPolicy(maxAttempts: 5, initialDelay: 0.2, maxDelay: 0.5, jitter: 0.5)
        XCTAssertEqual(policy.delay(afterAttempt: 1, random: 0), 0.2, accuracy: 1e-9)
        XCTAssertEqual(policy.delay(afterAttempt: 1, random: 1), 0.1, accuracy: 1e-9)
        XCTAssertEqual(policy.delay(afterAttempt: 2, random: 0), 0.4, accuracy: 1e-9)
        XCTAssertEqual(policy.delay(afterAttempt: 3, random: 0), 0.5, accuracy: 1e-9, "capped at maxDelay")
        XCTAssertEqual(policy.delay(afterAttempt: 60, random: 0.5), 0.375, accuracy: 1e-9)
        let clamped = AppleRetryPolicy(maxAttempts: 0, initialDelay: -1, maxDelay: -1, jitter: 7)
        XCTAssertEqual(clamped.maxAttempts, 1)
        XCTAssertEqual(clamped.delay(afterAttempt: 1, random: 0.3), 0)
    }

    func testSlowAnswerTimesOut() throws {
        apple.script("/v1/query_two_bits", [.slow(3)])
        let started = Date()
        assertFails("apple_timeout") { _ = try client(timeoutMs: 300, retry: .never).query(deviceToken: device) }
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
        XCTAssertEqual(calls.all.map(\.outcome), ["apple_timeout"])
        XCTAssertNil(calls.all.first?.status)
    }

    func testUnreachableServerIsUnavailableAfterRetries() throws {
        let closedPort = TestPaths.freePort()
        let retry = AppleRetryPolicy(maxAttempts: 2, initialDelay: 0.05, maxDelay: 0.05, jitter: 0)
        assertFails("apple_unavailable") {
            try client(baseURL: "http://127.0.0.1:\(closedPort)", retry: retry).validate(deviceToken: device)
        }
        XCTAssertEqual(calls.all.count, 2)
        XCTAssertEqual(calls.all.map(\.status), [nil, nil])
        XCTAssertEqual(calls.all.map(\.outcome), ["apple_unavailable", "apple_unavailable"])
    }

    func testObserverSeesEveryCallButNoSecrets() throws {
        let client = try client()
        try client.validate(deviceToken: device)
        _ = try client.query(deviceToken: device)
        let seen = calls.all
        XCTAssertEqual(seen.map(\.endpoint), [.validateDeviceToken, .queryTwoBits])
        XCTAssertTrue(seen.allSatisfy { $0.latency >= 0 && $0.latency < 5 })
        let jwt = try XCTUnwrap(apple.requests.first?.header("Authorization")).dropFirst("Bearer ".count)
        var printed = ""
        dump(seen, to: &printed)
        XCTAssertFalse(printed.contains(String(jwt.prefix(20))))
        XCTAssertFalse(printed.contains(device))
    }

    func testBaseURLMustBeHTTP() {
        assertFails("apple_invalid_configuration") {
            _ = try DeviceCheckClient(baseURL: "ftp://127.0.0.1", jwt: TestKeys.jwt())
        }
        XCTAssertEqual(AppleServiceBase.deviceCheck(.production), "https://api.devicecheck.apple.com")
        XCTAssertEqual(AppleServiceBase.deviceCheck(.development), "https://api.development.devicecheck.apple.com")
    }
}
