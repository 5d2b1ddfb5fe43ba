import Foundation

/// Exponential back-off with jitter for what a later attempt can fix: Apple's attestation server being
/// unavailable, and the gateway's own `503` (its Redis or Apple unreachable).
public struct Backoff: Sendable, Equatable {
    /// Attempts in all, the first one included.
    public var maxAttempts: Int
    /// The pause after the first failure; each later pause doubles, up to `maxDelay`.
    public var initialDelay: TimeInterval
    public var maxDelay: TimeInterval

    public init(maxAttempts: Int = 4, initialDelay: TimeInterval = 0.5, maxDelay: TimeInterval = 8) {
        self.maxAttempts = max(1, maxAttempts)
        self.initialDelay = initialDelay
        self.maxDelay = maxDelay
    }

    /// The pause before attempt `attempt + 1` (attempt counts from 1): between half and all of the nominal
    /// delay, so many devices failing together do not come back together.
    func delay(after attempt: Int) -> TimeInterval {
        let nominal = min(maxDelay, initialDelay * pow(2, Double(attempt - 1)))
        return nominal * Double.random(in: 0.5...1)
    }

    func sleep(after attempt: Int) async throws {
        try await Task.sleep(nanoseconds: UInt64(delay(after: attempt) * 1e9))
    }
}
