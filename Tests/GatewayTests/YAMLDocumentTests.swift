import Gateway
import XCTest

final class YAMLDocumentTests: XCTestCase {
    private func scalar(_ node: YAMLNode?) -> String? {
        guard case .scalar(let text, _)? = node?.content else { return nil }
        return text
    }

    private func entries(_ node: YAMLNode) -> [YAMLNode.Entry] {
        guard case .mapping(let entries) = node.content else { return [] }
        return entries
    }

    private func reason(_ text: String, maxDepth: Int = 32) -> YAMLError.Reason? {
        do {
            _ = try YAMLDocument.parse(text, maxDepth: maxDepth)
            return nil
        } catch {
            return error.reason
        }
    }

    func testBlockAndFlowStylesCommentsAndQuotes() throws {
        let root = try YAMLDocument.parse("""
            # leading comment
            zeta: 1            # keys keep file order
            alpha: { a: 1, b: [x, "y z"] }
            quoted: "8080"
            single: 'it''s'
            list:
              - one
              - two
            """)
        let top = entries(root)
        XCTAssertEqual(top.map(\.key), ["zeta", "alpha", "quoted", "single", "list"])
        XCTAssertEqual(top.map(\.line), [2, 3, 4, 5, 6])
        XCTAssertEqual(top[0].value.content, .scalar("1", isPlain: true))
        XCTAssertEqual(top[2].value.content, .scalar("8080", isPlain: false))
        XCTAssertEqual(scalar(top[3].value), "it's")
        let flow = entries(top[1].value)
        XCTAssertEqual(flow.map(\.key), ["a", "b"])
        guard case .sequence(let items) = flow[1].value.content else { return XCTFail("expected a sequence") }
        XCTAssertEqual(items.map { scalar($0) }, ["x", "y z"])
        guard case .sequence(let list) = top[4].value.content else { return XCTFail("expected a sequence") }
        XCTAssertEqual(list.map(\.line), [7, 8])
        XCTAssertEqual(list[0].column, 5)
    }

    func testDuplicateKeyIsRefusedWithItsPath() {
        XCTAssertThrowsError(try YAMLDocument.parse("a:\n  b: 1\n  c: 2\n  b: 3\n")) { error in
            let error = error as? YAMLError
            XCTAssertEqual(error?.reason, .duplicateKey)
            XCTAssertEqual(error?.description, "a.b: duplicate key (first defined on line 2) (line 4)")
        }
        XCTAssertEqual(reason("{ a: 1, a: 2 }"), .duplicateKey)
    }

    func testAnchorsAliasesAndTagsAreRefused() {
        XCTAssertEqual(reason("base: &b { x: 1 }\nother: *b\n"), .unsupportedFeature)
        XCTAssertEqual(reason("a: !!str 5\n"), .unsupportedFeature)
        XCTAssertEqual(reason("a: [&x 1]\n"), .unsupportedFeature)
    }

    func testNestingIsBounded() {
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        XCTAssertEqual(reason(deep), .tooDeep)
        XCTAssertNil(reason("a: { b: { c: [1] } }", maxDepth: 4), "four collections, the root included")
        XCTAssertEqual(reason("a: { b: { c: [1] } }", maxDepth: 3), .tooDeep)
    }

    func testComplexKeysSeveralDocumentsAndEmptyInputAreRefused() {
        XCTAssertEqual(reason("? [a, b]\n: 1\n"), .complexKey)
        XCTAssertEqual(reason("a: 1\n---\nb: 2\n"), .notOneDocument)
        XCTAssertEqual(reason("# only a comment\n"), .notOneDocument)
        XCTAssertEqual(reason(""), .notOneDocument)
    }

    func testSyntaxErrorsCarryTheLine() {
        XCTAssertThrowsError(try YAMLDocument.parse("a: 1\nb: [1, 2\nc: 3\n")) { error in
            let error = error as? YAMLError
            XCTAssertEqual(error?.reason, .syntax)
            XCTAssertGreaterThanOrEqual(error?.line ?? 0, 2)
        }
        XCTAssertEqual(reason("a: \"unterminated\n"), .syntax)
    }
}
