@testable import AppAttestClient
import AssertionCheck
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import XCTest

/// The client's pure parts: its SHA-256, the client data it signs, the error mapping, the debug provider.
final class ClientPartsTests: XCTestCase {
    func hex(_ data: Data) -> String { data.map { String(format: "%02x", $0) }.joined() }

    func testSHA256MatchesTheStandardVectorsAndOpenSSL() {
        XCTAssertEqual(hex(AppAttestClient.SHA256.hash(Data())), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(hex(AppAttestClient.SHA256.hash(Data("abc".utf8))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(hex(AppAttestClient.SHA256.hash(Data("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        // Every padding case (lengths around the 55/56/64-byte block edges) against OpenSSL.
        for length in 0..<300 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255) }
            XCTAssertEqual([UInt8](AppAttestClient.SHA256.hash(Data(bytes))), AssertionCheck.SHA256.hash(bytes), "length \(length)")
        }
    }

    func clientData(_ method: String, _ url: String, body: String? = nil) throws -> [String: String] {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = method
        request.httpBody = body.map { Data($0.utf8) }
        let encoded = try RequestClientData(request).encoded(challenge: "c\"hal/lenge")
        return try XCTUnwrap(JSONSerialization.jsonObject(with: encoded) as? [String: String])
    }

    func testClientDataDescribesTheRequestAsTheGatewayChecksIt() throws {
        let post = try clientData("POST", "https://api.example.com/secure/caf%C3%A9/items/?q=a%20b&tag=x+y", body: #"{"item":"tea","qty":2}"#)
        XCTAssertEqual(post, ["challenge": "c\"hal/lenge", "method": "POST", "path": "/secure/café/items/", "query": "q=a%20b&tag=x+y",
                              "bodySHA256": "lA1Xqqzu8iw5bx+5pEvpcHTlhRBudvuWiS797onPSno="])
        let get = try clientData("GET", "https://api.example.com")
        XCTAssertEqual(get["path"], "/", "an empty path goes out as /")
        XCTAssertNil(get["query"], "no query, no member")
        XCTAssertEqual(get["bodySHA256"], "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")
        XCTAssertEqual(try clientData("GET", "https://api.example.com/a?")["query"], "", "an empty query is still a query")
    }

    func testRequestsThatCannotBeSignedAreRefusedUpFront() {
        var request = URLRequest(url: URL(string: "https://api.example.com/upload")!)
        request.httpBodyStream = InputStream(data: Data())
        XCTAssertThrowsError(try RequestClientData(request)) { error in
            guard case AttestClientError.invalidRequest = error else { return XCTFail("\(error)") }
        }
    }

    func testGatewayReasonCodesMapToTheCasesAnAppSwitchesOn() {
        func mapped(_ status: Int, _ reason: String, registering: Bool = false) -> AttestClientError {
            AttestClientError.gateway(GatewayRejection(status: status, reason: reason, message: ""), registering: registering)
        }
        func name(_ error: AttestClientError) -> String { String(describing: error).prefix { $0 != "(" }.description }
        let expected: [(Int, String, String)] = [
            (401, "assertion_missing", "unsupported"), (403, "key_revoked", "keyRevoked"), (429, "rate_limited", "rateLimited"),
            (403, "device_flagged", "deviceRefused"), (403, "risk_too_high", "deviceRefused"),
            (401, "device_token_invalid", "deviceRefused"), (409, "device_token_reused", "deviceRefused"),
            (409, "already_claimed", "alreadyClaimed"), (409, "claim_in_progress", "alreadyClaimed"),
            (401, "debug_token_invalid", "debugTokenRefused"), (403, "debug_token_refused", "debugTokenRefused"),
            (403, "route_denied", "routeRefused"), (404, "route_not_found", "routeRefused"), (405, "method_not_allowed", "routeRefused"),
            (413, "body_too_large", "routeRefused"), (503, "store_unavailable", "unavailable"), (503, "apple_unavailable", "unavailable"),
            (502, "upstream_unavailable", "unavailable"), (504, "upstream_timeout", "unavailable"),
            (401, "path_mismatch", "rejected"), (400, "bad_header", "rejected"), (409, "challenge_reused", "rejected"),
        ]
        for (status, reason, caseName) in expected {
            XCTAssertEqual(name(mapped(status, reason)), caseName, reason)
        }
        XCTAssertEqual(name(mapped(401, "environment_mismatch", registering: true)), "registrationRefused")
        XCTAssertEqual(name(mapped(401, "chain_invalid", registering: true)), "registrationRefused")
        XCTAssertEqual(name(mapped(400, "bad_request", registering: true)), "rejected")
        XCTAssertEqual(mapped(403, "key_revoked").rejection?.reason, "key_revoked")
        XCTAssertNil(AttestClientError.unsupported.rejection)
    }

    func testDebugProviderReadsTheBuildEnvironment() {
        XCTAssertEqual(DebugProvider.fromEnvironment(environment: ["APP_ATTEST_DEBUG_TOKEN": " s3cret\n"])?.token, "s3cret")
        XCTAssertNil(DebugProvider.fromEnvironment(environment: ["APP_ATTEST_DEBUG_TOKEN": ""]))
        XCTAssertNil(DebugProvider.fromEnvironment(environment: [:]))
        XCTAssertEqual(DebugProvider(token: "abc").sha256Hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    func testBackoffGrowsWithJitterAndStopsAtTheCap() {
        let backoff = Backoff(maxAttempts: 5, initialDelay: 0.5, maxDelay: 2)
        for attempt in 1...6 {
            let nominal = min(2, 0.5 * pow(2, Double(attempt - 1)))
            let delay = backoff.delay(after: attempt)
            XCTAssertTrue((nominal / 2...nominal).contains(delay), "attempt \(attempt): \(delay)")
        }
    }
}
