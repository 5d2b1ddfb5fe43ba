import RedisClient
import EventLoop
import AttestStore
/// What the gateway does with requests on a route.
public enum RoutePolicy: String, CaseIterable, Sendable {
    /// Require a valid App Attest assertion.
    case assert
    /// Forward without checks.
    case pass
    /// Refuse (403) without contacting an upstream.
    case deny
}

/// For `assert` routes: refuse failing requests, or only log them while rolling out.
public enum AssertionMode: String, CaseIterable, Sendable {
    case enforce
    case report
}

/// What the assertion's client data is built from.
public enum ClientDataSource: String, CaseIterable, Sendable {
    case json
    case body
}

/// What an `assert` route accepts as proof (`accept:`): App Attest assertions, gateway tokens, or both.
public enum AcceptedProof: String, CaseIterable, Sendable {
    case assertion
    case token
}

/// How a gateway token was earned (its `amr` claim): listed by a route's `token_methods:`.
public enum TokenMethod: String, CaseIterable, Sendable {
    case appAttest = "app_attest"
    case playIntegrity = "play_integrity"

    /// The methods a configuration can mint: a route without `token_methods` accepts all of them.
    static func configured(playIntegrity: Bool) -> [TokenMethod] { playIntegrity ? [.appAttest, .playIntegrity] : [.appAttest] }
}

/// `token_use:` on a route that accepts tokens: any number of times until `exp`, or once.
public enum TokenUse: String, CaseIterable, Sendable {
    case reusable
    case limited
}

/// One entry of `routes:`.
public struct RouteConfig: Sendable, Equatable {
    public enum Match: Sendable, Equatable {
        /// `path`: this decoded path only.
        case exact(String)
        /// `path_prefix`: every decoded path starting with these bytes.
        case prefix(String)
    }

    public let match: Match
    /// nil = every method.
    public let methods: [String]?
    /// nil only for `deny` routes.
    public let upstream: String?
    public let policy: RoutePolicy
    public let mode: AssertionMode
    public let clientData: ClientDataSource
    public let counterWindow: Int
    public let maxBodyBytes: Int
    /// DeviceCheck fallback, device bits and risk metric (assert routes; needs `apple:`).
    public let deviceCheck: DeviceCheckPolicy
    /// Per-key limit on accepted assertions (assert routes); nil = none.
    public let rateLimit: RateLimit?
    /// `case_insensitive`: the path matches whatever its letters' case (see `Router.fold`).
    public let caseInsensitive: Bool
    /// `accept:` (assert routes): `[assertion]` unless the route also takes gateway tokens.
    public let accept: [AcceptedProof]
    /// `token_use:` (routes accepting tokens).
    public let tokenUse: TokenUse
    /// `token_methods:` (routes accepting tokens): whose tokens are accepted; nil = every configured method.
    public var tokenMethods: [TokenMethod]? = nil
    /// Whether `app_attest.debug_tokens` are accepted here (assert routes; true unless `allow_debug: false`).
    public var allowDebug = true
    /// This route's own upstream timeouts, each replacing the upstream's (a long chat stream next to quick calls).
    public var timeouts = RouteTimeouts()
    /// Position in `routes:` (0-based), to name the route in logs.
    public let index: Int

    public init(match: Match, methods: [String]? = nil, upstream: String?, policy: RoutePolicy,
                mode: AssertionMode = .enforce, clientData: ClientDataSource = .json, counterWindow: Int = 0,
                maxBodyBytes: Int = 1_048_576, deviceCheck: DeviceCheckPolicy = DeviceCheckPolicy(), rateLimit: RateLimit? = nil,
                accept: [AcceptedProof] = [.assertion], tokenUse: TokenUse = .reusable, caseInsensitive: Bool = false, index: Int = 0) {
        self.match = match
        self.methods = methods
        self.upstream = upstream
        self.policy = policy
        self.mode = mode
        self.clientData = clientData
        self.counterWindow = counterWindow
        self.maxBodyBytes = maxBodyBytes
        self.deviceCheck = deviceCheck
        self.rateLimit = rateLimit
        self.caseInsensitive = caseInsensitive
        self.accept = accept
        self.tokenUse = tokenUse
        self.index = index
    }
}

extension RouteConfig {
    static func readAll(_ value: ConfigValue?, upstreams: Set<String>, defaultMaxBody: Int,
                        defaultCaseInsensitive: Bool = false) -> [RouteConfig] {
        guard let value, let items = value.list() else { return [] }
        guard !items.isEmpty else {
            value.invalid("at least one route is required")
            return []
        }
        let routes = items.enumerated().compactMap { index, item in
            item.mapping().flatMap { read($0, index: index, upstreams: upstreams, defaultMaxBody: defaultMaxBody,
                                           defaultCaseInsensitive: defaultCaseInsensitive) }
        }
        reportDuplicates(routes, items: items)
        return routes
    }

    private static func read(_ route: ConfigMapping, index: Int, upstreams: Set<String>,
                             defaultMaxBody: Int, defaultCaseInsensitive: Bool) -> RouteConfig? {
        defer { route.finish() }
        let match = readMatch(route)
        let methods = route.optional("methods").flatMap(readMethods)
        let policy = route.required("policy")?.choice(RoutePolicy.self)
        let upstream = readUpstream(route, policy: policy, upstreams: upstreams)
        let assertOnly = policy == .assert ? nil : "only valid with policy assert"
        let mode = assertOption(route, "mode", refusal: assertOnly) { $0.choice(AssertionMode.self) } ?? .enforce
        let clientData = assertOption(route, "client_data", refusal: assertOnly) { $0.choice(ClientDataSource.self) } ?? .json
        let window = assertOption(route, "counter_window", refusal: assertOnly) { $0.int(in: 0...1024) } ?? 0
        let maxBody = route.int("max_body_bytes", default: defaultMaxBody, in: 0...GatewayConfig.maxBodyCeiling)
        let deviceCheck = readDeviceCheck(route, refusal: assertOnly)
        let rateLimit = assertOption(route, "rate_limit", refusal: assertOnly, readRateLimit)
        let accept = assertOption(route, "accept", refusal: assertOnly, readAccept) ?? [.assertion]
        let tokenUse = assertOption(route, "token_use", refusal: assertOnly ?? (accept.contains(.token) ? nil : "only valid on routes whose accept lists token")) {
            $0.choice(TokenUse.self)
        } ?? .reusable
        let tokenMethods = assertOption(route, "token_methods", refusal: assertOnly ?? (accept.contains(.token) ? nil : "only valid on routes whose accept lists token"),
                                        readTokenMethods)
        let allowDebug = assertOption(route, "allow_debug", refusal: assertOnly) { $0.bool() } ?? true
        let timeouts = RouteTimeouts.read(route)
        let caseInsensitive = route.optional("case_insensitive")?.bool() ?? defaultCaseInsensitive
        guard let match, let policy else { return nil }
        var config = RouteConfig(match: match, methods: methods, upstream: upstream, policy: policy, mode: mode,
                           clientData: clientData, counterWindow: window, maxBodyBytes: maxBody, deviceCheck: deviceCheck,
                           rateLimit: rateLimit, accept: accept, tokenUse: tokenUse, caseInsensitive: caseInsensitive, index: index)
        config.allowDebug = allowDebug
        config.tokenMethods = tokenMethods
        config.timeouts = timeouts
        return config
    }

    /// `accept: [assertion, token]`: non-empty, no duplicates.
    private static func readAccept(_ value: ConfigValue) -> [AcceptedProof]? {
        guard let items = value.list() else { return nil }
        guard !items.isEmpty else {
            value.invalid("must list assertion, token or both (leave the key out for [assertion])")
            return nil
        }
        var accepted: [AcceptedProof] = []
        for item in items {
            guard let proof = item.choice(AcceptedProof.self) else { continue }
            if accepted.contains(proof) { item.invalid("\(proof.rawValue) is listed twice") } else { accepted.append(proof) }
        }
        return accepted.isEmpty ? nil : accepted
    }

    /// `token_methods: [app_attest, play_integrity]`: non-empty, no duplicates.
    private static func readTokenMethods(_ value: ConfigValue) -> [TokenMethod]? {
        guard let items = value.list() else { return nil }
        guard !items.isEmpty else {
            value.invalid("must list app_attest, play_integrity or both (leave the key out for every configured method)")
            return nil
        }
        var methods: [TokenMethod] = []
        for item in items {
            guard let method = item.choice(TokenMethod.self) else { continue }
            if methods.contains(method) { item.invalid("\(method.rawValue) is listed twice") } else { methods.append(method) }
        }
        return methods.isEmpty ? nil : methods
    }

    /// `rate_limit: { requests: 30, per_seconds: 60 }`, both required.
    static func readRateLimit(_ value: ConfigValue) -> RateLimit? {
        guard let limit = value.mapping() else { return nil }
        defer { limit.finish() }
        let requests = limit.required("requests")?.int(in: 1...1_000_000)
        let seconds = limit.required("per_seconds")?.int(in: 1...86_400)
        guard let requests, let seconds else { return nil }
        return RateLimit(requests: requests, perSeconds: seconds)
    }

    private static func readDeviceCheck(_ route: ConfigMapping, refusal: String?) -> DeviceCheckPolicy {
        var policy = DeviceCheckPolicy()
        if let fallback = assertOption(route, "fallback", refusal: refusal, { $0.choice(Fallback.self) }) {
            policy.fallback = fallback == .devicecheck
        }
        if let bits = assertOption(route, "deny_if_bits", refusal: refusal, { $0.mapping() }) {
            for bit in DeviceCheckPolicy.Bit.allCases {
                if let value = bits.optional(bit.rawValue)?.bool() { policy.denyIfBits[bit] = value }
            }
            bits.finish()
        }
        policy.oncePerDevice = assertOption(route, "once_per_device", refusal: refusal) { $0.choice(DeviceCheckPolicy.Bit.self) }
        policy.unreachable = assertOption(route, "apple_unreachable", refusal: refusal) { $0.choice(DeviceCheckPolicy.Unreachable.self) } ?? .closed
        policy.maxRiskMetric = assertOption(route, "max_risk_metric", refusal: refusal) { $0.int(in: 0...1_000_000) }
        policy.riskAction = assertOption(route, "risk_action", refusal: refusal) { $0.choice(DeviceCheckPolicy.RiskAction.self) } ?? .report
        return policy
    }

    private enum Fallback: String, CaseIterable { case devicecheck }

    private static func readMatch(_ route: ConfigMapping) -> Match? {
        let exact = route.optional("path")
        let prefix = route.optional("path_prefix")
        switch (exact, prefix) {
        case (let exact?, nil): return exact.string().flatMap { validPath($0, exact) }.map(Match.exact)
        case (nil, let prefix?): return prefix.string().flatMap { validPath($0, prefix) }.map(Match.prefix)
        case (_?, let prefix?):
            prefix.invalid("give either path or path_prefix, not both")
        case (nil, nil):
            route.log.report(.missingKey, route.path, "one of path or path_prefix is required", line: route.line)
        }
        return nil
    }

    /// Route paths are compared with decoded request paths, so they are written decoded: no `%`, and nothing
    /// `PathDecoding` would refuse (dot segments, `//`, backslashes).
    private static func validPath(_ path: String, _ value: ConfigValue) -> String? {
        guard path.hasPrefix("/") else {
            value.invalid("must start with \"/\", got \"\(path)\"")
            return nil
        }
        let hasForbiddenCharacter = path.unicodeScalars.contains {
            $0.value <= 0x20 || $0.value == 0x7F || "%?#".unicodeScalars.contains($0)
        }
        guard !hasForbiddenCharacter, PathDecoding.decode(path) == path else {
            value.invalid("must be a plain decoded path without %, ?, #, spaces, \"//\", \".\" or \"..\" segments, got \"\(path)\"")
            return nil
        }
        return path
    }

    private static func readMethods(_ value: ConfigValue) -> [String]? {
        guard let items = value.list() else { return nil }
        guard !items.isEmpty else {
            value.invalid("must list at least one method (leave the key out to allow all)")
            return nil
        }
        var methods: [String] = []
        for item in items {
            guard let method = item.string() else { continue }
            if method.isEmpty || !method.utf8.allSatisfy({ $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) {
                item.invalid("expected an uppercase method name like GET or POST, got \"\(method)\"")
            } else if methods.contains(method) {
                item.invalid("\(method) is listed twice")
            } else {
                methods.append(method)
            }
        }
        return methods
    }

    private static func readUpstream(_ route: ConfigMapping, policy: RoutePolicy?, upstreams: Set<String>) -> String? {
        let value = policy == .deny ? route.optional("upstream") : route.required("upstream")
        guard let value, let name = value.string() else { return nil }
        guard upstreams.contains(name) else {
            let known = upstreams.sorted().joined(separator: ", ")
            value.invalid("no upstream named \"\(name)\" (defined: \(known.isEmpty ? "none" : known))", .undefinedUpstream)
            return nil
        }
        return name
    }

    /// Reads a key that only `assert` routes accept; on other routes its presence is an error, because a
    /// reader would assume it has an effect.
    private static func assertOption<T>(_ route: ConfigMapping, _ key: String, refusal: String?,
                                        _ read: (ConfigValue) -> T?) -> T? {
        guard let value = route.optional(key) else { return nil }
        if let refusal {
            value.invalid(refusal)
            return nil
        }
        return read(value)
    }

    /// Case-insensitive routes that fold to the same path are duplicates too.
    private static func reportDuplicates(_ routes: [RouteConfig], items: [ConfigValue]) {
        var seen: [String: Int] = [:]
        for route in routes {
            let (key, text) = route.match.keyAndPath
            let identities = [key + " " + text] + (route.caseInsensitive ? [key + " folded " + Router.fold(text)] : [])
            if let first = identities.lazy.compactMap({ seen[$0] }).first {
                let item = items[route.index]
                item.log.report(.duplicateRoute, "\(item.path).\(key)",
                                "the same \(key) \"\(text)\" as routes[\(first)]",
                                line: item.node.line)
            } else {
                for identity in identities { seen[identity] = route.index }
            }
        }
    }
}

extension RouteConfig.Match: Hashable {
    var keyAndPath: (key: String, path: String) {
        switch self {
        case .exact(let path): return ("path", path)
        case .prefix(let path): return ("path_prefix", path)
        }
    }
}
