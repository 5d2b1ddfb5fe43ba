import Upstream
/// How a request's body is delimited, judged from its headers before any body byte is read.
/// Conflicting framing is how request smuggling starts: the gateway and the upstream must never
/// disagree on where a body ends, so anything but one clear framing is refused.
public enum RequestFraming: Equatable, Sendable {
    case noBody
    case contentLength(Int)
    case chunked

    /// The Content-Length the client declared, if it did.
    public var declaredLength: Int? {
        if case .contentLength(let length) = self { return length }
        return nil
    }

    public struct Violation: Error, Equatable, Sendable {
        public let status: Int
        public let reason: String
        public let message: String
    }

    public static func judge(_ headers: [HTTPField], httpVersion: String) -> Result<RequestFraming, Violation> {
        // Most requests carry neither header: a look at each field's class, no list made (by index: a field copied
        // out is retained and released).
        guard headers.indices.contains(where: { headers[$0].known == .transferEncoding || headers[$0].known == .contentLength })
        else { return .success(.noBody) }
        let encodings = headers.values(named: .transferEncoding)
        let lengths = headers.values(named: .contentLength).map { $0.trimmingSpaces }
        if !encodings.isEmpty && !lengths.isEmpty {
            return .failure(ambiguous("both Content-Length and Transfer-Encoding are present"))
        }
        if !encodings.isEmpty {
            guard httpVersion != "HTTP/1.0" else {
                return .failure(ambiguous("Transfer-Encoding is not defined for HTTP/1.0"))
            }
            guard encodings.count == 1, encodings[0].trimmingSpaces.lowercased() == "chunked" else {
                return .failure(Violation(status: 501, reason: "unsupported_transfer_encoding",
                                          message: "only Transfer-Encoding: chunked is supported"))
            }
            return .success(.chunked)
        }
        guard let first = lengths.first else { return .success(.noBody) }
        guard lengths.allSatisfy({ $0 == first }) else {
            return .failure(ambiguous("several differing Content-Length headers"))
        }
        guard !first.isEmpty, first.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return .failure(ambiguous("Content-Length is not a decimal number"))
        }
        // Digits only, so the sole failure is overflow: a length no limit could admit.
        return .success(.contentLength(Int(first) ?? Int.max))
    }

    private static func ambiguous(_ message: String) -> Violation {
        Violation(status: 400, reason: "ambiguous_framing", message: message)
    }
}

extension String {
    /// Without leading and trailing spaces and tabs (HTTP's optional whitespace); itself, with no copy,
    /// when it has none.
    public var trimmingSpaces: String {
        let isSpace: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 }
        guard let start = utf8.firstIndex(where: { !isSpace($0) }), let end = utf8.lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        // Both bounds sit next to an ASCII byte (or at an end), so on scalar boundaries.
        let after = utf8.index(after: end)
        if start == utf8.startIndex && after == utf8.endIndex { return self }
        return String(self[start..<after])
    }
}
