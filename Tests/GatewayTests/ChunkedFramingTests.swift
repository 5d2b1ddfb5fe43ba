@testable import HTTPServer
import TestSupport
import Upstream
import XCTest

/// A client's chunked request body (HTTPServer's `ChunkedScan`, run before libhttp-parser) and an upstream's chunked
/// response body (Upstream's `ChunkedBody`, `ResponseParser`'s decoder) are read by one grammar: the same inputs, in
/// reads of every size, get the same verdict from both, the same end and the same problem; the one deliberate
/// difference is a tab after a chunk size, which only a request body may hold (and the wording of the problem of
/// whitespace after a size that names it).
final class ChunkedFramingTests: XCTestCase {
    private static let maxTrailerBytes = 64
    private static let valid = "A;name=\"v a\"\r\n0123456789\r\n2 ;x\r\nab\r\n0\r\nX-Sum: 1\r\n\r\n"

    /// The one wording that differs: a request's size may be followed by spaces and tabs, a response's by spaces.
    private static let requestSpaceProblem = Verdict.invalid("whitespace after a chunk size is not followed by an extension")
    private static let responseSpaceProblem = Verdict.invalid("a space after a chunk size is not followed by an extension")

    private enum Verdict: Equatable {
        case ended(end: Int)
        case more
        case invalid(String)
    }

    func testRequestAndResponseBodiesAreReadAlike() {
        // The valid body with each byte in turn replaced by each byte that matters to the grammar, then a
        // pipelined next message after it; and bodies each side's tests refuse.
        let base = Array(Self.valid.utf8)
        var inputs: [[UInt8]] = [base, Array("0\r\n\r\n".utf8)]
        for position in base.indices {
            for byte: UInt8 in [0x00, 0x01, 0x0A, 0x0D, 0x20, 0x3B, 0x3A, 0x7F, 0x80, 0x30, 0x46, 0x67, 0x78] {
                var input = base
                input[position] = byte
                inputs.append(input + Array("GET / HTTP/1.1\r\n".utf8))
            }
        }
        inputs += ["FFFFFFFFFFFFFFFFF\r\n", "5 x\r\n", "0\r\nX: \(String(repeating: "t", count: 80))\r\n\r\n",
                   "\(String(repeating: "0", count: 5000))\r\n", "0\r\n\r\r"].map { Array($0.utf8) }
        var ended = 0, refused = 0
        for input in inputs {
            for split in [1, 2, 3, 7, input.count] {
                let shown = "\(String(decoding: input, as: UTF8.self).debugDescription) in reads of \(split)"
                let request = scannedAsRequest(input, split: split), response = decodedAsResponse(input, split: split)
                XCTAssertEqual(request == Self.requestSpaceProblem ? Self.responseSpaceProblem : request, response.verdict, shown)
                if input == base { XCTAssertEqual(response.data, Array("0123456789ab".utf8), shown) }
                switch response.verdict {
                case .ended: ended += 1
                case .invalid: refused += 1
                case .more: break
                }
            }
        }
        XCTAssertGreaterThan(ended, 100)
        XCTAssertGreaterThan(refused, 1000)
    }

    /// A tab after a chunk size: a request body takes it (before an extension, as a space), an upstream's is refused.
    func testOnlyARequestBodyTakesATabAfterTheChunkSize() {
        for (body, responseProblem) in [("5\t;x\r\nhello\r\n0\r\n\r\n", "a chunk size holds a byte that is not a hex digit"),
                                        ("5 \t;x\r\nhello\r\n0\r\n\r\n", "a space after a chunk size is not followed by an extension")] {
            let input = Array(body.utf8)
            XCTAssertEqual(scannedAsRequest(input, split: input.count), .ended(end: input.count), body.debugDescription)
            XCTAssertEqual(decodedAsResponse(input, split: input.count).verdict, .invalid(responseProblem), body.debugDescription)
        }
        let dangling = Array("5\t\r\nhello\r\n0\r\n\r\n".utf8)
        XCTAssertEqual(scannedAsRequest(dangling, split: dangling.count), Self.requestSpaceProblem)
        XCTAssertEqual(decodedAsResponse(dangling, split: dangling.count).verdict, .invalid("a chunk size holds a byte that is not a hex digit"))
    }

    private func scannedAsRequest(_ input: [UInt8], split: Int) -> Verdict {
        var scan = ChunkedScan(maxTrailerBytes: Self.maxTrailerBytes)
        for start in stride(from: 0, to: input.count, by: split) {
            switch input[start..<min(start + split, input.count)].withUnsafeBytes({ scan.scan($0) }) {
            case .more: continue
            case .ended(let end): return .ended(end: start + end)
            case .invalid(let problem): return .invalid(problem)
            }
        }
        return .more
    }

    private func decodedAsResponse(_ input: [UInt8], split: Int) -> (verdict: Verdict, data: [UInt8]) {
        let (data, outcome) = readChunked(input, split: split, maxTrailerBytes: Self.maxTrailerBytes)
        switch outcome {
        case .ended(let end): return (.ended(end: end), data)
        case .invalid(let problem): return (.invalid(problem), data)
        case .more, .data: return (.more, data)
        }
    }
}
