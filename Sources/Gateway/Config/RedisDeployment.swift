import AttestStore
import Foundation
import RedisClient

/// Which Redis deployment `redis:` describes: exactly one of `url`, `cluster`, `sentinels`.
public enum RedisTopology: Sendable, Equatable {
    /// One server: `redis.url`.
    case single
    /// `redis.cluster`: seed nodes; the slot map is discovered from them.
    case cluster(seeds: [RedisAddress])
    /// `redis.sentinels` + `redis.master_name`: the primary is asked of the sentinels.
    case sentinel(sentinels: [RedisAddress], masterName: String)
}

extension RedisConfig {
    static let maxNodes = 64
    static let defaultSentinelPort = 26379

    static func readTopology(_ section: ConfigMapping) -> (RedisTopology, ConfigValue?) {
        let url = section.optional("url")
        let cluster = section.optional("cluster")
        let sentinels = section.optional("sentinels")
        let masterName = section.optional("master_name")
        let given = [("url", url), ("cluster", cluster), ("sentinels", sentinels)].filter { $0.1 != nil }.map(\.0)
        if given.count > 1 {
            section.log.report(.invalidValue, section.path,
                               "set exactly one of url, cluster, sentinels (found \(given.joined(separator: " and ")))", line: section.line)
        }
        if let masterName, sentinels == nil { masterName.invalid("master_name is only used with sentinels") }
        if let cluster {
            return (.cluster(seeds: nodes(cluster, defaultPort: 6379)), url)
        }
        if let sentinels {
            let name = masterName?.string()
            if masterName == nil {
                section.log.report(.missingKey, section.childPath("master_name"), "required with sentinels", line: section.line)
            } else if let name, name.isEmpty || name.count > 256 || !name.allSatisfy({ $0.isASCII && !$0.isWhitespace }) {
                masterName?.invalid("expected the primary's name as the sentinels know it (1-256 characters, no spaces)")
            }
            return (.sentinel(sentinels: nodes(sentinels, defaultPort: defaultSentinelPort), masterName: name ?? ""), url)
        }
        return (.single, url)
    }

    /// `["host:port", …]`: 1-64 distinct entries; a missing port is `defaultPort`.
    private static func nodes(_ value: ConfigValue, defaultPort: Int) -> [RedisAddress] {
        guard let items = value.list() else { return [] }
        if items.isEmpty || items.count > maxNodes { value.invalid("expected 1-\(maxNodes) \"host:port\" entries, got \(items.count)") }
        var seen: Set<RedisAddress> = []
        return items.compactMap { item in
            guard let text = item.string() else { return nil }
            guard let parsed = try? ServiceURL.parse("redis://" + text, schemes: ["redis"]), parsed.userInfo == nil, parsed.path.isEmpty else {
                item.invalid("expected \"host:port\" (a name, IPv4 or [IPv6]; port 1-65535), got \"\(text)\"")
                return nil
            }
            let node = RedisAddress(host: parsed.host, port: parsed.port ?? defaultPort)
            guard seen.insert(node).inserted else {
                item.invalid("\(node) is listed twice")
                return nil
            }
            return node
        }
    }

    /// The password comes from one place: the URL, `password` (meant for `${NAME}`) or `password_file`.
    static func readLogin(_ section: ConfigMapping, fromURL: (username: String?, password: String?), urlValue: ConfigValue?,
                          baseDirectory: String) -> (username: String?, password: String?, file: String?) {
        let usernameValue = section.optional("username")
        let passwordValue = section.optional("password")
        let fileValue = section.optional("password_file")
        var username = fromURL.username
        if let usernameValue, let name = usernameValue.string() {
            if fromURL.username != nil {
                usernameValue.invalid("the username is also in url: keep one")
            } else if name.isEmpty || name.count > 256 || !name.allSatisfy({ !$0.isWhitespace && !$0.unicodeScalars.contains { $0.properties.generalCategory == .control } }) {
                usernameValue.invalid("expected an ACL user name (1-256 characters, no spaces)")
            } else {
                username = name
            }
        }
        var sources: [(String, String?)] = []
        if let password = fromURL.password { sources.append(("url", password)) }
        if let passwordValue { sources.append(("password", passwordValue.string())) }
        var file: String?
        if let fileValue, let path = fileValue.string() {
            file = path.hasPrefix("/") ? path : "\(baseDirectory)/\(path)"
            sources.append(("password_file", file.flatMap { readPasswordFile($0, value: fileValue) }))
        } else if fileValue != nil {
            sources.append(("password_file", nil))
        }
        if sources.count > 1 {
            // Never the password itself: only where it was found.
            section.log.report(.invalidValue, section.path,
                               "the password is set in \(sources.map(\.0).joined(separator: " and ")): keep one", line: section.line)
        }
        let password = sources.first?.1
        if password == nil, fromURL.username == nil, let usernameValue, sources.isEmpty {
            usernameValue.invalid("username needs a password (password_file, password or the url)")
        }
        if password?.isEmpty == true, let source = sources.first?.0 {
            section.log.report(.invalidValue, section.childPath(source), "the password is empty", line: section.line)
        }
        return (username, password, file)
    }

    /// `sentinel_auth: { username, password, password_file }`: only with `sentinels`, read by the rules above.
    static func readSentinelLogin(_ section: ConfigMapping, topology: RedisTopology,
                                  baseDirectory: String) -> (username: String?, password: String?)? {
        guard let value = section.optional("sentinel_auth") else { return nil }
        guard case .sentinel = topology else {
            value.invalid("sentinel_auth is only used with sentinels")
            return nil
        }
        guard let auth = value.mapping() else { return nil }
        defer { auth.finish() }
        let login = readLogin(auth, fromURL: (nil, nil), urlValue: nil, baseDirectory: baseDirectory)
        if login.password == nil, auth.optional("username") == nil {
            auth.log.report(.missingKey, auth.childPath("password"), "sentinel_auth needs password or password_file", line: auth.line)
        }
        return (login.username, login.password)
    }

    static let maxPasswordFileBytes = 4096

    /// One line; a final newline (what `echo` and editors add) is not part of the password.
    private static func readPasswordFile(_ path: String, value: ConfigValue) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else {
            value.invalid("cannot read \(path)")
            return nil
        }
        guard data.count <= maxPasswordFileBytes else {
            value.invalid("\(path) is larger than \(maxPasswordFileBytes) bytes; it holds one password")
            return nil
        }
        guard var text = String(data: data, encoding: .utf8) else {
            value.invalid("\(path) is not UTF-8 text")
            return nil
        }
        if text.hasSuffix("\n") { text.removeLast() }  // "\r\n" is one Character in Swift
        guard !text.contains(where: \.isNewline) else {
            value.invalid("\(path) must hold the password on one line")
            return nil
        }
        guard !text.isEmpty else {
            value.invalid("\(path) is empty")
            return nil
        }
        return text
    }

    /// `scheme://user:password@host` with the login replaced by `***`, for messages.
    static func redactedURL(_ url: String) -> String {
        guard let scheme = url.range(of: "://") else { return url }
        let rest = url[scheme.upperBound...]
        let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return url }
        return url[..<scheme.upperBound] + "***" + url[at...]
    }
}

/// What the Redis client is given.
extension RedisConfig {
    /// The client's options: topology, login, timeouts and the TLS context (its files loaded and checked
    /// now, so a key that does not match its certificate stops `serve` and `check-config`).
    public func options() throws(StoreError) -> RedisOptions {
        var context: RedisTLSContext?
        if let tls {
            do throws(RedisTLSError) {
                context = try RedisTLSContext(tls)
            } catch {
                throw .invalidArgument("redis.tls: \(error.message)")
            }
        }
        let topology: RedisOptions.Topology
        switch self.topology {
        case .single: topology = .single(RedisAddress(host: host, port: port))
        case .cluster(let seeds): topology = .cluster(seeds: seeds)
        case .sentinel(let sentinels, let masterName): topology = .sentinel(sentinels: sentinels, masterName: masterName)
        }
        // A few pipelined connections per loop and server carry what pool_size blocking ones once did.
        return RedisOptions(topology: topology, username: username, password: password, database: database, tls: context,
                            timeoutMs: timeoutMs, connectionsPerNode: min(4, max(1, poolSize / 8)),
                            sentinelUsername: sentinelUsername, sentinelPassword: sentinelPassword)
    }
    /// Where Redis is, without the password: for logs and messages.
    public var redacted: String {
        let login = password == nil ? "" : "\(username ?? ""):***@"
        switch topology {
        case .single:
            let shownHost = host.contains(":") ? "[\(host)]" : host
            return "\(tls == nil ? "redis" : "rediss")://\(login)\(shownHost):\(port)/\(database)"
        case .cluster(let seeds):
            return "cluster \(seeds.map(\.description).joined(separator: ","))\(tls == nil ? "" : " (TLS)")"
        case .sentinel(let sentinels, let masterName):
            return "sentinel master \(masterName) via \(sentinels.map(\.description).joined(separator: ","))\(tls == nil ? "" : " (TLS)")"
        }
    }
}

/// The password stays out of `print(config)`, test failure messages and string interpolation.
extension RedisConfig: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String { "RedisConfig(\(redacted), pool_size: \(poolSize), timeout_ms: \(timeoutMs), key_prefix: \(keyPrefix))" }
    public var debugDescription: String { description }
}
