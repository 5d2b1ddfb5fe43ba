import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation

/// `app_attest.token:` — short-lived gateway tokens minted at `{prefix}/assert/token` for a signed request,
/// accepted on routes with `accept: [..., token]`. Optional; without it there is no mint endpoint and no
/// route may accept tokens.
public struct TokenConfig: Sendable {
    /// The key new tokens are signed with, and the file it came from.
    public let signingKey: TokenSigningKey
    /// A retired key whose tokens are still accepted while they expire (rotation).
    public let previousKey: TokenSigningKey?
    public let ttlSeconds: Int
    /// How stale this process's revocation set may be before token requests fail closed.
    public let revocationMaxLagSeconds: Int
    /// Tolerated difference between the gateways' clocks for `exp` and `iat`.
    public let clockSkewSeconds: Int
    /// Per-key limit on minted tokens (counted like an assert route's `rate_limit`); nil = none.
    public let rateLimit: RateLimit?

    /// A token lives at most a day: the revocation set only needs a day of history.
    public static let maxTTLSeconds = AttestStore.maxTokenTTLSeconds

    /// Relative key paths are resolved against `baseDirectory` (the config file's folder).
    static func read(_ value: ConfigValue?, baseDirectory: String) -> TokenConfig? {
        guard let value, let section = value.mapping() else { return nil }
        defer { section.finish() }
        let key = readKey(section.required("signing_key_file"), baseDirectory: baseDirectory)
        let previous = section.optional("previous_signing_key_file").flatMap { readKey($0, baseDirectory: baseDirectory) }
        let ttl = section.int("ttl_seconds", default: 600, in: 1...maxTTLSeconds)
        let lag = section.int("revocation_max_lag_seconds", default: 5, in: 1...300)
        let skew = section.int("clock_skew_seconds", default: 5, in: 0...300)
        let rateLimit = section.optional("rate_limit").flatMap(RouteConfig.readRateLimit)
        guard let key else { return nil }
        if let previous, previous.kid == key.kid, let node = section.optional("previous_signing_key_file") {
            node.invalid("is the same key as signing_key_file (kid \(key.kid))")
        }
        return TokenConfig(signingKey: key, previousKey: previous, ttlSeconds: ttl, revocationMaxLagSeconds: lag,
                           clockSkewSeconds: skew, rateLimit: rateLimit)
    }

    private static func readKey(_ value: ConfigValue?, baseDirectory: String) -> TokenSigningKey? {
        guard let value, let text = value.string() else { return nil }
        let path = text.hasPrefix("/") ? text : (baseDirectory as NSString).appendingPathComponent(text)
        guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
            value.invalid("cannot read \(path)")
            return nil
        }
        do {
            return TokenSigningKey(privateKey: try P256PrivateKey(pem: pem), file: path)
        } catch {
            value.invalid("\(path) is not a P-256 private key in PEM (\(error.message)); make one with: openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt")
            return nil
        }
    }
}

extension TokenConfig: Equatable {
    /// Same keys (by kid and file) and settings: a reload keeps the running token state.
    public static func == (left: TokenConfig, right: TokenConfig) -> Bool {
        left.signingKey == right.signingKey && left.previousKey == right.previousKey && left.ttlSeconds == right.ttlSeconds
            && left.revocationMaxLagSeconds == right.revocationMaxLagSeconds && left.clockSkewSeconds == right.clockSkewSeconds
            && left.rateLimit == right.rateLimit
    }
}

/// One ES256 signing key with its JWK thumbprint (RFC 7638), which tokens carry as `kid`.
public struct TokenSigningKey: Sendable, Equatable {
    public let privateKey: P256PrivateKey
    public let file: String
    public let kid: String

    init(privateKey: P256PrivateKey, file: String) {
        self.privateKey = privateKey
        self.file = file
        kid = Base64.encodeURLSafe(SHA256.hash(Array(TokenSigningKey.thumbprintInput(privateKey.publicKey).utf8)))
    }

    public var publicKey: P256PublicKey { privateKey.publicKey }

    /// The public JWK members (RFC 7518 §6.2.1): x and y are the point's 32-byte coordinates, base64url.
    static func coordinates(_ key: P256PublicKey) -> (x: String, y: String) {
        (Base64.encodeURLSafe(Array(key.point[1..<33])), Base64.encodeURLSafe(Array(key.point[33..<65])))
    }

    /// RFC 7638 §3.2: the required members in lexicographic order, no whitespace.
    private static func thumbprintInput(_ key: P256PublicKey) -> String {
        let (x, y) = coordinates(key)
        return #"{"crv":"P-256","kty":"EC","x":"\#(x)","y":"\#(y)"}"#
    }

    public static func == (left: TokenSigningKey, right: TokenSigningKey) -> Bool {
        left.kid == right.kid && left.file == right.file
    }
}
