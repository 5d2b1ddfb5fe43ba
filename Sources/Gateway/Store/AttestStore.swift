import AssertionCheck
import Foundation

/// The gateway's shared state in Redis: challenges, attested keys, and their sign counters.
///
/// Attestation: `issueAttestChallenge`, then `consumeAttestChallenge` (single use, even if verification
/// fails afterwards), then `register` on the key's slot. The two steps touch two slots, which is safe:
/// the challenge is gone after the first step either way.
///
/// Assertion: `issueAssertChallenge(keyId:)` binds the challenge to the key (so `/assert/challenge`
/// requires `key_id`), and `commitAssertion` checks the key, burns the challenge and advances the
/// counter in one script on the key's slot, so concurrent replays cannot both pass.
public final class AttestStore: Sendable {
    public static let maxCounterWindow = 4096
    public let pool: RedisPool
    let keys: StoreKeys
    let scripts = StoreScripts()

    public init(pool: RedisPool, keyPrefix: String = "aag") throws(StoreError) {
        self.pool = pool
        self.keys = try StoreKeys(prefix: keyPrefix)
    }

    /// A fresh attestation challenge: base64url of 32 random bytes, valid for `ttlSeconds`.
    public func issueAttestChallenge(ttlSeconds: Int) throws(StoreError) -> String {
        try issue(ttlSeconds: ttlSeconds, purpose: "attest") { keys.attestChallenge($0) }
    }

    /// True exactly once per issued attestation challenge, within its TTL.
    public func consumeAttestChallenge(_ challenge: String) throws(StoreError) -> Bool {
        guard StoreKeys.isPlausible(challenge: challenge) else { return false }
        let reply = try pool.with { connection throws(StoreError) in
            try scripts.consumeChallenge.run(on: connection, keys: [keys.attestChallenge(challenge)],
                                             arguments: [Array("attest".utf8)])
        }
        return try Self.integer(reply, from: scripts.consumeChallenge) == 1
    }

    /// A fresh assertion challenge usable only with `keyId`, valid for `ttlSeconds`. It is issued whether
    /// or not the key is registered (the commit rejects unknown keys), so it reveals nothing about keys.
    public func issueAssertChallenge(keyId: [UInt8], ttlSeconds: Int) throws(StoreError) -> String {
        guard StoreKeys.isPlausible(keyId: keyId) else {
            throw .invalidArgument("key id must be 1-\(StoreKeys.maxKeyIdBytes) bytes")
        }
        return try issue(ttlSeconds: ttlSeconds, purpose: "assert") { keys.assertChallenge($0, keyId: keyId) }
    }

    /// Stores a newly attested key unless its key id already has a record in any environment.
    public func register(_ record: KeyRecord) throws(StoreError) -> RegisterOutcome {
        guard StoreKeys.isPlausible(keyId: record.keyId) else {
            throw .invalidArgument("key id must be 1-\(StoreKeys.maxKeyIdBytes) bytes")
        }
        let others = AppAttestEnvironment.allCases.filter { $0 != record.environment }
        let recordKeys = [keys.record(keyId: record.keyId, environment: record.environment),
                          keys.window(keyId: record.keyId, environment: record.environment)]
            + others.map { keys.record(keyId: record.keyId, environment: $0) }
        let reply = try pool.with { connection throws(StoreError) in
            try scripts.register.run(on: connection, keys: recordKeys, arguments: record.fields)
        }
        return try Self.integer(reply, from: scripts.register) == 1 ? .created : .alreadyRegistered
    }

    /// The key's record; with `environment` nil, whichever environment holds it (one round trip).
    public func loadKey(keyId: [UInt8], environment: AppAttestEnvironment? = nil) throws(StoreError) -> KeyRecord? {
        guard StoreKeys.isPlausible(keyId: keyId) else { return nil }
        let reply = try pool.with { connection throws(StoreError) in
            try scripts.loadKey.run(on: connection, keys: keys.records(keyId: keyId, environment: environment),
                                    arguments: [])
        }
        switch reply {
        case .null: return nil
        case .array(let fields): return try KeyRecord(keyId: keyId, hashFields: fields)
        default: throw reply.storeError(context: "script \(scripts.loadKey.name)")
        }
    }

    /// The parts of the key's record an assertion is verified with (any environment, one round trip).
    public func loadPublicKey(keyId: [UInt8]) throws(StoreError) -> PublicKeyRecord? {
        guard StoreKeys.isPlausible(keyId: keyId) else { return nil }
        let reply = try pool.with { connection throws(StoreError) in
            try scripts.loadPublicKey.run(on: connection, keys: keys.records(keyId: keyId, environment: nil), arguments: [])
        }
        switch reply {
        case .null: return nil
        case .array(let fields):
            guard fields.count == 3, case .string(let spki) = fields[0], case .string(let appID) = fields[1],
                  case .string(let environmentName) = fields[2],
                  let environment = AppAttestEnvironment(rawValue: String(decoding: environmentName, as: UTF8.self)) else {
                throw .unexpectedReply("key record lacks its public key, app id or a known environment")
            }
            return PublicKeyRecord(publicKeySPKI: spki, appID: String(decoding: appID, as: UTF8.self), environment: environment)
        default: throw reply.storeError(context: "script \(scripts.loadPublicKey.name)")
        }
    }

    /// Records one verified assertion (see `StoreScripts.commitAssertion` for the rules). `challenge` is
    /// nil on routes whose client data is the request itself rather than a challenge. A key id or
    /// challenge that cannot have been stored (empty, or over `StoreKeys` bounds) is refused without a
    /// round trip; `window` is the number of recent counters tolerated out of order (0 = strict).
    /// `rateLimit` applies per key and `route` (a route's log name).
    public func commitAssertion(keyId: [UInt8], environment: AppAttestEnvironment, challenge: String?,
                                counter: UInt32, window: Int, rateLimit: RateLimit? = nil, route: String = "",
                                now: Date = Date()) throws(StoreError) -> CommitOutcome {
        guard (0...Self.maxCounterWindow).contains(window) else {
            throw .invalidArgument("counter window must be 0-\(Self.maxCounterWindow), got \(window)")
        }
        guard StoreKeys.isPlausible(keyId: keyId) else { return .rejected(.keyUnknown) }
        if let challenge, !StoreKeys.isPlausible(challenge: challenge) { return .rejected(.challengeUnknown) }
        let commitKeys = [keys.record(keyId: keyId, environment: environment),
                          keys.window(keyId: keyId, environment: environment), keys.rate(keyId: keyId, route: route)]
            + (challenge.map { [keys.assertChallenge($0, keyId: keyId)] } ?? [])
        let arguments = [String(counter), String(window), String(KeyRecord.seconds(now)),
                         String(rateLimit?.requests ?? 0), String((rateLimit?.perSeconds ?? 0) * 1000)].map { Array($0.utf8) }
        let reply = try pool.with { connection throws(StoreError) in
            try scripts.commitAssertion.run(on: connection, keys: commitKeys, arguments: arguments)
        }
        return try Self.commitOutcome(reply)
    }

    /// Marks the key revoked (in `environment`, or wherever it is); false when there is no such key.
    public func revoke(keyId: [UInt8], environment: AppAttestEnvironment? = nil,
                       reason: String) throws(StoreError) -> Bool {
        guard StoreKeys.isPlausible(keyId: keyId) else { return false }
        let reply = try pool.with { connection throws(StoreError) in
            try scripts.revoke.run(on: connection, keys: keys.records(keyId: keyId, environment: environment),
                                   arguments: [Array(reason.utf8)])
        }
        return try Self.integer(reply, from: scripts.revoke) > 0
    }

    /// Redis answers PING within the pool's timeout (for /readyz).
    public func ping() -> Bool {
        let reply = try? pool.with { connection throws(StoreError) in try connection.command("PING") }
        return reply == .status("PONG")
    }

    private func issue(ttlSeconds: Int, purpose: String, key: (String) -> [UInt8]) throws(StoreError) -> String {
        guard ttlSeconds > 0 else { throw .invalidArgument("challenge TTL must be positive, got \(ttlSeconds) s") }
        let challenge = Self.randomChallenge()
        let set = [Array("SET".utf8), key(challenge)] + [purpose, "NX", "EX", String(ttlSeconds)].map { Array($0.utf8) }
        let reply = try pool.with { connection throws(StoreError) in try connection.command(set) }
        // NX refuses only a collision of 256-bit random values: something is badly wrong if it happens.
        guard reply == .status("OK") else { throw reply.storeError(context: "SET of a new \(purpose) challenge") }
        return challenge
    }

    private static func randomChallenge() -> String {
        Base64.encodeURLSafe(SecureRandom.bytes(32))
    }

    static func integer(_ reply: RedisReply, from script: LuaScript) throws(StoreError) -> Int64 {
        guard case .integer(let value) = reply else { throw reply.storeError(context: "script \(script.name)") }
        return value
    }

    private static func commitOutcome(_ reply: RedisReply) throws(StoreError) -> CommitOutcome {
        guard case .array(let items) = reply, case .string(let status)? = items.first else {
            throw reply.storeError(context: "script commit_assertion")
        }
        let code = String(decoding: status, as: UTF8.self)
        if code == "rate_limited", items.count == 2, case .string(let left) = items[1],
           let milliseconds = Int(String(decoding: left, as: UTF8.self)) {
            return .rateLimited(retryAfterMs: max(milliseconds, 0))
        }
        if code == "accepted", items.count == 3, case .string(let previous) = items[1], case .string(let risk) = items[2],
           let counter = UInt32(String(decoding: previous, as: UTF8.self)) {
            return .accepted(previousCounter: counter, riskMetric: Int(String(decoding: risk, as: UTF8.self)))
        }
        guard let rejection = CommitRejection(rawValue: code) else {
            throw .unexpectedReply("script commit_assertion answered status \(code)")
        }
        return .rejected(rejection)
    }
}
