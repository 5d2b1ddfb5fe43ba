import EventLoop
import RedisClient
import AssertionCheck
import Foundation

/// Redis state of gateway tokens. Token verification itself reads nothing; Redis holds:
///
///     <prefix>:revoked-keys                  sorted set: key ids (base64url) revoked, scored by Unix time
///     <prefix>:revocations:<db>              pub/sub channel: each revoked key id, as it is revoked
///     <prefix>:{<key id>}:jti:<jti>          string, TTL until the token expires: a limited-use token spent
///
/// The set is what a gateway loads when it (re)subscribes; entries older than the longest token lifetime
/// cannot matter any more and are pruned by the next revocation.
extension AttestStore {
    /// How far back a (re)subscribing gateway loads revocations: a token lives at most a day, plus skew.
    public static let revocationHistorySeconds = AttestStore.maxTokenTTLSeconds + 300

    /// Pub/sub ignores the database number: it is part of the channel, so gateways on other databases
    /// of one Redis do not hear each other.
    public var revocationChannel: [UInt8] { Array("\(keys.prefix):revocations:\(redis.options.database)".utf8) }

    private var revokedKeysKey: [UInt8] { Array("\(keys.prefix):revoked-keys".utf8) }

    /// Records the revocation for every gateway's token check and tells the running ones at once.
    /// Call after `revoke` marked the key record (the record is what assertions and mints check).
    public func announceRevocation(keyId: [UInt8], now: Date = Date()) throws(StoreError) {
        let member = Array(Base64.encodeURLSafe(keyId).utf8)
        let seconds = KeyRecord.seconds(now)
        for request in [
            StoreRequest.keyed([Array("ZADD".utf8), revokedKeysKey, Array(String(seconds).utf8), member]),
            .keyed([Array("ZREMRANGEBYSCORE".utf8), revokedKeysKey, Array("-inf".utf8),
                    Array("(\(seconds - Int64(2 * Self.revocationHistorySeconds))".utf8)]),
            // Pub/sub reaches every node of a Cluster: the channel needs no slot.
            .command([Array("PUBLISH".utf8), revocationChannel, member], key: nil),
        ] {
            if case .error(let message) = try transport.sendBlocking(request) {
                throw StoreError.reply(message, context: "announcing a revocation")
            }
        }
    }

    /// A subscription to the revocation channel on a connection of its own, for a thread that may block.
    public func subscribeToRevocations() throws(StoreError) -> RedisSubscription {
        let (redis, channel) = (self.redis, revocationChannel)
        let outcome = waitFor(timeoutMs: redis.longestCommandMs) { () async -> Unchecked<Result<RedisSubscription, RedisClientError>> in
            do throws(RedisClientError) {
                return Unchecked(.success(try await redis.subscribe(channel)))
            } catch {
                return Unchecked(.failure(error))
            }
        }
        switch outcome?.value {
        case .success(let subscription): return subscription
        case .failure(let error): throw .unavailable(error.message)
        case nil: throw .unavailable("SUBSCRIBE on \(redis.options.description) got no answer within \(redis.longestCommandMs) ms")
        }
    }

    /// Key ids revoked since `since` (what a gateway's revocation set starts from).
    public func loadRevokedKeys(since: Date) throws(StoreError) -> [[UInt8]] {
        let reply = try transport.sendBlocking(.keyed([Array("ZRANGEBYSCORE".utf8), revokedKeysKey,
                                                      Array(String(KeyRecord.seconds(since)).utf8), Array("+inf".utf8)]))
        guard case .array(let items) = reply else { throw reply.storeError(context: "ZRANGEBYSCORE of revoked keys") }
        return items.compactMap { item in
            guard case .string(let member) = item else { return nil }
            return Base64.decode(utf8: member)
        }
    }

    /// The Redis part of a token request, on routes that need one: `spend` marks the token's `jti` used
    /// (limited-use routes), `rateLimit` counts the request in the same per-key, per-route window as
    /// assertions. One script on the key's slot; a reused or rate-limited token changes nothing.
    public func useToken(keyId: [UInt8], tokenId: String, expiresAt: Int64, spend: Bool, rateLimit: RateLimit?, route: String,
                  now: Date = Date()) throws(StoreError) -> TokenUseOutcome {
        try transport.perform(useTokenOperation(keyId: keyId, tokenId: tokenId, expiresAt: expiresAt, spend: spend,
                                                rateLimit: rateLimit, route: route, now: now))
    }

    public func useToken(keyId: [UInt8], tokenId: String, expiresAt: Int64, spend: Bool, rateLimit: RateLimit?, route: String,
                  now: Date = Date()) async throws(StoreError) -> TokenUseOutcome {
        try await transport.perform(useTokenOperation(keyId: keyId, tokenId: tokenId, expiresAt: expiresAt, spend: spend,
                                                      rateLimit: rateLimit, route: route, now: now))
    }

    private func useTokenOperation(keyId: [UInt8], tokenId: String, expiresAt: Int64, spend: Bool, rateLimit: RateLimit?,
                                   route: String, now: Date) throws(StoreError) -> Prepared<TokenUseOutcome> {
        guard StoreKeys.isPlausible(keyId: keyId) else { throw .invalidArgument("key id must be 1-\(StoreKeys.maxKeyIdBytes) bytes") }
        let spentKey = Array("\(keys.prefix):{\(Base64.encodeURLSafe(keyId))}:jti:\(tokenId)".utf8)
        // The mark outlives the token by a minute, so a token accepted within the clock skew stays spent.
        let lifetimeMs = max(1000, (expiresAt - KeyRecord.seconds(now) + 60) * 1000)
        let arguments = [spend ? "1" : "0", String(lifetimeMs), String(rateLimit?.requests ?? 0),
                         String((rateLimit?.perSeconds ?? 0) * 1000)].map { Array($0.utf8) }
        return .send(.script(Self.useTokenScript, keys: [spentKey, keys.rate(keyId: keyId, route: route)], arguments: arguments),
                     Self.tokenUseOutcome)
    }

    private static func tokenUseOutcome(_ reply: RedisReply) throws(StoreError) -> TokenUseOutcome {
        guard case .array(let items) = reply, case .string(let status)? = items.first else {
            throw reply.storeError(context: "script \(Self.useTokenScript.name)")
        }
        switch String(decoding: status, as: UTF8.self) {
        case "accepted": return .accepted
        case "reused": return .reused
        case "rate_limited":
            guard items.count == 2, case .string(let left) = items[1], let milliseconds = Int(String(decoding: left, as: UTF8.self)) else {
                throw .unexpectedReply("script \(Self.useTokenScript.name) answered rate_limited without a time")
            }
            return .rateLimited(retryAfterMs: max(milliseconds, 0))
        case let other: throw .unexpectedReply("script \(Self.useTokenScript.name) answered status \(other)")
        }
    }

    /// KEYS[1] the spent-token mark, KEYS[2] the rate counter. ARGV[1] spend (1/0), ARGV[2] mark lifetime (ms),
    /// ARGV[3] rate limit (0 = none), ARGV[4] rate window (ms). Answers {'accepted'}, {'reused'} or
    /// {'rate_limited', ms left}; the rate is counted before the mark is set, like an assertion's.
    static let useTokenScript = LuaScript(name: "use_token", source: """
        if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return {'reused'} end
        local limit = tonumber(ARGV[3])
        if limit > 0 then
          local used = redis.call('INCR', KEYS[2])
          if redis.call('PTTL', KEYS[2]) < 0 then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
          if used > limit then return {'rate_limited', tostring(redis.call('PTTL', KEYS[2]))} end
        end
        if ARGV[1] == '1' then redis.call('SET', KEYS[1], '1', 'PX', ARGV[2]) end
        return {'accepted'}
        """)
}

/// How the Redis part of a token request ended.
public enum TokenUseOutcome: Equatable, Sendable {
    case accepted
    /// A limited-use route saw this token before (`token_reused`).
    case reused
    case rateLimited(retryAfterMs: Int)
}
