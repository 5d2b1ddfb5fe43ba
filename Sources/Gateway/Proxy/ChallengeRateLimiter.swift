import RedisClient
import EventLoop
import AttestStore
import Foundation

/// `app_attest.challenge_rate_limit`: at most `requests` challenges per client address in each fixed
/// `per_seconds` window, counted in this process (nothing in Redis: issuing a challenge stays free of
/// writes). Windows are aligned on the clock, so one window's counts are dropped whole when the next
/// begins; at most `maxAddresses` addresses are tracked per window, and addresses beyond that are not
/// limited (a flood from that many addresses is not something a per-address limit can stop).
final class ChallengeRateLimiter: Sendable {
    static let maxAddresses = 100_000

    let limit: RateLimit
    private let state = Locked(Window())

    private struct Window {
        var index: Int64 = -1
        var counts: [String: Int] = [:]
    }

    init(limit: RateLimit) {
        self.limit = limit
    }

    /// Counts one challenge for `address`; answers the seconds until it may ask again when over the limit.
    func admit(_ address: String, now: Date = Date()) -> Int? {
        let milliseconds = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        let windowMs = Int64(limit.perSeconds) * 1000
        let index = milliseconds / windowMs
        let used = state.withLock { window -> Int in
            if window.index != index {
                window.index = index
                window.counts.removeAll(keepingCapacity: true)
            }
            guard let used = window.counts[address] else {
                guard window.counts.count < Self.maxAddresses else { return 0 }
                window.counts[address] = 1
                return 1
            }
            window.counts[address] = used + 1
            return used + 1
        }
        guard used > limit.requests else { return nil }
        let leftMs = (index + 1) * windowMs - milliseconds
        return Int(max(1, (leftMs + 999) / 1000))
    }
}
