import AssertionCheck
import Foundation
import XCTest

/// The decoder every App Attest header goes through, against Foundation's as the reference.
final class Base64Tests: XCTestCase {
    func testDecodesWhatFoundationEncodesInBothAlphabetsPaddedOrNot() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<130 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let padded = Data(bytes).base64EncodedString()
            let urlSafe = padded.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            for text in [padded, urlSafe, String(padded.prefix { $0 != "=" }), String(urlSafe.prefix { $0 != "=" })] {
                XCTAssertEqual(Base64.decode(text), bytes, "\(length) bytes as \(text)")
            }
            XCTAssertEqual(Base64.encode(bytes), padded)
            XCTAssertEqual(Base64.encodeURLSafe(bytes), String(urlSafe.prefix { $0 != "=" }))
        }
    }

    func testRefusesWhatIsNotBase64() {
        for text in ["Q", "QUJD=", "QU=JD", "QUJD\n", " QUJD", "QUJ*", "QQ===", "Q===", "=QUJ", "QUJDR", "QUJD#A=="] {
            XCTAssertNil(Base64.decode(text), text)
        }
        // Non-zero leftover bits: another spelling of the same bytes.
        XCTAssertEqual(Base64.decode("QQ=="), [0x41])
        XCTAssertNil(Base64.decode("QR=="))
        XCTAssertEqual(Base64.decode("QUI="), [0x41, 0x42])
        XCTAssertNil(Base64.decode("QUJ="))
        XCTAssertEqual(Base64.decode(""), [])
    }

    /// Whole groups are decoded by table lookups checked once at the end: every byte outside both alphabets is
    /// refused at every place of a group, in the first group, a middle one and the last whole one.
    func testRefusesAnyOtherByteAtEveryPlace() {
        let valid = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_".utf8)
        let text = Array("QUJDREVGR0hJSktM".utf8)
        XCTAssertNotNil(Base64.decode(utf8: text))
        for byte in UInt8.min...UInt8.max where !valid.contains(byte) {
            for place in [0, 1, 2, 3, 6, 13, 15] {
                var spoiled = text
                spoiled[place] = byte
                XCTAssertNil(Base64.decode(utf8: spoiled), "byte \(byte) at \(place)")
            }
        }
    }
}
