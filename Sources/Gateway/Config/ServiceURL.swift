import Foundation

/// `scheme://[userinfo@]host[:port][/path]` for the services the gateway talks to. Deliberately narrower than
/// RFC 3986: no query, no fragment, hosts are names or IP literals.
struct ServiceURL: Equatable, Sendable {
    let scheme: String
    let userInfo: String?
    /// Without brackets for IPv6.
    let host: String
    let port: Int?
    /// "" or starting with "/".
    let path: String

    /// What is wrong with a URL.
    struct Problem: Error {
        let message: String
    }

    static func parse(_ text: String, schemes: [String]) throws(Problem) -> ServiceURL {
        guard let separator = text.range(of: "://") else { throw Problem(message: "expected scheme://host, got \"\(text)\"") }
        let scheme = String(text[..<separator.lowerBound])
        guard schemes.contains(scheme) else {
            throw Problem(message: "scheme must be \(schemes.map { "\($0)://" }.joined(separator: " or ")), got \"\(text)\"")
        }
        let rest = text[separator.upperBound...]
        guard !rest.contains(where: { $0 == "?" || $0 == "#" }) else {
            throw Problem(message: "must not have a query or fragment")
        }
        guard rest.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw Problem(message: "must not contain spaces, control or non-ASCII characters")
        }
        let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        var userInfo: String?
        if let at = authority.lastIndex(of: "@") {
            userInfo = String(authority[..<at])
            authority = authority[authority.index(after: at)...]
        }
        let (host, port) = try hostAndPort(authority)
        return ServiceURL(scheme: scheme, userInfo: userInfo, host: host, port: port, path: String(rest[authorityEnd...]))
    }

    private static func hostAndPort(_ authority: Substring) throws(Problem) -> (String, Int?) {
        var host = authority
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw Problem(message: "unclosed [ in host") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw Problem(message: "unexpected text after ]") }
                portText = after.dropFirst()
            }
            guard !host.isEmpty, host.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else {
                throw Problem(message: "invalid IPv6 host")
            }
        } else {
            if let colon = authority.lastIndex(of: ":") {
                host = authority[..<colon]
                portText = authority[authority.index(after: colon)...]
            }
            guard !host.isEmpty, host.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" }) else {
                throw Problem(message: "missing or invalid host")
            }
        }
        guard let portText else { return (String(host), nil) }
        guard portText.count <= 5, let port = Int(portText), (1...65535).contains(port),
              portText.allSatisfy(\.isNumber) else {
            throw Problem(message: "port must be a number 1-65535")
        }
        return (String(host), port)
    }
}
