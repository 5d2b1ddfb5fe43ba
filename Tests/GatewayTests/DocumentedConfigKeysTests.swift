import DeviceSimulator
import Foundation
@testable import Gateway
import TestSupport
import XCTest

/// The configuration keys are documented three times — the annotated example and the per-section tables of
/// docs/configuration.md, the reference table of docs/operations.md — and the three must agree, and the
/// example must be a configuration the gateway accepts (unknown keys are errors, so every key in it exists).
final class DocumentedConfigKeysTests: XCTestCase {
    static let sections = ["redis", "app_attest", "server", "log", "apple", "play_integrity"]

    private func text(_ file: String) throws -> String {
        try String(contentsOfFile: TestPaths.repository + "/docs/" + file, encoding: .utf8)
    }

    /// The YAML of "A complete annotated example".
    private func example() throws -> String {
        let document = try text("configuration.md")
        let section = try XCTUnwrap(document.components(separatedBy: "## A complete annotated example").dropFirst().first)
        return try XCTUnwrap(section.components(separatedBy: "```yaml\n").dropFirst().first?.components(separatedBy: "```").first)
    }

    func testTheAnnotatedExampleIsAValidConfiguration() throws {
        let directory = TestPaths.temporaryDirectory("config-example")
        try AppleTestKey.pem.write(toFile: directory + "/AuthKey_ABC123DEFG.p8", atomically: true, encoding: .utf8)
        // Any two distinct P-256 keys will do for the example's token section.
        try AppleTestKey.pem.write(toFile: directory + "/token-signing.pem", atomically: true, encoding: .utf8)
        try String(repeating: "s", count: 48).write(toFile: directory + "/challenge-secret", atomically: true, encoding: .utf8)
        let generate = Process()
        generate.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        generate.arguments = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", directory + "/token-old.pem"]
        try generate.run()
        generate.waitUntilExit()
        let play = try PlayIntegrityTokenMaker().writeKeys(to: directory)
        try FileManager.default.moveItem(atPath: play.decryption, toPath: directory + "/play-decryption.key")
        try FileManager.default.moveItem(atPath: play.verification, toPath: directory + "/play-verification.key")
        try FileManager.default.copyItem(atPath: GoogleTestAccount.shared.writeFile(tokenURI: "https://oauth2.googleapis.com/token"),
                                         toPath: directory + "/play-service-account.json")
        let config = try GatewayConfig.parse(yaml: try example(), baseDirectory: directory)
        XCTAssertFalse(config.clientAddress.trustedProxies.isEmpty, "the example shows server.trusted_proxies")
        XCTAssertFalse(config.appAttest.debugTokens.isEmpty, "the example shows every key, debug_tokens included")
        XCTAssertTrue(config.routes.contains { !$0.allowDebug })
        XCTAssertNotNil(config.playIntegrity?.localKeys, "the example shows the play_integrity section")
    }

    func testEverySectionKeyIsDocumentedInAllThreePlaces() throws {
        let exampleKeys = try keysOfExample()
        let tableKeys = try keysOfSectionTables()
        let referenceKeys = try keysOfReferenceTable()
        for section in Self.sections {
            let fromExample = exampleKeys[section, default: []]
            XCTAssertFalse(fromExample.isEmpty, "the example has no \(section): section")
            XCTAssertEqual(tableKeys[section, default: []], fromExample, "configuration.md's `\(section)` table vs the annotated example")
            XCTAssertEqual(referenceKeys[section, default: []], fromExample, "operations.md's configuration reference vs the annotated example (\(section))")
        }
    }

    /// Keys of each section's mapping in the example, plus keys shown commented out (`# key: …`).
    private func keysOfExample() throws -> [String: Set<String>] {
        let yaml = try example()
        guard case .mapping(let entries) = try YAMLDocument.parse(yaml).content else { throw TestSupportError("the annotated example is not a YAML mapping") }
        var keys: [String: Set<String>] = [:]
        for entry in entries where Self.sections.contains(entry.key) {
            guard case .mapping(let inner) = entry.value.content else { continue }
            keys[entry.key] = Set(inner.map(\.key))
        }
        var current: String?
        for line in yaml.split(separator: "\n") {
            if let first = line.first, first != " ", first != "#" { current = String(line.prefix { $0 != ":" }) }
            let trimmed = line.drop { $0 == " " }
            if line.hasPrefix("  # "), let current, Self.sections.contains(current),
               let key = trimmed.dropFirst(2).split(separator: ":").first, key.allSatisfy({ $0.isLetter || $0 == "_" }) {
                keys[current, default: []].insert(String(key))
            }
        }
        return keys
    }

    /// The first column of the table under each "## `section`" heading of configuration.md.
    private func keysOfSectionTables() throws -> [String: Set<String>] {
        var keys: [String: Set<String>] = [:]
        for part in try text("configuration.md").components(separatedBy: "\n## `").dropFirst() {
            let section = String(part.prefix { $0 != "`" })
            guard Self.sections.contains(section) else { continue }
            let body = part.components(separatedBy: "\n## ").first ?? ""
            for line in body.split(separator: "\n") where line.hasPrefix("| `") {
                let cell = line.dropFirst(2).prefix { $0 != "|" }
                keys[section, default: []].formUnion(Self.backticked(cell))
            }
        }
        return keys
    }

    /// `section.key` names in the first column of operations.md's configuration reference.
    private func keysOfReferenceTable() throws -> [String: Set<String>] {
        let document = try text("operations.md")
        let table = try XCTUnwrap(document.components(separatedBy: "## Configuration reference").dropFirst().first?
            .components(separatedBy: "\n## ").first)
        var keys: [String: Set<String>] = [:]
        for line in table.split(separator: "\n") where line.hasPrefix("| `") {
            var section: String?
            for name in Self.backticked(line.dropFirst(2).prefix { $0 != "|" }) {
                let parts = name.split(separator: ".", maxSplits: 1).map(String.init)
                // "`apple.team_id`, `apple.key_id`" and "`server.x`, `y`" (the section carries over).
                if parts.count == 2, Self.sections.contains(parts[0]) {
                    section = parts[0]
                    keys[parts[0], default: []].insert(parts[1])
                } else if parts.count == 1, let section, name.allSatisfy({ $0.isLetter || $0 == "_" }) {
                    keys[section, default: []].insert(name)
                }
            }
        }
        return keys
    }

    static func backticked<S: StringProtocol>(_ text: S) -> [String] {
        text.split(separator: "`", omittingEmptySubsequences: false).enumerated().compactMap { $0.offset % 2 == 1 ? String($0.element) : nil }
    }
}
