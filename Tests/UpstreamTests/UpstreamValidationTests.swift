import Upstream
import XCTest

/// Bad configuration and requests are refused with a typed error before anything is sent.
final class UpstreamValidationTests: XCTestCase {
    private func reasonCode(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return (error as? UpstreamError)?.reasonCode
        }
    }

    func testTargetsMustBeHTTPBaseURLsWithPositiveTimeouts() throws {
        for url in ["ftp://127.0.0.1", "http://", "127.0.0.1:8080", "http://h/p?q=1", "http://h/a b", "http://h/#x"] {
            XCTAssertEqual(reasonCode { _ = try UpstreamTarget(baseURL: url, connectTimeoutMs: 100, timeoutMs: 100) },
                           "upstream_invalid_target", url)
        }
        XCTAssertEqual(reasonCode { _ = try UpstreamTarget(baseURL: "http://h", connectTimeoutMs: 0, timeoutMs: 100) },
                       "upstream_invalid_target")
        XCTAssertEqual(reasonCode { _ = try UpstreamTarget(baseURL: "http://h", connectTimeoutMs: 10, timeoutMs: -1) },
                       "upstream_invalid_target")
        let target = try UpstreamTarget(baseURL: "HTTPS://api.example:8443/v2/", connectTimeoutMs: 10, timeoutMs: 10)
        XCTAssertEqual(target.baseURL, "HTTPS://api.example:8443/v2")
    }

    func testMalformedRequestsAreRefused() throws {
        // Port 9 on loopback: nothing is sent, validation fails first.
        let client = UpstreamClient(target: try UpstreamTarget(
            baseURL: "http://127.0.0.1:9", connectTimeoutMs: 100, timeoutMs: 100))
        let requests = [
            UpstreamRequest(method: "GE T", pathAndQuery: "/"),
            UpstreamRequest(method: "", pathAndQuery: "/"),
            UpstreamRequest(method: "GET", pathAndQuery: "no-slash"),
            UpstreamRequest(method: "GET", pathAndQuery: "/a b"),
            UpstreamRequest(method: "GET", pathAndQuery: "/a\r\nX-Injected: 1"),
            UpstreamRequest(method: "GET", pathAndQuery: "/", headers: [HTTPField("X-A", "1\r\nX-Injected: 1")]),
            UpstreamRequest(method: "GET", pathAndQuery: "/", headers: [HTTPField("Bad Name", "1")]),
            UpstreamRequest(method: "GET", pathAndQuery: "/", headers: [HTTPField("X-Nul", "a\u{0}b")]),
            UpstreamRequest(method: "HEAD", pathAndQuery: "/", body: [1]),
        ]
        for request in requests {
            XCTAssertEqual(reasonCode { _ = try client.send(request) }, "upstream_invalid_request", "\(request)")
        }
    }
}
