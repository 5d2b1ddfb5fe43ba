import EventLoop
/// How a registration ended.
public enum RegisterOutcome: Equatable, Sendable {
    case created
    /// The key id already has a record (in any environment): a key is attested once
    /// (reason code `key_already_registered`).
    case alreadyRegistered
}

/// Why an assertion was refused by the store; the raw value is the reason code.
public enum CommitRejection: String, Error, Equatable, Sendable {
    case keyUnknown = "key_unknown"
    case keyRevoked = "key_revoked"
    /// The challenge was used before (by this key, or, if it was issued without a key id, by any key).
    case challengeReused = "challenge_reused"
    /// Not above the highest accepted counter, and not an unused counter inside the window.
    case counterNotIncreasing = "counter_not_increasing"

    public var reasonCode: String { rawValue }
}

/// How an assertion commit ended.
public enum CommitOutcome: Equatable, Sendable {
    /// Recorded; `previousCounter` is the highest counter accepted before this one; `riskMetric` is the
    /// receipt risk metric last stored for the key (nil until a receipt refresh brought one).
    case accepted(previousCounter: UInt32, riskMetric: Int? = nil)
    case rejected(CommitRejection)
    /// Valid, but the key used up its `rate_limit` window; the next one starts in `retryAfterMs`.
    /// Nothing was recorded but the challenge, which is spent like on any other presentation.
    case rateLimited(retryAfterMs: Int)
}
