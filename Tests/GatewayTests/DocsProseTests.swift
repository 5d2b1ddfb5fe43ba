import Foundation
@testable import Gateway
import TestSupport
import XCTest

/// The prose of README.md and docs/*.md against the two ways it drifted: a merge that kept both versions
/// of a passage, and counts that went stale.
final class DocsProseTests: XCTestCase {
    /// The pre-stop hook reads README.md and docs/*.md; bench/README.md, which took the README's history, too.
    static let files = TestPaths.documentation

    func text(_ file: String) throws -> String {
        try String(contentsOfFile: TestPaths.repository + "/" + file, encoding: .utf8)
    }

    /// The shared pre-stop hook's check: a paragraph of 160 characters or more said twice, in one file or two.
    func testNoLongParagraphAppearsTwice() throws {
        var seen: [String: String] = [:]
        for file in Self.files {
            let paragraphs = try text(file).replacingOccurrences(of: #"\n[ \t]*\n"#, with: "\u{0}", options: .regularExpression)
                .split(separator: "\u{0}")
            for paragraph in paragraphs {
                let key = paragraph.split(whereSeparator: \.isWhitespace).joined(separator: " ")
                guard key.count >= 160, !key.hasPrefix("|"), !key.hasPrefix("```") else { continue }
                if let first = seen[key] {
                    XCTFail("a paragraph appears twice (\(first) and \(file)): \"\(key.prefix(70))…\" — a merge left both copies?")
                }
                seen[key] = seen[key] ?? file
            }
        }
    }

    /// Two versions of a passage spliced together rarely repeat a whole paragraph, but they do repeat runs of
    /// words: 14 words in a row said twice within one paragraph or list item (code blocks and tables aside).
    /// Across sections, parallel wording is allowed (two kinds of TLS files behave alike).
    func testNoParagraphRepeatsARunOfFourteenWords() throws {
        for file in Self.files {
            let prose = try text(file).replacingOccurrences(of: #"(?s)```.*?```"#, with: "", options: .regularExpression)
                .split(separator: "\n", omittingEmptySubsequences: false)
                .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("|") }.joined(separator: "\n")
            let paragraphs = prose.replacingOccurrences(of: #"\n[ \t]*\n|\n(?=[ \t]*[-*] )"#, with: "\u{0}", options: .regularExpression)
                .split(separator: "\u{0}")
            for paragraph in paragraphs {
                let words = paragraph.split(whereSeparator: \.isWhitespace)
                var firstAt: [String: Int] = [:]
                for start in 0..<max(0, words.count - 14) {
                    let run = words[start..<start + 14].joined(separator: " ")
                    if let first = firstAt[run], start - first >= 14 {
                        XCTFail("\(file) says twice in one paragraph: \"\(run)\" — two versions of one passage?")
                        break
                    }
                    firstAt[run] = firstAt[run] ?? start
                }
            }
        }
    }

    /// Every relative link of README.md, bench/README.md and docs/*.md names a file that exists and, for a
    /// Markdown file, a heading of it (GitHub's anchor: lower case, punctuation dropped, spaces as hyphens).
    func testRelativeLinksReachAFileAndAHeading() throws {
        let link = try NSRegularExpression(pattern: #"\]\(([^)\s]+)\)"#)
        for file in Self.files {
            let prose = try text(file).replacingOccurrences(of: #"(?s)```.*?```"#, with: "", options: .regularExpression)
            for match in link.matches(in: prose, range: NSRange(prose.startIndex..., in: prose)) {
                let target = String(prose[Range(match.range(at: 1), in: prose)!])
                guard target.range(of: #"^[a-z]+:"#, options: .regularExpression) == nil else { continue }
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
                let path = parts[0].isEmpty ? file
                    : URL(fileURLWithPath: (file as NSString).deletingLastPathComponent).appendingPathComponent(parts[0]).standardized.relativePath
                let full = TestPaths.repository + "/" + path
                guard FileManager.default.fileExists(atPath: full) else {
                    XCTFail("\(file): \(target) names no file")
                    continue
                }
                guard parts.count == 2, path.hasSuffix(".md") else { continue }
                XCTAssertTrue(try anchors(of: path).contains(parts[1]), "\(file): \(target) names no heading of \(path)")
            }
        }
    }

    func anchors(of file: String) throws -> Set<String> {
        let prose = try text(file).replacingOccurrences(of: #"(?s)```.*?```"#, with: "", options: .regularExpression)
        return Set(prose.split(separator: "\n").filter { $0.hasPrefix("#") }.map { heading in
            heading.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces).lowercased()
                .filter { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == " " }
                .replacingOccurrences(of: " ", with: "-")
        })
    }

    /// The suite grows every session: the README names no test count (it went stale within a day).
    func testTheReadmeStatesNoTestCount() throws {
        let readme = try text("README.md")
        let count = try NSRegularExpression(pattern: #"\b\d[\d,]*\s+tests\b"#)
        let found = count.matches(in: readme, range: NSRange(readme.startIndex..., in: readme))
            .map { String(readme[Range($0.range, in: readme)!]) }
        XCTAssertEqual(found, [], "say what the tests cover, not how many there are")
    }

    /// A count of reason codes in prose is the catalogue's: the request path's codes and the HTTP layer's.
    func testAReasonCodeCountInProseIsTheCatalogues() throws {
        let codes = Set(ReasonCatalog.catalogue.map(\.reasonCode)).union(ReasonCatalog.httpLayer.map(\.reason))
        let count = try NSRegularExpression(pattern: #"\b(\d+)\s+reason codes\b"#)
        for file in Self.files {
            let prose = try text(file)
            for match in count.matches(in: prose, range: NSRange(prose.startIndex..., in: prose)) {
                let stated = Int(prose[Range(match.range(at: 1), in: prose)!])
                XCTAssertEqual(stated, codes.count, "\(file) states \(stated ?? 0) reason codes; the catalogue holds \(codes.count)")
            }
        }
    }
}
