import Foundation

/// Retries of a remote service's 429, 5xx and transport failures (never of other 4xx), with exponential backoff
/// and jitter: Apple's and Google's server APIs.
/// Out-of-range values are clamped: at least one attempt, delays not negative, jitter within 0...1.
public struct RetryPolicy: Sendable, Equatable {
    /// Attempts in all, the first included.
    public let maxAttempts: Int
    /// The pause after the first failed attempt; each further pause doubles, up to `maxDelay`.
    public let initialDelay: TimeInterval
    public let maxDelay: TimeInterval
    /// The fraction of each pause drawn at random (0: exact pauses; 0.5: between half and all of it),
    /// so clients that failed together do not retry together.
    public let jitter: Double

    public init(maxAttempts: Int, initialDelay: TimeInterval, maxDelay: TimeInterval, jitter: Double) {
        self.maxAttempts = max(1, maxAttempts)
        self.initialDelay = max(0, initialDelay)
        self.maxDelay = max(self.initialDelay, maxDelay)
        self.jitter = min(1, max(0, jitter))
    }

    /// Three attempts, pauses of about 0.25 s and 0.5 s.
    public static let standard = RetryPolicy(maxAttempts: 3, initialDelay: 0.25, maxDelay: 2, jitter: 0.5)
    public static let never = RetryPolicy(maxAttempts: 1, initialDelay: 0, maxDelay: 0, jitter: 0)

    /// The pause after failed attempt number `attempt` (from 1); `random` is uniform in 0...1.
    public func delay(afterAttempt attempt: Int, random: Double) -> TimeInterval {
        let doublings = Double(min(max(attempt - 1, 0), 30))
        let base = min(maxDelay, initialDelay * pow(2, doublings))
        return base * (1 - jitter * min(1, max(0, random)))
    }
}
