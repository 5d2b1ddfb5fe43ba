import EventLoop
import RedisClient
import AssertionCheck
import Foundation

/// The gateway's shared state in Redis: attested keys, their sign counters, and spent challenges.
///
/// Challenges are issued without Redis (they carry their own MAC and expiry, see `ChallengeCodec`); Redis
/// only remembers the ones that were used, until they expire.
///
/// Attestation: once the attestation verified, `spendChallenge` (single use), then `register` on the key's
/// slot. The two steps touch two slots, which is safe: the challenge is spent after the first step either way.
///
/// Assertion: `commitAssertion` checks the key, spends the challenge and advances the counter in one
/// script, so concurrent replays cannot both pass.
public final class AttestStore: Sendable {
    public static let maxCounterWindow = 4096
    /// The longest gateway-token lifetime (`app_attest.token.ttl_seconds`): revocations are kept this long.
    public static let maxTokenTTLSeconds = 86_400
    public let redis: Redis
    let transport: StoreTransport
    let keys: StoreKeys
    let scripts = StoreScripts()

    public init(redis: Redis, keyPrefix: String = "aag") throws(StoreError) {
        self.redis = redis
        transport = StoreTransport(redis: redis)
        self.keys = try StoreKeys(prefix: keyPrefix)
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
        let reply = try transport.sendBlocking(.script(scripts.register, keys: recordKeys, arguments: record.fields))
        return try Self.integer(reply, from: scripts.register) == 1 ? .created : .alreadyRegistered
    }

    /// The key's record; with `environment` nil, whichever environment holds it (one round trip).
    public func loadKey(keyId: [UInt8], environment: AppAttestEnvironment? = nil) throws(StoreError) -> KeyRecord? {
        guard StoreKeys.isPlausible(keyId: keyId) else { return nil }
        let reply = try transport.sendBlocking(.script(scripts.loadKey, keys: keys.records(keyId: keyId, environment: environment),
                                                       arguments: []))
        switch reply {
        case .null: return nil
        case .array(let fields): return try KeyRecord(keyId: keyId, hashFields: fields)
        default: throw reply.storeError(context: "script \(scripts.loadKey.name)")
        }
    }

    /// The parts of the key's record an assertion is verified with (any environment, one round trip).
    public func loadPublicKey(keyId: [UInt8]) throws(StoreError) -> PublicKeyRecord? {
        try transport.perform(loadPublicKeyOperation(keyId: keyId))
    }

    public func loadPublicKey(keyId: [UInt8]) async throws(StoreError) -> PublicKeyRecord? {
        try await transport.perform(loadPublicKeyOperation(keyId: keyId))
    }

    private func loadPublicKeyOperation(keyId: [UInt8]) -> Prepared<PublicKeyRecord?> {
        guard StoreKeys.isPlausible(keyId: keyId) else { return .answered(nil) }
        return .send(.script(scripts.loadPublicKey, keys: keys.records(keyId: keyId, environment: nil), arguments: []),
                     Self.publicKeyRecord)
    }

    private static func publicKeyRecord(_ reply: RedisReply) throws(StoreError) -> PublicKeyRecord? {
        switch reply {
        case .null: return nil
        case .array(let fields):
            guard fields.count == 3, case .string(let spki) = fields[0], case .string(let appID) = fields[1],
                  case .string(let environmentName) = fields[2],
                  let environment = AppAttestEnvironment(rawValue: String(decoding: environmentName, as: UTF8.self)) else {
                throw .unexpectedReply("key record lacks its public key, app id or a known environment")
            }
            return PublicKeyRecord(publicKeySPKI: spki, appID: String(decoding: appID, as: UTF8.self), environment: environment)
        default: throw reply.storeError(context: "script load_public_key")
        }
    }

    /// Records one verified assertion (see `StoreScripts.commitAssertion` for the rules). `challenge` is
    /// nil on routes whose client data is the request itself rather than a challenge. A key id that cannot
    /// have been stored (empty, or over `StoreKeys` bounds) is refused without a round trip; `window` is
    /// the number of recent counters tolerated out of order (0 = strict).
    /// `rateLimit` applies per key and `route` (a route's log name).
    public func commitAssertion(keyId: [UInt8], environment: AppAttestEnvironment, challenge: ChallengeUse?,
                                counter: UInt32, window: Int, rateLimit: RateLimit? = nil, route: String = "",
                                now: Date = Date()) throws(StoreError) -> CommitOutcome {
        try transport.perform(commitOperation(keyId: keyId, environment: environment, challenge: challenge, counter: counter,
                                              window: window, rateLimit: rateLimit, route: route, now: now))
    }

    nonisolated(nonsending)
    public func commitAssertion(keyId: [UInt8], environment: AppAttestEnvironment, challenge: ChallengeUse?,
                                counter: UInt32, window: Int, rateLimit: RateLimit? = nil, route: String = "",
                                now: Date = Date()) async throws(StoreError) -> CommitOutcome {
        try await transport.perform(commitOperation(keyId: keyId, environment: environment, challenge: challenge, counter: counter,
                                                    window: window, rateLimit: rateLimit, route: route, now: now))
    }

    private func commitOperation(keyId: [UInt8], environment: AppAttestEnvironment, challenge: ChallengeUse?, counter: UInt32,
                                 window: Int, rateLimit: RateLimit?, route: String, now: Date) throws(StoreError) -> Prepared<CommitOutcome> {
        guard (0...Self.maxCounterWindow).contains(window) else {
            throw .invalidArgument("counter window must be 0-\(Self.maxCounterWindow), got \(window)")
        }
        guard StoreKeys.isPlausible(keyId: keyId) else { return .answered(.rejected(.keyUnknown)) }
        if let challenge { try challenge.validate() }
        // Keys and arguments written straight into the command (see `StoreScripts.commitAssertion`).
        let slot = keys.slot(keyId)
        var call = RedisArguments(capacity: 4 * slot.start.count + (challenge?.id.utf8.count ?? 0) + route.utf8.count + 160)
        call.append(challenge == nil ? 3 : 4)
        slot.append(.record(environment), to: &call)
        slot.append(.window(environment), to: &call)
        slot.append(.rate(route: route), to: &call)
        if let challenge { slot.append(.spentChallenge(challenge.id), to: &call) }
        call.append(Int(counter))
        call.append(window)
        call.append(Int(KeyRecord.seconds(now)))
        call.append(rateLimit?.requests ?? 0)
        call.append((rateLimit?.perSeconds ?? 0) * 1000)
        call.append(challenge?.ttlMs ?? 0)
        return .send(.script(scripts.commitAssertion, call: call, key: slot.start), Self.commitOutcome)
    }

    /// Marks the key revoked (in `environment`, or wherever it is); false when there is no such key.
    public func revoke(keyId: [UInt8], environment: AppAttestEnvironment? = nil,
                       reason: String) throws(StoreError) -> Bool {
        guard StoreKeys.isPlausible(keyId: keyId) else { return false }
        let reply = try transport.sendBlocking(.script(scripts.revoke, keys: keys.records(keyId: keyId, environment: environment),
                                                       arguments: [Array(reason.utf8)]))
        return try Self.integer(reply, from: scripts.revoke) > 0
    }

    /// Redis answers PING within the client's timeout (for /readyz).
    public func ping() -> Bool { pingFailure() == nil }

    /// Why Redis cannot be used, nil when it answers PING: unreachable, or a refused login or database.
    public func pingFailure() -> StoreError? {
        do throws(StoreError) {
            let reply = try transport.sendBlocking(.command([Array("PING".utf8)], key: nil))
            return reply == .status("PONG") ? nil : reply.storeError(context: "PING")
        } catch {
            return error
        }
    }

    public func ping() async -> Bool {
        (try? await transport.send(.command([Array("PING".utf8)], key: nil))) == .status("PONG")
    }

    static func integer(_ reply: RedisReply, from script: LuaScript) throws(StoreError) -> Int64 {
        guard case .integer(let value) = reply else { throw reply.storeError(context: "script \(script.name)") }
        return value
    }

    private static func commitOutcome(_ reply: RedisReply) throws(StoreError) -> CommitOutcome {
        guard case .array(let items) = reply, case .string(let status)? = items.first else {
            throw reply.storeError(context: "script commit_assertion")
        }
        // Compared and read as bytes: a String per field cost more than the rest of the reply.
        if status == rateLimitedStatus, items.count == 2, case .string(let left) = items[1],
           let milliseconds = RESP.decimal(left[...]).flatMap({ Int(exactly: $0) }) {
            return .rateLimited(retryAfterMs: max(milliseconds, 0))
        }
        if status == acceptedStatus, items.count == 3, case .string(let previous) = items[1], case .string(let risk) = items[2],
           let counter = RESP.decimal(previous[...]).flatMap({ UInt32(exactly: $0) }) {
            return .accepted(previousCounter: counter, riskMetric: RESP.decimal(risk[...]).flatMap { Int(exactly: $0) })
        }
        let code = String(decoding: status, as: UTF8.self)
        guard let rejection = CommitRejection(rawValue: code) else {
            throw .unexpectedReply("script commit_assertion answered status \(code)")
        }
        return .rejected(rejection)
    }

    private static let acceptedStatus = Array("accepted".utf8)
    private static let rateLimitedStatus = Array("rate_limited".utf8)
}
