import HTTPServer
import Foundation

/// The gateway's YAML configuration, validated and typed. Only `app_attest.apps`, `upstreams` and `routes`
/// are required; everything else has a default. Unknown keys are errors: a misspelt key must never leave a
/// weaker default in force.
public struct GatewayConfig: Sendable {
    public let listen: ListenAddress
    /// Serves /healthz, /readyz and /metrics.
    public let adminListen: ListenAddress
    /// Put in front of the built-in endpoints (/attest/challenge, /attest/verify, /assert/challenge):
    /// "" or "/segment[/segment…]".
    public let prefix: String
    public let redis: RedisConfig
    public let appAttest: AppAttestConfig
    /// `server.max_body_bytes` is the default for routes without their own.
    public let server: ServerLimits
    /// `server.tls`: TLS on `listen` (nil: plain HTTP).
    public let tls: ListenerTLSConfig?
    /// `server.allow_path_parameters`, `forward_underscore_headers`, `case_insensitive_routes`, `allow_trailing_dot_or_space`.
    public let hardening: RequestHardening
    /// `server.trusted_proxies`, `server.client_ip_header`: where logs take the client's address from.
    public let clientAddress: ClientAddressPolicy
    public let log: LogConfig
    /// In file order.
    public let upstreams: [UpstreamConfig]
    /// In file order.
    public let routes: [RouteConfig]
    /// Apple's server APIs (DeviceCheck, receipts); nil when the file has no `apple:` section.
    public let apple: AppleConfig?
    /// Android attestation (`play_integrity:`); nil when the file has no such section.
    public var playIntegrity: PlayIntegrityConfig? = nil

    /// Largest body any route may accept: bodies are held in memory.
    static let maxBodyCeiling = 256 * 1024 * 1024
    /// Config files are small; a huge one is a mistake, not a configuration.
    static let maxFileBytes = 1024 * 1024

    public func upstream(named name: String) -> UpstreamConfig? { upstreams.first { $0.name == name } }

    /// Limits for the inbound listener: the server's, with the body ceiling at the most any route may set,
    /// since the handler applies each route's own limit per request (`HTTPHandler.maxBodyBytes`) — so a
    /// reload can raise a route's limit without a restart.
    public var listenerLimits: ServerLimits {
        var limits = server
        limits.maxBodyBytes = GatewayConfig.maxBodyCeiling
        return limits
    }

    /// Reads and validates the file at `path`; a relative trust-anchor path is taken from the file's folder.
    /// `${NAME}` in values is taken from `environment`.
    public static func load(path: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError) -> GatewayConfig {
        let unreadable = { (problem: String) in
            ConfigError(issues: [ConfigIssue(.unreadableFile, path: "", message: "cannot read \(path): \(problem)", line: nil)])
        }
        guard let data = FileManager.default.contents(atPath: path) else { throw unreadable("no such readable file") }
        guard data.count <= maxFileBytes else { throw unreadable("larger than \(maxFileBytes) bytes") }
        guard let text = String(data: data, encoding: .utf8) else { throw unreadable("not UTF-8 text") }
        return try parse(yaml: text, baseDirectory: (path as NSString).deletingLastPathComponent, environment: environment)
    }

    /// Validates YAML text, reporting every problem found.
    public static func parse(yaml text: String, baseDirectory: String = ".",
                             environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError) -> GatewayConfig {
        let parsed: YAMLNode
        do {
            parsed = try YAMLDocument.parse(text)
        } catch {
            let reason: ConfigIssue.Reason = error.reason == .duplicateKey ? .duplicateKey : .invalidYAML
            throw ConfigError(issues: [ConfigIssue(reason, path: error.path, message: error.message, line: error.line)])
        }
        let log = IssueLog()
        let (root, expansions) = ConfigEnvironment.expand(parsed, environment: environment, log: log)
        // An unexpanded value would only add confusing follow-up errors: report the variables alone.
        guard log.issues.isEmpty else { throw ConfigError(issues: log.issues) }
        log.hide(expansions)
        guard let top = ConfigValue(node: root, path: "", log: log).mapping() else { throw ConfigError(issues: log.issues) }
        let config = read(top, baseDirectory: baseDirectory.isEmpty ? "." : baseDirectory)
        top.finish()
        guard log.issues.isEmpty else { throw ConfigError(issues: log.issues) }
        return config
    }

    static func read(_ top: ConfigMapping, baseDirectory: String) -> GatewayConfig {
        let listen = readAddress(top, "listen", default: ListenAddress(host: "127.0.0.1", family: .ipv4, port: 8080))
        let adminListen = readAddress(top, "admin_listen",
                                      default: ListenAddress(host: "127.0.0.1", family: .ipv4, port: 9901))
        if listen.sharesPort(with: adminListen), let node = top.optional("admin_listen") ?? top.optional("listen") {
            node.invalid("listen \(listen) and admin_listen \(adminListen) clash (one port): give the admin endpoints their own")
        }
        let prefix = readPrefix(top)
        let redis = RedisConfig.read(top.section("redis"), baseDirectory: baseDirectory)
        let appAttest = AppAttestConfig.read(top.section("app_attest"), baseDirectory: baseDirectory)
        let serverSection = top.section("server")
        let clientAddress = ClientAddressPolicy.read(serverSection)
        let (server, hardening) = readServer(serverSection)
        let tls = ListenerTLSConfig.read(serverSection.optional("tls"), http2: server.http2, baseDirectory: baseDirectory)
        serverSection.finish()
        let log = LogConfig.read(top.section("log"))
        let (upstreams, upstreamNames) = UpstreamConfig.readAll(top.required("upstreams"), baseDirectory: baseDirectory)
        let routes = RouteConfig.readAll(top.required("routes"), upstreams: upstreamNames,
                                         defaultMaxBody: server.maxBodyBytes, defaultCaseInsensitive: hardening.caseInsensitiveRoutes)
        let apple = AppleConfig.read(top.optional("apple")?.mapping(), baseDirectory: baseDirectory)
        if apple == nil, let route = routes.first(where: { $0.deviceCheck.usesApple }), let node = top.optional("routes") {
            node.invalid("routes[\(route.index)] uses DeviceCheck or the risk metric, which need an apple: section")
        }
        if appAttest.token == nil, let route = routes.first(where: { $0.accept.contains(.token) }), let node = top.optional("routes") {
            node.invalid("routes[\(route.index)] accepts tokens, which need an app_attest.token section (signing_key_file)")
        }
        let playIntegrity = PlayIntegrityConfig.read(top.optional("play_integrity"), baseDirectory: baseDirectory)
        if playIntegrity != nil, appAttest.token == nil, let node = top.optional("play_integrity") {
            node.invalid("mints gateway tokens, which need an app_attest.token section (signing_key_file)")
        }
        let methods = TokenMethod.configured(playIntegrity: playIntegrity != nil)
        if let route = routes.first(where: { $0.tokenMethods?.contains { !methods.contains($0) } ?? false }), let node = top.optional("routes") {
            node.invalid("routes[\(route.index)] lists token_methods play_integrity, which needs a play_integrity: section")
        }
        return GatewayConfig(listen: listen, adminListen: adminListen, prefix: prefix, redis: redis,
                             appAttest: appAttest, server: server, tls: tls, hardening: hardening, clientAddress: clientAddress, log: log,
                             upstreams: upstreams, routes: routes, apple: apple, playIntegrity: playIntegrity)
    }

    private static func readAddress(_ top: ConfigMapping, _ key: String, default fallback: ListenAddress) -> ListenAddress {
        guard let value = top.optional(key), let text = value.string() else { return fallback }
        do {
            return try ListenAddress(text)
        } catch {
            if case .invalidAddress(_, let problem) = error {
                value.invalid("expected host:port like 127.0.0.1:8080, [::1]:8080 or :8080 (\(problem)), got \"\(text)\"")
            }
            return fallback
        }
    }

    private static func readPrefix(_ top: ConfigMapping) -> String {
        guard let value = top.optional("prefix"), let prefix = value.string() else { return "" }
        let segments = prefix.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        let valid = prefix.isEmpty || (prefix.hasPrefix("/") && segments.allSatisfy { segment in
            !segment.isEmpty && segment != "." && segment != ".."
                && segment.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-._~".contains($0)) }
        })
        guard valid else {
            value.invalid("expected \"\" or a path like /gateway (letters, digits, - . _ ~; no trailing /), got \"\(prefix)\"")
            return ""
        }
        return prefix
    }

    /// `server.tls` is read after, by the caller: the section is finished there.
    private static func readServer(_ section: ConfigMapping) -> (ServerLimits, RequestHardening) {
        let hardening = RequestHardening.read(section)
        // Keys of the thread-per-connection server, still read so existing files keep working: an idle
        // timeout in seconds and the per-connection memory that bounded the head.
        let legacyIdle = section.optional("connection_timeout_seconds").map { _ in
            section.int("connection_timeout_seconds", default: 30, in: 1...3600) * 1000
        }
        let legacyHead = section.optional("connection_memory_limit_bytes").map { _ in
            section.int("connection_memory_limit_bytes", default: 32768, in: 8192...16 * 1024 * 1024)
        }
        return (ServerLimits(
            workers: section.int("workers", default: ServerLimits.defaultWorkers, in: 1...256),
            connectionLimit: section.int("connection_limit", default: 16_384, in: 1...1_000_000),
            perIPConnectionLimit: section.int("per_ip_connection_limit", default: ServerLimits.defaultPerIPConnectionLimit, in: 0...1_000_000),
            headerTimeoutMs: section.int("header_timeout_ms", default: 10_000, in: 100...600_000),
            bodyTimeoutMs: section.int("body_timeout_ms", default: 30_000, in: 100...3_600_000),
            keepaliveTimeoutMs: section.int("keepalive_timeout_ms", default: legacyIdle ?? 30_000, in: 100...3_600_000),
            sendTimeoutMs: section.int("send_timeout_ms", default: 30_000, in: 100...3_600_000),
            maxHeaderBytes: section.int("max_header_bytes", default: legacyHead ?? 32_768, in: 1024...16 * 1024 * 1024),
            maxBodyBytes: section.int("max_body_bytes", default: 1_048_576, in: 0...maxBodyCeiling),
            maxBufferedBodyBytes: section.int("max_buffered_body_bytes", default: 64 * 1_048_576, in: 65_536...64 * 1_073_741_824),
            maxConcurrentStreams: section.int("max_concurrent_streams", default: 100, in: 1...1000),
            http2: section.optional("http2")?.bool() ?? true,
            h2c: section.optional("h2c")?.bool() ?? false), hardening)
    }
}

extension ListenAddress {
    /// Two listeners that cannot both bind: the same port on the same address, or on the family's wildcard.
    func sharesPort(with other: ListenAddress) -> Bool {
        let wildcards: Set<String> = ["0.0.0.0", "::"]
        return port != 0 && port == other.port
            && (host == other.host || wildcards.contains(host) || wildcards.contains(other.host))
    }
}
