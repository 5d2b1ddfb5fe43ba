import Foundation
import RedisClient
import Upstream
/// `redis:` — where challenges, counters and attested keys live.
public struct RedisConfig: Sendable, Equatable {
    /// The `url` given (or the default); "" in Cluster and Sentinel mode.
    public let url: String
    public let host: String
    public let port: Int
    public let database: Int
    /// From the URL or `username`.
    public let username: String?
    /// From the URL, `password` or `password_file` (read at start and on every reload). Never logged.
    public let password: String?
    /// `password_file`, resolved against the config file's folder.
    public let passwordFile: String?
    /// `sentinel_auth`: the sentinels' own login (`requirepass` in sentinel.conf), read like the one above.
    public let sentinelUsername: String?
    public let sentinelPassword: String?
    /// One server (`url`), a Cluster (`cluster`) or a Sentinel-managed primary (`sentinels`).
    public let topology: RedisTopology
    /// Set for `rediss://` URLs and whenever `redis.tls` is present.
    public let tls: RedisTLSSettings?
    public let poolSize: Int
    public let timeoutMs: Int
    /// Prepended to every key ("aag:…") so the gateway can share a Redis.
    public let keyPrefix: String

    static let defaultURL = "redis://127.0.0.1:6379/0"

    static func read(_ section: ConfigMapping, baseDirectory: String = ".") -> RedisConfig {
        defer { section.finish() }
        let (topology, urlValue) = readTopology(section)
        let url = topology == .single ? section.string("url", default: defaultURL) : ""
        let parsed = topology == .single ? parse(url, at: urlValue) : nil
        let endpoint = parsed ?? Endpoint(host: "127.0.0.1", port: 6379, database: 0, username: nil, password: nil, isTLS: false)
        let tls = RedisTLSSettings.read(section.optional("tls"), urlIsTLS: endpoint.isTLS, topology: topology, baseDirectory: baseDirectory)
        let login = readLogin(section, fromURL: (endpoint.username, endpoint.password), urlValue: urlValue, baseDirectory: baseDirectory)
        let sentinelLogin = readSentinelLogin(section, topology: topology, baseDirectory: baseDirectory)
        let keyPrefix = section.string("key_prefix", default: "aag")
        if keyPrefix.isEmpty || keyPrefix.count > 64
            || !keyPrefix.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "_.:-".contains($0)) }) {
            section.optional("key_prefix")?.invalid("expected 1-64 characters from A-Z a-z 0-9 _ . : -, got \"\(keyPrefix)\"")
        }
        return RedisConfig(url: url, host: endpoint.host, port: endpoint.port, database: endpoint.database,
                           username: login.username, password: login.password, passwordFile: login.file,
                           sentinelUsername: sentinelLogin?.username, sentinelPassword: sentinelLogin?.password, topology: topology, tls: tls,
                           poolSize: section.int("pool_size", default: 32, in: 1...1024),
                           timeoutMs: section.int("timeout_ms", default: 500, in: 1...60_000), keyPrefix: keyPrefix)
    }

    struct Endpoint {
        let host: String, port: Int, database: Int, username: String?, password: String?, isTLS: Bool
    }

    /// `redis[s]://[[user]:password@]host[:port][/database]`; the login percent-decoded.
    private static func parse(_ url: String, at value: ConfigValue?) -> Endpoint? {
        let parsed: ServiceURL
        do {
            parsed = try ServiceURL.parse(url, schemes: ["redis", "rediss"])
        } catch {
            // ServiceURL quotes the URL it refuses: keep a password in it out of the message.
            value?.invalid(error.message.replacing(url, with: redactedURL(url)))
            return nil
        }
        let databaseText = parsed.path.dropFirst()
        let database = databaseText.isEmpty ? 0 : Int(databaseText)
        guard let database, (0...9999).contains(database), parsed.path.isEmpty || parsed.path.hasPrefix("/") else {
            value?.invalid("the path must be a database number like /0, got \"\(parsed.path)\"")
            return nil
        }
        var username: String?, password: String?
        if let userInfo = parsed.userInfo {
            guard let colon = userInfo.firstIndex(of: ":") else {
                value?.invalid("credentials must be written :password@ or user:password@")
                return nil
            }
            guard let user = String(userInfo[..<colon]).removingPercentEncoding,
                  let secret = String(userInfo[userInfo.index(after: colon)...]).removingPercentEncoding else {
                value?.invalid("bad percent escape in the credentials")
                return nil
            }
            username = user.isEmpty ? nil : user
            password = secret
        }
        return Endpoint(host: parsed.host, port: parsed.port ?? 6379, database: database, username: username,
                        password: password, isTLS: parsed.scheme == "rediss")
    }
}

/// One entry of `upstreams:` — an API the gateway forwards to.
public struct UpstreamConfig: Sendable, Equatable {
    /// Which Host header the upstream receives.
    public enum HostHeader: String, CaseIterable, Sendable {
        /// The upstream's own host[:port].
        case upstream
        /// The client's Host, unchanged.
        case preserve
    }

    public let name: String
    public let url: String
    /// "http" or "https".
    public let scheme: String
    public let host: String
    /// Explicit, or the scheme's default.
    public let port: Int
    /// Prepended to request paths: "" or "/api" (never ending in "/").
    public let basePath: String
    public let connectTimeoutMs: Int
    /// Request sent → response headers.
    public let firstByteTimeoutMs: Int
    /// Longest silence between body pieces.
    public let idleTimeoutMs: Int
    /// The whole exchange; 0 = none.
    public let timeoutMs: Int
    public let hostHeader: HostHeader
    /// `tls`: the CA, client certificate and name to verify (`https://` only); nil: the system's CAs, the URL's host.
    public let tls: UpstreamTLSSettings?

    static let connectRange = 1...60_000
    static let phaseRange = 1...3_600_000
    static let totalRange = 0...86_400_000

    public var timeouts: UpstreamTimeouts {
        UpstreamTimeouts(connectMs: connectTimeoutMs, firstByteMs: firstByteTimeoutMs, idleMs: idleTimeoutMs, totalMs: timeoutMs)
    }
    public let maxIdleConnections: Int
    /// How long an idle kept-alive connection may wait for reuse (the upstream's `Keep-Alive: timeout` may shorten it).
    public let keepAliveTimeoutMs: Int

    /// The valid upstreams, and every name declared (so routes naming a broken upstream are not reported twice).
    static func readAll(_ value: ConfigValue?, baseDirectory: String = ".") -> (upstreams: [UpstreamConfig], names: Set<String>) {
        guard let value, let section = value.mapping() else { return ([], []) }
        if section.keys.isEmpty { value.invalid("at least one upstream is required") }
        let upstreams = section.keys.compactMap { name -> UpstreamConfig? in
            guard let entry = section.optional(name), let upstream = entry.mapping() else { return nil }
            if name.isEmpty || !name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }) {
                upstream.log.report(.invalidValue, upstream.path, "upstream names use A-Z a-z 0-9 _ -", line: upstream.line)
            }
            return read(upstream, name: name, baseDirectory: baseDirectory)
        }
        return (upstreams, Set(section.keys))
    }

    private static func read(_ section: ConfigMapping, name: String, baseDirectory: String) -> UpstreamConfig? {
        defer { section.finish() }
        let urlValue = section.required("url")
        let url = urlValue?.string()
        let connectTimeout = section.int("connect_timeout_ms", default: 2000, in: connectRange)
        let firstByte = section.int("first_byte_timeout_ms", default: 60_000, in: phaseRange)
        let idle = section.int("idle_timeout_ms", default: 60_000, in: phaseRange)
        let timeout = section.int("timeout_ms", default: 0, in: totalRange)
        let hostHeader = section.choice("host_header", default: HostHeader.upstream)
        let maxIdle = section.int("max_idle_connections", default: 64, in: 0...10_000)
        let keepAlive = section.int("keepalive_timeout_ms", default: UpstreamTarget.defaultKeepAliveMs, in: phaseRange)
        guard let urlValue, let url else { return nil }
        let parsed: ServiceURL
        do {
            parsed = try ServiceURL.parse(url, schemes: ["http", "https"])
        } catch {
            urlValue.invalid(error.message)
            return nil
        }
        guard parsed.userInfo == nil else {
            urlValue.invalid("must not carry credentials")
            return nil
        }
        let tls = UpstreamTLSSettings.read(section.optional("tls"), isHTTPS: parsed.scheme == "https", baseDirectory: baseDirectory)
        let basePath = parsed.path.hasSuffix("/") ? String(parsed.path.dropLast()) : parsed.path
        return UpstreamConfig(name: name, url: url, scheme: parsed.scheme, host: parsed.host,
                              port: parsed.port ?? (parsed.scheme == "https" ? 443 : 80), basePath: basePath,
                              connectTimeoutMs: connectTimeout, firstByteTimeoutMs: firstByte, idleTimeoutMs: idle,
                              timeoutMs: timeout, hostHeader: hostHeader, tls: tls,
                              maxIdleConnections: maxIdle, keepAliveTimeoutMs: keepAlive)
    }
}

/// `log:`
public struct LogConfig: Sendable, Equatable {
    public enum Level: String, CaseIterable, Sendable, Comparable {
        case debug, info, warn, error

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rank < rhs.rank }

        var rank: Int {
            switch self {
            case .debug: return 0
            case .info: return 1
            case .warn: return 2
            case .error: return 3
            }
        }
    }

    /// Lines are always JSON objects: one format for log shippers to parse.
    public let level: Level

    public init(level: Level = .info) {
        self.level = level
    }

    static func read(_ section: ConfigMapping) -> LogConfig {
        defer { section.finish() }
        return LogConfig(level: section.choice("level", default: .info))
    }
}
