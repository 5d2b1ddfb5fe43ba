import EventLoop
/// `rate_limit:` on an assert route: at most `requests` accepted assertions per app key in each
/// `perSeconds`-long window (a fixed window that starts with the key's first request in it).
public struct RateLimit: Sendable, Equatable {
    public let requests: Int
    public let perSeconds: Int

    public init(requests: Int, perSeconds: Int) {
        self.requests = requests
        self.perSeconds = perSeconds
    }
}
