import Glibc

/// Where a server listens: "127.0.0.1:8080", "[::1]:8080", or ":8080" (every IPv4 interface).
/// Hosts are IP literals: a name would make the bound interface depend on resolver state at start-up.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public enum Family: Sendable { case ipv4, ipv6 }

    public let host: String
    public let family: Family
    /// 0 asks the system for a free port.
    public let port: Int

    public init(_ text: String) throws(HTTPServerError) {
        let (host, portText) = try Self.split(text)
        guard !portText.isEmpty, portText.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), portText.utf8.count <= 5,
              let port = Int(portText), port <= 65535 else {
            throw .invalidAddress(text, "port must be a number 0-65535")
        }
        if text.hasPrefix("[") {
            guard Self.isIP(host, family: AF_INET6) else { throw .invalidAddress(text, "not an IPv6 address") }
            (self.host, family) = (host, .ipv6)
        } else if host.isEmpty {
            (self.host, family) = ("0.0.0.0", .ipv4)
        } else if Self.isIP(host, family: AF_INET) {
            (self.host, family) = (host, .ipv4)
        } else {
            throw .invalidAddress(text, "host must be an IPv4 address or a bracketed IPv6 address")
        }
        self.port = port
    }

    public init(host: String, family: Family, port: Int) {
        (self.host, self.family, self.port) = (host, family, port)
    }

    public var description: String { family == .ipv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    private static func split(_ text: String) throws(HTTPServerError) -> (host: String, port: Substring) {
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw .invalidAddress(text, "expected [IPv6]:port")
            }
            return (String(text[text.index(after: text.startIndex)..<close]), text[text.index(close, offsetBy: 2)...])
        }
        guard let colon = text.lastIndex(of: ":") else { throw .invalidAddress(text, "expected host:port") }
        return (String(text[..<colon]), text[text.index(after: colon)...])
    }

    private static func isIP(_ host: String, family: Int32) -> Bool {
        var storage = in6_addr()
        return inet_pton(family, host, &storage) == 1
    }
}

/// Why the inbound server could not start.
public enum HTTPServerError: Error, Equatable, CustomStringConvertible {
    case invalidAddress(String, String)
    case startFailed(String, String)

    public var reasonCode: String {
        switch self {
        case .invalidAddress: return "invalid_address"
        case .startFailed: return "start_failed"
        }
    }

    public var description: String {
        switch self {
        case .invalidAddress(let address, let problem): return "invalid listen address \"\(address)\": \(problem)"
        case .startFailed(let address, let problem): return "cannot listen on \(address): \(problem)"
        }
    }
}
