import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation

/// How a token was earned, and what that proof named.
enum TokenOrigin: Sendable, Equatable {
    /// An App Attest assertion of a registered key (`amr` ["app_attest"], `app`, `env`).
    case appAttest(app: AppID, environment: AppAttestEnvironment)
    /// A Play Integrity verdict (`amr` ["play_integrity"], `app` the package name, `device_integrity` its labels).
    case playIntegrity(package: String, deviceIntegrity: [String])

    var method: TokenMethod {
        switch self {
        case .appAttest: return .appAttest
        case .playIntegrity: return .playIntegrity
        }
    }
}

/// What a verified gateway token says: the key it was minted for and until when.
struct TokenClaims: Sendable {
    /// `sub`, standard base64 as in `X-Attest-Key-Id`: the App Attest key id, or for Play Integrity (whose
    /// verdicts name no device) 32 random bytes drawn at the mint, revocable like a key id.
    let subject: String
    let keyId: [UInt8]
    let origin: TokenOrigin
    let issuedAt: Int64
    let expiresAt: Int64
    /// Unique per token (`jti`, base64url of 16 random bytes): what a limited-use route spends.
    let tokenId: String
}

/// Mints and verifies gateway tokens: compact JWS (RFC 7515) signed with ES256 by the configured key,
/// header `{"alg":"ES256","typ":"JWT","kid":…}`, claims `sub app amr iat exp jti` and `env` (App Attest) or
/// `device_integrity` (Play Integrity). Verification needs no
/// Redis: signature, expiry and the process's revocation set (`TokenRevocations`). A token seen before
/// skips the signature check (an exact-match cache of verified tokens): a token is reused for many calls,
/// and the ECDSA verify would otherwise be most of a token request's CPU.
final class GatewayTokens: Sendable {
    /// Tokens are short and ASCII; anything longer is not one of ours.
    static let maxTokenBytes = 2048
    static let header = "X-App-Attest-Token"

    let config: TokenConfig
    let revocations: TokenRevocations
    /// kid → key, the current key and the previous one (rotation).
    private let verifiers: [String: P256PublicKey]
    private let verified = VerifiedTokenCache(capacity: 8192)

    init(config: TokenConfig, revocations: TokenRevocations) {
        self.config = config
        self.revocations = revocations
        var verifiers = [config.signingKey.kid: config.signingKey.publicKey]
        if let previous = config.previousKey { verifiers[previous.kid] = previous.publicKey }
        self.verifiers = verifiers
    }

    /// Reuses the running revocation subscription when Redis and the lag did not change on reload.
    static func build(_ config: GatewayConfig, store: AttestStore, previous: GatewayTokens?, log: EventLog) throws -> GatewayTokens? {
        guard let token = config.appAttest.token else { return nil }
        if let previous, previous.config == token, previous.revocations.store === store { return previous }
        let revocations: TokenRevocations
        if let running = previous?.revocations, running.store === store, running.maxLagSeconds == token.revocationMaxLagSeconds {
            revocations = running
        } else {
            revocations = TokenRevocations(store: store, maxLagSeconds: token.revocationMaxLagSeconds, log: log)
            // A token request arriving before the first sync would fail closed: give the sync a moment.
            _ = revocations.waitUntilCurrent(timeout: 2)
        }
        return GatewayTokens(config: token, revocations: revocations)
    }

    /// A new token for a key that has just proven itself with an assertion, or for a Play Integrity verdict.
    func mint(keyId: [UInt8], origin: TokenOrigin, now: Date = Date()) throws(GatewayError) -> String {
        let key = config.signingKey
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        // Every value is base64, an App ID or package name (letters, digits, . - _), a verdict label
        // (capitals and _, checked against the known labels) or a number: nothing needs JSON escaping.
        let header = #"{"alg":"ES256","typ":"JWT","kid":"\#(key.kid)"}"#
        let proof: String
        switch origin {
        case .appAttest(let app, let environment):
            proof = #""app":"\#(app)","amr":["app_attest"],"env":"\#(environment.rawValue)""#
        case .playIntegrity(let package, let labels):
            let known = labels.filter(IntegrityPolicy.deviceLabels.contains).map { "\"\($0)\"" }.joined(separator: ",")
            proof = #""app":"\#(package)","amr":["play_integrity"],"device_integrity":[\#(known)]"#
        }
        let claims = #"{"sub":"\#(Base64.encode(keyId))",\#(proof),"iat":\#(issuedAt),"#
            + #""exp":\#(issuedAt + Int64(config.ttlSeconds)),"jti":"\#(Base64.encodeURLSafe(SecureRandom.bytes(16)))"}"#
        let signingInput = Base64.encodeURLSafe(Array(header.utf8)) + "." + Base64.encodeURLSafe(Array(claims.utf8))
        do throws(VerificationError) {
            return signingInput + "." + Base64.encodeURLSafe(try key.privateKey.es256Signature(for: Array(signingInput.utf8)))
        } catch {
            throw .tokenSigningFailed("cannot sign with \(key.file): \(error.message)")
        }
    }

    /// Signature (or an earlier verification of these exact bytes), `iat` and `exp` with the clock skew.
    func verify(_ token: String, now: Int64) throws(GatewayError) -> TokenClaims {
        let claims: TokenClaims
        if let cached = verified.claims(for: token) {
            claims = cached
        } else {
            claims = try Self.parse(token, verifiers: verifiers)
            verified.store(claims, for: token)
        }
        let skew = Int64(config.clockSkewSeconds)
        guard now < claims.expiresAt + skew else { throw .tokenExpired }
        guard claims.issuedAt <= now + skew else { throw .tokenInvalid("issued in the future (iat); check the gateways' clocks") }
        return claims
    }

    /// The public keys as a JWK Set (RFC 7517 §5), for upstreams that verify tokens themselves.
    var jwks: String {
        let keys = [config.signingKey] + (config.previousKey.map { [$0] } ?? [])
        let members = keys.map { key in
            let (x, y) = TokenSigningKey.coordinates(key.publicKey)
            return #"{"kty":"EC","crv":"P-256","x":"\#(x)","y":"\#(y)","kid":"\#(key.kid)","use":"sig","alg":"ES256"}"#
        }
        return #"{"keys":["# + members.joined(separator: ",") + "]}"
    }

    private static func parse(_ token: String, verifiers: [String: P256PublicKey]) throws(GatewayError) -> TokenClaims {
        let bytes = Array(token.utf8)
        guard bytes.count <= maxTokenBytes else { throw .tokenInvalid("longer than \(maxTokenBytes) bytes") }
        // One spelling per token, so nothing keyed on its text (an upstream's cache, a replay list) can be
        // fooled by another: base64url without padding (RFC 7515 §2), nothing else — no `+ / =`, no
        // whitespace — and the low-S form of the signature, the only one the gateway mints.
        guard bytes.allSatisfy({ isBase64URLByte($0) || $0 == UInt8(ascii: ".") }) else {
            throw .tokenInvalid("not a compact JWS: a byte other than base64url (A-Z a-z 0-9 - _) and \".\"")
        }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64.decode(utf8: Array(parts[0])),
              let payloadBytes = Base64.decode(utf8: Array(parts[1])), let signature = Base64.decode(utf8: Array(parts[2])) else {
            throw .tokenInvalid("not a compact JWS (three base64url parts)")
        }
        guard ECDSASignature.isLowS(signature) else { throw .tokenInvalid("the signature is not in its low-S form") }
        guard let header = jsonObject(headerBytes), header["alg"] as? String == "ES256", header["crit"] == nil,
              header["typ"] == nil || header["typ"] as? String == "JWT", let kid = header["kid"] as? String else {
            throw .tokenInvalid("the header is not {\"alg\":\"ES256\",\"kid\":…}")
        }
        guard let key = verifiers[kid] else { throw .tokenInvalid("signed with a key this gateway does not know (kid \(kid.prefix(64)))") }
        let signingInput = Array(bytes[..<parts[1].endIndex])
        guard let der = ECDSASignature.der(fromRaw: signature), key.isValidSignature(der, for: signingInput) else {
            throw .tokenInvalid("the signature does not verify")
        }
        guard let payload = jsonObject(payloadBytes), let subject = payload["sub"] as? String,
              let keyId = Base64.decode(subject), keyId.count == 32, let origin = origin(of: payload),
              let issuedAt = integer(payload["iat"]), let expiresAt = integer(payload["exp"]),
              let tokenId = payload["jti"] as? String, !tokenId.isEmpty, tokenId.utf8.count <= 64 else {
            throw .tokenInvalid("the claims are not sub, app, amr, env or device_integrity, iat, exp, jti as the gateway mints them")
        }
        return TokenClaims(subject: Base64.encode(keyId), keyId: keyId, origin: origin, issuedAt: issuedAt, expiresAt: expiresAt, tokenId: tokenId)
    }

    /// `amr` names the method; tokens minted before `amr` existed are App Attest ones.
    private static func origin(of payload: [String: Any]) -> TokenOrigin? {
        guard let app = payload["app"] as? String else { return nil }
        let methods = payload["amr"].map { $0 as? [String] }
        if methods == nil || methods == [TokenMethod.appAttest.rawValue] {
            guard let appID = AppID(app), let environment = (payload["env"] as? String).flatMap(AppAttestEnvironment.init) else { return nil }
            return .appAttest(app: appID, environment: environment)
        }
        guard methods == [TokenMethod.playIntegrity.rawValue], let labels = payload["device_integrity"] as? [String] else { return nil }
        return .playIntegrity(package: app, deviceIntegrity: labels)
    }

    private static func isBase64URLByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "_"): true
        default: false
        }
    }

    private static func jsonObject(_ bytes: [UInt8]) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }

    /// Whole JSON numbers (the payload is the gateway's own once the signature verified; this is belt and braces).
    private static func integer(_ value: Any?) -> Int64? {
        guard let number = value as? NSNumber else { return nil }
        let whole = number.int64Value
        return Double(whole) == number.doubleValue ? whole : nil
    }
}

/// Verified tokens by their exact text, two generations like `KeyCache`: bounded memory, recent tokens kept.
/// Only the signature check is cached; expiry, app, environment and revocation are checked on every use.
final class VerifiedTokenCache: Sendable {
    private struct Generations {
        var young: [String: TokenClaims] = [:]
        var old: [String: TokenClaims] = [:]
    }

    private let generations = Locked(Generations())
    private let generationSize: Int

    init(capacity: Int) {
        generationSize = max(1, capacity / 2)
    }

    func claims(for token: String) -> TokenClaims? {
        generations.withLock { state in
            if let claims = state.young[token] { return claims }
            guard let claims = state.old[token] else { return nil }
            Self.insert(token, claims, into: &state, generationSize: generationSize)
            return claims
        }
    }

    func store(_ claims: TokenClaims, for token: String) {
        generations.withLock { Self.insert(token, claims, into: &$0, generationSize: generationSize) }
    }

    private static func insert(_ token: String, _ claims: TokenClaims, into state: inout Generations, generationSize: Int) {
        if state.young.count >= generationSize {
            state.old = state.young
            state.young = [:]
        }
        state.young[token] = claims
    }
}
