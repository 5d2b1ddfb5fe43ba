import EventLoop
/// The store's Lua scripts. Each runs atomically on one hash tag (see `StoreKeys`; the one exception is
/// the record of a spent challenge issued without a key id, see `commitAssertion`); each either makes all
/// of its changes or none, except that a challenge presented by a live key is always spent.
struct StoreScripts: Sendable {
    /// Records a spent challenge for the rest of its lifetime; answers 1 the first time, 0 when it was spent
    /// already. KEYS[1] the spent-challenge record, ARGV[1] its TTL (ms).
    let spendChallenge = LuaScript(name: "spend_challenge", source: """
        if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return 1 end
        return 0
        """)

    /// The challenge HMAC secret shared by every gateway on this Redis: ARGV[1] becomes it unless one is
    /// there already. KEYS[1] the secret. Answers the secret in force.
    let challengeSecret = LuaScript(name: "challenge_secret", source: """
        redis.call('SET', KEYS[1], ARGV[1], 'NX')
        return redis.call('GET', KEYS[1])
        """)

    /// Creates a key record unless the key id is registered already, in any environment (answers 0).
    /// KEYS[1] the record, KEYS[2] its counter window (cleared), KEYS[3...] the key id's other records.
    /// ARGV: the record's field/value pairs.
    let register = LuaScript(name: "register_key", source: """
        for i = 1, #KEYS do
          if i ~= 2 and redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
        end
        redis.call('DEL', KEYS[2])
        redis.call('HSET', KEYS[1], unpack(ARGV))
        return 1
        """)

    /// Accepts one assertion or changes nothing (but the challenge). Checks in order: key known, not
    /// revoked, challenge not spent before (then it is spent, whatever follows), counter new, rate limit.
    /// Counter rule: above the highest accepted; or, with
    /// a window N > 0, one of the N counters below the highest, above `window_floor`, and not accepted
    /// before (requests that overtook each other). A window-0 commit does not track which counters below
    /// the highest were used, so it raises `window_floor` to the new highest: nothing at or below it is
    /// ever accepted again, whatever window a later route (or a reloaded config) uses. The rate counter
    /// counts assertions that passed every other check, refused ones included (a fixed window).
    /// KEYS[1] record, KEYS[2] window, KEYS[3] rate counter, KEYS[4] the spent-challenge record (absent
    /// when the route binds no challenge): in the key's slot for a challenge issued for this key, under the
    /// challenge's own tag otherwise (one challenge, one use, whichever key presents it; that key is outside
    /// the record's slot, which plain Redis allows and Cluster would not). ARGV[1] counter, ARGV[2] window N,
    /// ARGV[3] now (Unix seconds), ARGV[4] rate limit (0 = none), ARGV[5] rate window (ms), ARGV[6] the
    /// challenge's remaining lifetime (ms): how long its spent record is kept.
    /// Answers {'accepted', previous highest, risk metric or ''}, {'rate_limited', ms left} or {reason code}.
    let commitAssertion = LuaScript(name: "commit_assertion", source: """
        local record = redis.call('HMGET', KEYS[1], 'counter', 'revoked', 'window_floor', 'risk_metric')
        if not record[1] then return {'key_unknown'} end
        if record[2] == '1' then return {'key_revoked'} end
        if KEYS[4] and not redis.call('SET', KEYS[4], '1', 'NX', 'PX', ARGV[6]) then return {'challenge_reused'} end
        local highest = tonumber(record[1])
        local floor = tonumber(record[3] or '0')
        local counter = tonumber(ARGV[1])
        local window = tonumber(ARGV[2])
        local ahead = counter > highest
        if not ahead and not (window > 0 and counter >= highest - window and counter > floor and counter < highest
            and not redis.call('ZSCORE', KEYS[2], ARGV[1])) then
          return {'counter_not_increasing'}
        end
        local limit = tonumber(ARGV[4])
        if limit > 0 then
          local used = redis.call('INCR', KEYS[3])
          if redis.call('PTTL', KEYS[3]) < 0 then redis.call('PEXPIRE', KEYS[3], ARGV[5]) end
          if used > limit then return {'rate_limited', tostring(redis.call('PTTL', KEYS[3]))} end
        end
        if ahead then
          if window > 0 then
            redis.call('ZADD', KEYS[2], highest, record[1])
            redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (counter - window))
            redis.call('HSET', KEYS[1], 'counter', ARGV[1], 'last_used_at', ARGV[3])
          else
            redis.call('DEL', KEYS[2])
            redis.call('HSET', KEYS[1], 'counter', ARGV[1], 'last_used_at', ARGV[3], 'window_floor', ARGV[1])
          end
        else
          redis.call('ZADD', KEYS[2], counter, ARGV[1])
          redis.call('HSET', KEYS[1], 'last_used_at', ARGV[3])
        end
        return {'accepted', record[1], record[4] or ''}
        """)

    /// The first existing record among KEYS (one key id, one record per environment) as HGETALL, or nil.
    let loadKey = LuaScript(name: "load_key", source: """
        for i = 1, #KEYS do
          local fields = redis.call('HGETALL', KEYS[i])
          if #fields > 0 then return fields end
        end
        return false
        """)

    /// What verifying an assertion needs from the first existing record among KEYS: public key, app id
    /// and environment (HMGET order), or nil. A cache miss no longer copies the receipt (kilobytes).
    let loadPublicKey = LuaScript(name: "load_public_key", source: """
        for i = 1, #KEYS do
          local fields = redis.call('HMGET', KEYS[i], 'public_key', 'app_id', 'environment')
          if fields[1] then return fields end
        end
        return false
        """)

    /// Marks the existing records among KEYS revoked with reason ARGV[1]; answers how many there were.
    let revoke = LuaScript(name: "revoke_key", source: """
        local revoked = 0
        for i = 1, #KEYS do
          if redis.call('EXISTS', KEYS[i]) == 1 then
            redis.call('HSET', KEYS[i], 'revoked', '1', 'revoked_reason', ARGV[1])
            revoked = revoked + 1
          end
        end
        return revoked
        """)

    /// Stores a refreshed receipt and its risk metric on an existing record. KEYS[1] record.
    /// ARGV[1] receipt, ARGV[2] risk metric ('' = none in this receipt), ARGV[3] now. Answers 1, or 0 when
    /// the key is gone (then nothing is written).
    let storeReceipt = LuaScript(name: "store_receipt", source: """
        if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
        redis.call('HSET', KEYS[1], 'receipt', ARGV[1], 'receipt_refreshed_at', ARGV[3])
        if ARGV[2] == '' then
          redis.call('HDEL', KEYS[1], 'risk_metric')
        else
          redis.call('HSET', KEYS[1], 'risk_metric', ARGV[2])
        end
        return 1
        """)

    /// Takes one due entry of the receipt-refresh schedule for this gateway: moves it to ARGV[3] (a lease,
    /// so another gateway does not refresh the same key meanwhile) if it is due at ARGV[2]. KEYS[1] the
    /// schedule, ARGV[1] member. Answers 1 when this caller got it.
    let claimReceiptRefresh = LuaScript(name: "claim_receipt_refresh", source: """
        local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
        if not due or tonumber(due) > tonumber(ARGV[2]) then return 0 end
        redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
        return 1
        """)
}
