import AssertionCheck
import Foundation
import GoogleServices
import Synchronization
import TestSupport
import Upstream
import XCTest

/// A clock the test moves by hand.
final class TestClock: Sendable {
    private let now: Mutex<Date>

    init(_ start: Date = Date()) { now = Mutex(start) }

    var date: Date { now.withLock { $0 } }

    func advance(_ seconds: TimeInterval) { now.withLock { $0 += seconds } }
}

/// Every attempt the client reports, in order.
final class GoogleCallLog: Sendable {
    private let calls = Mutex<[GoogleCall]>([])

    var observer: GoogleCallObserver { { [self] call in calls.withLock { $0.append(call) } } }

    var all: [GoogleCall] { calls.withLock { $0 } }
}

enum Verdicts {
    static let packageName = "com.example.app"

    /// The shape of Google's tokenPayloadExternal for a standard request.
    static let genuine = """
    {"requestDetails":{"requestPackageName":"com.example.app","requestHash":"aGFzaA","timestampMillis":"1617893780000"},\
    "appIntegrity":{"appRecognitionVerdict":"PLAY_RECOGNIZED","packageName":"com.example.app",\
    "certificateSha256Digest":["6a6a1474b5cbbb2b1aa57e0bc3"],"versionCode":"42"},\
    "deviceIntegrity":{"deviceRecognitionVerdict":["MEETS_DEVICE_INTEGRITY"]},\
    "accountDetails":{"appLicensingVerdict":"LICENSED"},"testFlag":true,"testNumber":12}
    """
}

/// The error a call threw, as its reason code (nil when it succeeded).
func reasonCode(_ body: () async throws -> Void) async -> String? {
    do {
        try await body()
        return nil
    } catch let error as GoogleServiceError {
        return error.reasonCode
    } catch {
        return "unexpected: \(error)"
    }
}

func assertReason(_ expected: String, _ message: String = "", file: StaticString = #filePath, line: UInt = #line,
                  _ body: () async throws -> Void) async {
    let code = await reasonCode(body)
    XCTAssertEqual(code, expected, message, file: file, line: line)
}

func serviceError(_ body: () async throws -> Void) async -> GoogleServiceError? {
    do {
        try await body()
        return nil
    } catch {
        return error as? GoogleServiceError
    }
}

func jsonObject(_ bytes: [UInt8]) throws -> NSDictionary {
    try XCTUnwrap(JSONSerialization.jsonObject(with: Data(bytes)) as? NSDictionary)
}

/// The parts of a compact JWS, decoded.
struct JWSParts {
    let header: [String: Any]
    let claims: [String: Any]
    let signature: [UInt8]
    let signingInput: String

    init(_ token: String) throws {
        let encoded = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        XCTAssertEqual(encoded.count, 3)
        for part in encoded { XCTAssertFalse(part.contains("=") || part.contains("+") || part.contains("/"), "base64url without padding: \(part)") }
        let decoded = try encoded.map { part in try XCTUnwrap(Base64.decode(part), "not base64url: \(part)") }
        header = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(decoded[0])) as? [String: Any])
        claims = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(decoded[1])) as? [String: Any])
        signature = decoded[2]
        signingInput = encoded[0] + "." + encoded[1]
    }
}
