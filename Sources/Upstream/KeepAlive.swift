/// How long a kept-alive upstream connection may wait idle for its next request.
enum KeepAlive {
    /// Taken off an upstream's `Keep-Alive: timeout=N` (RFC 2068 19.7.1; Node sends it): the connection is
    /// let go a second early, since the upstream's clock started when it wrote the response.
    static let hintMarginMs = 1000

    /// The configured time, shortened by the response's `Keep-Alive: timeout=N`; 0: do not keep it.
    /// `keepAlive`: the value of the response's first Keep-Alive field.
    static func idleLimitMs(configured: Int, keepAlive: String?) -> Int {
        guard let keepAlive, let seconds = timeoutSeconds(keepAlive) else { return configured }
        return max(0, min(configured, seconds * 1000 - hintMarginMs))
    }

    /// N of "timeout=N" among a Keep-Alive value's comma-separated parameters; nil when absent or not a number.
    static func timeoutSeconds(_ value: String) -> Int? {
        for parameter in value.split(separator: ",") {
            let parts = parameter.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].trimmingBlanks.lowercased() == "timeout" else { continue }
            let digits = parts[1].trimmingBlanks
            guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy(\.isASCIIDigit) else { return nil }
            return Int(digits)
        }
        return nil
    }
}

extension Substring {
    /// Without leading and trailing spaces and tabs (a list element of a header value).
    var trimmingBlanks: Substring {
        let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !blank($0) }), let last = lastIndex(where: { !blank($0) }) else { return "" }
        return self[first...last]
    }
}

private extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
