import Foundation
@testable import Gateway
import TestSupport
import XCTest

/// The configuration keys the reader knows and the ones the documentation describes cannot drift apart:
/// every key the reader looks up while
/// reading it must have a row in configuration.md's tables and in operations.md's reference table.
final class DocumentedKeysTests: XCTestCase {
    private static let docs = TestPaths.repository + "/docs"

    private func text(_ file: String) throws -> String {
        try String(contentsOfFile: "\(Self.docs)/\(file)", encoding: .utf8)
    }

    /// The first ```yaml block after "## A complete annotated example".
    private func annotatedExample() throws -> String {
        let configuration = try text("configuration.md")
        let section = try XCTUnwrap(configuration.range(of: "## A complete annotated example"))
        let rest = configuration[section.upperBound...]
        let start = try XCTUnwrap(rest.range(of: "```yaml\n"))
        let end = try XCTUnwrap(rest[start.upperBound...].range(of: "```"))
        return String(rest[start.upperBound..<end.lowerBound])
    }

    func testEveryKeyTheReaderKnowsIsDocumented() throws {
        let keys = try GatewayConfig.keyPaths(yaml: try annotatedExample())
        XCTAssertTrue(keys.isSuperset(of: ["app_attest.debug_tokens", "app_attest.debug_tokens[].sha256", "routes[].allow_debug", "listen"]),
                      keys.sorted().joined(separator: "\n"))
        let tableRows = try text("configuration.md").split(separator: "\n").filter { $0.hasPrefix("|") }
        let reference = try text("operations.md").split(separator: "\n").filter { $0.hasPrefix("| `") }
        // Sections and mappings (app_attest, routes[].rate_limit) are documented through their keys.
        let leaves = keys.filter { key in !keys.contains { $0.hasPrefix(key + ".") } }
        for key in leaves.sorted() {
            let name = String(key.split(separator: ".").last!.replacing("[]", with: ""))
            XCTAssertTrue(tableRows.contains { $0.contains("`\(name)`") || $0.contains("\(name):") }, "docs/configuration.md has no table row for \(key)")
            // A nested key (rate_limit.requests) may be described in its parent's row.
            let documented = ancestors(of: key).contains { path in reference.contains { $0.contains("`\(path)`") } }
            XCTAssertTrue(documented, "docs/operations.md's configuration reference has no row for \(key)")
        }
    }

    /// `a.b[].c` → `a.b[].c`, `a.b[]`, `a.b`, `a`.
    private func ancestors(of key: String) -> [String] {
        var paths: [String] = []
        var parts = key.split(separator: ".").map(String.init)
        while !parts.isEmpty {
            let path = parts.joined(separator: ".")
            paths += path.hasSuffix("[]") ? [path, String(path.dropLast(2))] : [path]
            parts.removeLast()
        }
        return paths
    }
}
