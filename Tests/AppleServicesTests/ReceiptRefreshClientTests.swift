import AppleServices
import AssertionCheck
import Foundation
import TestSupport
import XCTest

/// App Attest's attestationData exchange against the fake Apple server over real loopback HTTP.
final class ReceiptRefreshClientTests: XCTestCase {
    private var apple: FakeAppleServer!
    private let receipt: [UInt8] = [0x30, 0x80, 0x06, 0x09] + Array("stored receipt".utf8)

    override func setUpWithError() throws {
        apple = try TestKeys.fakeApple()
    }

    override func tearDown() {
        apple?.stop()
        apple = nil
    }

    private func client() throws -> ReceiptRefreshClient {
        let retry = AppleRetryPolicy(maxAttempts: 2, initialDelay: 0.05, maxDelay: 0.05, jitter: 0)
        return try ReceiptRefreshClient(baseURL: apple.baseURL, jwt: TestKeys.jwt(), options: AppleServiceOptions(retry: retry))
    }

    func testOKReturnsTheNewReceiptDecoded() throws {
        XCTAssertEqual(try client().exchange(receipt: receipt), .refreshed(apple.refreshedReceipt))
        let request = try XCTUnwrap(apple.requests.first)
        XCTAssertEqual(request.path, "/v1/attestationData")
        XCTAssertEqual(String(decoding: request.body, as: UTF8.self), Base64.encode(receipt))
        XCTAssertTrue(request.jwtVerified)
        // The JWT alone, without "Bearer".
        XCTAssertEqual(request.header("Authorization")?.hasPrefix("ey"), true)
    }

    func testARefreshedReceiptVerifiesAndCarriesTheRiskMetric() throws {
        guard case .refreshed(let refreshed) = try client().exchange(receipt: receipt) else {
            return XCTFail("expected a new receipt")
        }
        let key = try P256PublicKey(bytes: XCTUnwrap(Base64.decode(RealRefreshedReceipt.publicKeyPoint)))
        let verified = try ReceiptVerifier.verify(receipt: refreshed, appID: RealRefreshedReceipt.appID, publicKey: key,
                                                  at: RealRefreshedReceipt.verifyAt)
        XCTAssertEqual(verified.kind, .receipt)
        XCTAssertEqual(verified.riskMetric, 3)
    }

    func testNotModifiedMeansTooEarly() throws {
        apple.script("/v1/attestationData", [.status(304, "")])
        XCTAssertEqual(try client().exchange(receipt: receipt), .tooEarly)
    }

    func testNotFoundMeansNoData() throws {
        apple.script("/v1/attestationData", [.status(404, "")])
        XCTAssertEqual(try client().exchange(receipt: receipt), .noData)
        XCTAssertEqual(apple.requests.count, 1)
    }

    func testRefusalsAndOutagesMapToTheirReasons() throws {
        apple.script("/v1/attestationData", [
            .status(400, "Bad receipt"), .status(401, ""), .status(503, ""), .status(503, ""), .status(200, "%%not base64%%"),
        ])
        let client = try client()
        assertFails("apple_rejected_token") { _ = try client.exchange(receipt: receipt) }
        assertFails("apple_auth_failed") { _ = try client.exchange(receipt: receipt) }
        assertFails("apple_unavailable") { _ = try client.exchange(receipt: receipt) }
        assertFails("apple_bad_response") { _ = try client.exchange(receipt: receipt) }
        XCTAssertEqual(apple.requests.count, 5)
    }

    func testEmptyOrHugeReceiptIsNotSent() throws {
        let client = try client()
        assertFails("apple_rejected_token") { _ = try client.exchange(receipt: []) }
        assertFails("apple_rejected_token") { _ = try client.exchange(receipt: [UInt8](repeating: 1, count: 64 * 1024 + 1)) }
        XCTAssertTrue(apple.requests.isEmpty)
    }

    func testProductionHosts() {
        XCTAssertEqual(AppleServiceBase.appAttestData(.production), "https://data.appattest.apple.com")
        XCTAssertEqual(AppleServiceBase.appAttestData(.development), "https://data-development.appattest.apple.com")
    }
}
