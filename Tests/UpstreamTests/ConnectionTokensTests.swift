import Upstream
import XCTest

/// The names `Connection` lists are counted across all its fields, empty items not counted; values too short to
/// hold more than the limit are passed without a scan, and that shortcut must never hide a list over it.
final class ConnectionTokensTests: XCTestCase {
    private func fields(_ values: [String]) -> [HTTPField] {
        [HTTPField("Server", "s")] + values.map { HTTPField("Connection", $0) } + [HTTPField("Date", "d")]
    }

    func testItemsAreCountedAcrossFieldsUpToTheLimit() {
        let limit = ConnectionTokens.limit
        for (values, over) in [
            (Array(repeating: "x", count: limit), false),
            (Array(repeating: "x", count: limit + 1), true),
            ([(0..<limit).map { _ in "a" }.joined(separator: ",")], false),
            ([(0...limit).map { _ in "a" }.joined(separator: ",")], true),
            ([", ,," + (0..<limit).map { _ in "a" }.joined(separator: " ,\t")], false),
            (["keep-alive"] + Array(repeating: "a,b", count: limit / 2), true),
            (["keep-alive", "close"], false),
        ] {
            XCTAssertEqual(ConnectionTokens.exceedLimit(fields(values)), over, "\(values)")
        }
    }
}
