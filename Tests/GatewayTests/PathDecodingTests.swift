import Gateway
import XCTest

final class PathDecodingTests: XCTestCase {
    func testDecodesPercentEscapes() {
        XCTAssertEqual(PathDecoding.decode("/"), "/")
        XCTAssertEqual(PathDecoding.decode("/v1/ai/chat"), "/v1/ai/chat")
        XCTAssertEqual(PathDecoding.decode("/a%20b/%7euser"), "/a b/~user")
        XCTAssertEqual(PathDecoding.decode("/caf%C3%A9"), "/caf\u{E9}")
        XCTAssertEqual(PathDecoding.decode("/q%3Fx%23y%25"), "/q?x#y%", "escaped ? # % stay data")
        XCTAssertEqual(PathDecoding.decode("/dir/"), "/dir/", "a trailing slash is fine")
        XCTAssertEqual(PathDecoding.decode("/.well-known/x..y/..."), "/.well-known/x..y/...")
    }

    func testRefusesMalformedEscapes() {
        for path in ["/a%", "/a%2", "/a%zz", "/a%g0", "/%%41"] {
            XCTAssertNil(PathDecoding.decode(path), path)
        }
    }

    func testRefusesNULAndNonUTF8() {
        XCTAssertNil(PathDecoding.decode("/a%00b"))
        XCTAssertNil(PathDecoding.decode("/a\u{0}b"))
        XCTAssertNil(PathDecoding.decode("/%C3"), "truncated sequence")
        XCTAssertNil(PathDecoding.decode("/%FF"))
        XCTAssertNil(PathDecoding.decode("/%C0%AF"), "overlong encoding of /")
    }

    /// A decoded control byte: some frameworks trim it, a route regex ending in `$` lets a final newline through.
    func testRefusesEncodedControlBytes() {
        for path in ["/admin%0A", "/admin%0d/x", "/a%09", "/a%0Bb", "/a%1F", "/a%7F", "/a%7f/b"] {
            XCTAssertNil(PathDecoding.decode(path), path)
        }
        XCTAssertEqual(PathDecoding.decode("/a%20b%7E"), "/a b~")
    }

    func testRefusesEncodedSlashesAndBackslashes() {
        for path in ["/a%2Fb", "/a%2fb", "/a\\b", "/a%5Cb", "/a%5cb"] {
            XCTAssertNil(PathDecoding.decode(path), path)
        }
    }

    func testRefusesDotSegmentsEmptySegmentsAndRelativePaths() {
        for path in ["/../etc", "/a/./b", "/a/..", "/a/.", "/a/%2e%2e/b", "/a/%2E/b", "/a/.%2e", "//a", "/a//b",
                     "", "a/b", "*"] {
            XCTAssertNil(PathDecoding.decode(path), path)
        }
    }

    func testCombiningMarksCannotHideADotSegment() {
        XCTAssertNil(PathDecoding.decode("/a/../\u{301}"), "the slash fuses with the mark as a Character, not as bytes")
        XCTAssertNil(PathDecoding.decode("/a/%2e%2e/%CC%81"))
    }
}
