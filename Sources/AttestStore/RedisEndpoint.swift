import EventLoop
import Foundation

/// Where Redis listens and how to log in, parsed from `redis://[[user]:password@]host[:port][/db]`
/// or `unix://[[user]:password@]/path/to/redis.sock[?db=N]`.
public struct RedisEndpoint: Equatable, Sendable {
    public enum Address: Equatable, Sendable {
        case tcp(host: String, port: Int)
        case unix(path: String)
    }

    public var address: Address
    public var username: String?
    public var password: String?
    public var database: Int

    public init(address: Address, username: String? = nil, password: String? = nil, database: Int = 0) {
        self.address = address
        self.username = username
        self.password = password
        self.database = database
    }

    public static let defaultPort = 6379

    /// The URL without its password, for logs and error messages.
    public var redacted: String {
        let login = password == nil ? "" : "\(username ?? ""):***@"
        switch address {
        case .tcp(let host, let port):
            let shownHost = host.contains(":") ? "[\(host)]" : host
            return "redis://\(login)\(shownHost):\(port)/\(database)"
        case .unix(let path):
            return "unix://\(login)\(path)?db=\(database)"
        }
    }

    public static func parse(url: String) throws(StoreError) -> RedisEndpoint {
        if let rest = url.dropPrefix("redis://") { return try parseTCP(rest) }
        if let rest = url.dropPrefix("unix://") { return try parseUnix(rest) }
        if url.hasPrefix("rediss://") {
            throw .invalidArgument("rediss:// (TLS) is not supported: hiredis 0.14 has no TLS; use a local TLS tunnel")
        }
        // The URL itself stays out of the message: it may carry a password.
        throw .invalidArgument("Redis URL must start with redis:// or unix://")
    }

    private static func parseTCP(_ rest: Substring) throws(StoreError) -> RedisEndpoint {
        let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        let (username, password, hostPort) = try splitLogin(rest[..<authorityEnd])
        let (host, port) = try splitHostPort(hostPort)
        let database = try parseDatabase(rest[authorityEnd...].drop { $0 == "/" })
        return RedisEndpoint(address: .tcp(host: host, port: port), username: username, password: password,
                             database: database)
    }

    private static func parseUnix(_ rest: Substring) throws(StoreError) -> RedisEndpoint {
        let pathStart = rest.firstIndex(of: "/") ?? rest.endIndex
        let (username, password, host) = try splitLogin(rest[..<pathStart])
        guard host.isEmpty else { throw .invalidArgument("unix:// URL must not name a host, got \(quoted(host))") }
        let queryStart = rest.firstIndex(of: "?") ?? rest.endIndex
        let path = String(rest[pathStart..<queryStart])
        guard path.count > 1 else { throw .invalidArgument("unix:// URL needs a socket path") }
        var database = 0
        if queryStart != rest.endIndex {
            let query = rest[rest.index(after: queryStart)...]
            guard let value = query.dropPrefix("db=") else {
                throw .invalidArgument("unix:// URL accepts only ?db=N, got \(quoted(query))")
            }
            database = try parseDatabase(value)
        }
        return RedisEndpoint(address: .unix(path: path), username: username, password: password, database: database)
    }

    /// Splits `[user]:password@rest`; a login without a colon is a password (the redis-cli convention).
    private static func splitLogin(_ authority: Substring) throws(StoreError)
        -> (username: String?, password: String?, rest: Substring) {
        guard let at = authority.lastIndex(of: "@") else { return (nil, nil, authority) }
        let login = authority[..<at]
        let rest = authority[authority.index(after: at)...]
        guard let colon = login.firstIndex(of: ":") else { return (nil, try percentDecoded(login), rest) }
        let user = login[..<colon]
        let password = try percentDecoded(login[login.index(after: colon)...])
        return (user.isEmpty ? nil : try percentDecoded(user), password, rest)
    }

    private static func splitHostPort(_ text: Substring) throws(StoreError) -> (String, Int) {
        var host = text
        var portText: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw .invalidArgument("unclosed [ in Redis host") }
            host = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            if !after.isEmpty {
                guard let port = after.dropPrefix(":") else { throw .invalidArgument("junk after ] in Redis host") }
                portText = port
            }
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard !host.isEmpty else { throw .invalidArgument("Redis URL has no host") }
        guard let portText else { return (String(host), defaultPort) }
        guard let port = Int(portText), (1...65535).contains(port) else {
            throw .invalidArgument("Redis port must be 1-65535, got \(quoted(portText))")
        }
        return (String(host), port)
    }

    private static func parseDatabase(_ text: Substring) throws(StoreError) -> Int {
        if text.isEmpty { return 0 }
        guard let database = Int(text), database >= 0 else {
            throw .invalidArgument("Redis database must be a non-negative number, got \(quoted(text))")
        }
        return database
    }

    private static func percentDecoded(_ text: Substring) throws(StoreError) -> String {
        guard let decoded = String(text).removingPercentEncoding else {
            throw .invalidArgument("bad percent escape in Redis URL login")
        }
        return decoded
    }

    private static func quoted(_ text: some StringProtocol) -> String { "\"\(text)\"" }
}

extension StringProtocol {
    fileprivate func dropPrefix(_ prefix: String) -> SubSequence? {
        hasPrefix(prefix) ? dropFirst(prefix.count) : nil
    }
}
