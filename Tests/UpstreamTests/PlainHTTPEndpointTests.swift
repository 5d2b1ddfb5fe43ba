@testable import Upstream
import XCTest

/// Which base URLs the loops' own HTTP/1.1 client takes, and what it makes of them.
final class PlainHTTPEndpointTests: XCTestCase {
    func testHTTPBaseURLsAreTakenApart() throws {
        let plain = try XCTUnwrap(PlainHTTPEndpoint(baseURL: "http://api.internal"))
        XCTAssertEqual([plain.host, plain.hostHeader, plain.poolKey, plain.pathPrefix], ["api.internal", "api.internal", "api.internal:80", ""])
        XCTAssertEqual(plain.port, 80)
        let prefixed = try XCTUnwrap(PlainHTTPEndpoint(baseURL: "HTTP://127.0.0.1:8081/api/v1"))
        XCTAssertEqual([prefixed.host, prefixed.hostHeader, prefixed.pathPrefix], ["127.0.0.1", "127.0.0.1:8081", "/api/v1"])
        XCTAssertEqual(prefixed.port, 8081)
        let v6 = try XCTUnwrap(PlainHTTPEndpoint(baseURL: "http://[::1]:9000"))
        XCTAssertEqual([v6.host, v6.hostHeader, v6.poolKey], ["::1", "[::1]:9000", "[::1]:9000"])
        XCTAssertEqual(PlainHTTPEndpoint(baseURL: "http://[::1]")?.hostHeader, "[::1]")
    }

    func testWhatTheClientDoesNotDoStaysWithCurl() {
        for url in ["https://api.example.com", "http://user:secret@api.internal", "http://host:0", "http://host:65536", "http://host:8x",
                    "http://[::1", "http://[::1]x", "http://:80", "http://"] {
            XCTAssertNil(PlainHTTPEndpoint(baseURL: url), url)
        }
        XCTAssertNil(try UpstreamTarget(baseURL: "https://api.example.com", connectTimeoutMs: 1000, timeoutMs: 1000).plainHTTP)
        XCTAssertNotNil(try UpstreamTarget(baseURL: "http://api.example.com/", connectTimeoutMs: 1000, timeoutMs: 1000).plainHTTP)
    }
}
