import RedisClient
import EventLoop
import AttestStore
import AssertionCheck

/// `app_attest:` — which apps may call, and how their keys are verified.
public struct AppAttestConfig: Sendable {
    public let apps: [AppID]
    public let environments: [AppAttestEnvironment]
    public let trustAnchor: TrustAnchor
    /// The PEM file the trust anchor came from; nil for Apple's built-in root.
    public let trustAnchorFile: String?
    public let challengeTTLSeconds: Int
    public let keyCacheSize: Int
    /// `challenge_secret_file`, resolved; nil when the secret is shared through Redis.
    public let challengeSecretFile: String?
    /// Read from `challengeSecretFile`: the first signs, a second (the previous one) is still accepted.
    let challengeSecrets: ChallengeSecrets?
    /// Per client address, on both challenge endpoints; nil = none.
    public let challengeRateLimit: RateLimit?
    /// Gateway tokens (`token:`); nil when the section is absent.
    public let token: TokenConfig?
    /// Secrets (by SHA-256) accepted in place of an assertion, for the Simulator and CI; empty = none.
    public var debugTokens: [DebugToken] = []

    /// Relative trust-anchor paths are resolved against `baseDirectory` (the config file's folder).
    static func read(_ section: ConfigMapping, baseDirectory: String) -> AppAttestConfig {
        defer { section.finish() }
        let apps = readApps(section.required("apps"))
        let environments = readEnvironments(section.optional("environments")) ?? [.production]
        let (anchor, anchorFile) = readTrustAnchor(section.optional("trust_anchor"), baseDirectory: baseDirectory)
        let (secretFile, secrets) = ChallengeSecrets.read(section.optional("challenge_secret_file"), baseDirectory: baseDirectory)
        return AppAttestConfig(apps: apps, environments: environments, trustAnchor: anchor, trustAnchorFile: anchorFile,
                               challengeTTLSeconds: section.int("challenge_ttl_seconds", default: 300, in: 1...3600),
                               keyCacheSize: section.int("key_cache_size", default: 20_000, in: 0...10_000_000),
                               challengeSecretFile: secretFile, challengeSecrets: secrets,
                               challengeRateLimit: section.optional("challenge_rate_limit").flatMap(RouteConfig.readRateLimit),
                               token: TokenConfig.read(section.optional("token"), baseDirectory: baseDirectory),
                               debugTokens: DebugToken.readAll(section.optional("debug_tokens")))
    }

    private static func readApps(_ value: ConfigValue?) -> [AppID] {
        guard let value, let items = value.list() else { return [] }
        if items.isEmpty { value.invalid("at least one app is required") }
        var apps: [AppID] = []
        for item in items {
            guard let text = item.string() else { continue }
            guard let app = AppID(text), isTeamID(app.teamID), isBundleID(app.bundleID) else {
                item.invalid("expected TEAMID.bundle.id with a 10-character team ID, got \"\(text)\"")
                continue
            }
            if apps.contains(app) { item.invalid("\(text) is listed twice") } else { apps.append(app) }
        }
        return apps
    }

    private static func isTeamID(_ text: String) -> Bool {
        text.utf8.count == 10 && text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) }
    }

    private static func isBundleID(_ text: String) -> Bool {
        !text.hasPrefix(".") && !text.hasSuffix(".") && !text.contains("..")
            && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-") }
    }

    private static func readEnvironments(_ value: ConfigValue?) -> [AppAttestEnvironment]? {
        guard let value, let items = value.list() else { return nil }
        if items.isEmpty { value.invalid("at least one environment is required") }
        var environments: [AppAttestEnvironment] = []
        for item in items {
            guard let environment = item.choice(AppAttestEnvironment.self) else { continue }
            if environments.contains(environment) {
                item.invalid("\(environment.rawValue) is listed twice")
            } else {
                environments.append(environment)
            }
        }
        return environments
    }

    private static func readTrustAnchor(_ value: ConfigValue?, baseDirectory: String) -> (TrustAnchor, String?) {
        guard let value, let text = value.string(), text != "apple" else { return (.apple, nil) }
        let path = text.hasPrefix("/") ? text : "\(baseDirectory)/\(text)"
        do {
            return (try TrustAnchor(pemFile: path), path)
        } catch {
            value.invalid("expected \"apple\" or a readable PEM certificate file: \(error.message)")
            return (.apple, nil)
        }
    }
}
