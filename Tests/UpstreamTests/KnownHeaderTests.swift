import Upstream
import XCTest

/// A field's name is classified once (`HTTPField.known`) and the rules compare codes where they compared names:
/// the code must be known exactly when `hasName` would have matched its spelling.
final class KnownHeaderTests: XCTestCase {
    private func assertAgreesWithHasName(_ name: String, file: StaticString = #filePath, line: UInt = #line) {
        let field = HTTPField(name, "v")
        for code in KnownHeader.allCases where code != .other {
            XCTAssertEqual(field.known == code, field.hasName(code.spelling), "\(name.debugDescription) as \(code)", file: file, line: line)
        }
        if field.known == .other {
            XCTAssertFalse(KnownHeader.allCases.contains { $0 != .other && field.hasName($0.spelling) }, name.debugDescription)
        }
    }

    func testKnownExactlyWhenTheNameMatchesCaseInsensitively() {
        for code in KnownHeader.allCases where code != .other {
            for name in [code.spelling, code.spelling.lowercased(), code.spelling.uppercased()] {
                XCTAssertEqual(HTTPField(name, "v").known, code, name)
            }
            // Every byte changed in turn, to bytes that fold onto others (CR | 0x20 is "-") or look alike.
            let bytes = Array(code.spelling.utf8)
            for index in bytes.indices {
                for replacement: UInt8 in [0x0D, 0x5F, 0x7F, 0x00, bytes[index] ^ 0x01, bytes[index] ^ 0x20, bytes[index] | 0x80] {
                    var changed = bytes
                    changed[index] = replacement
                    assertAgreesWithHasName(String(decoding: changed, as: UTF8.self))
                }
            }
            assertAgreesWithHasName(code.spelling + "s")
            assertAgreesWithHasName(String(code.spelling.dropLast()))
        }
        for name in ["", "X", "\u{212A}eep-Alive", "Hos\u{0}", "X_Request_Id", "Proxy-Foo", "x-attest-other"] {
            XCTAssertEqual(HTTPField(name, "v").known, .other, name.debugDescription)
            assertAgreesWithHasName(name)
        }
    }

    func testRenamedFieldIsClassifiedAgainAndGatewaySpellingsMatch() {
        var field = HTTPField("X-Other", "v")
        field.name = "host"
        XCTAssertEqual(field.known, .host)
        XCTAssertEqual(HTTPField(.xRequestId, "a"), HTTPField("X-Request-Id", "a"))
        XCTAssertEqual([HTTPField("connection", "a"), HTTPField("Connection", "b")].values(named: "CONNECTION"), ["a", "b"])
    }

    /// A field read off the wire keeps its name byte for byte, whether it is a known name's canonical spelling
    /// (then that literal stands for it), the same name in other letters, or a name one byte off.
    func testWireNamesKeepTheirBytesWhetherCanonicalOrNot() {
        func field(_ bytes: [UInt8]) -> HTTPField { bytes.withUnsafeBytes { HTTPField(name: $0, value: "v") } }
        for code in KnownHeader.allCases where code != .other {
            let spelling = Array(code.spelling.utf8)
            XCTAssertEqual(field(spelling).name, code.spelling)
            XCTAssertEqual(field(spelling).known, code)
            for index in spelling.indices {
                var other = spelling
                other[index] ^= 0x20  // a letter in the other case; "-" becomes CR
                XCTAssertEqual(field(other).name, String(decoding: other, as: UTF8.self), "\(code) \(index)")
                XCTAssertEqual(field(other).known, spelling[index] == UInt8(ascii: "-") ? .other : code, "\(code) \(index)")
            }
        }
    }
}
