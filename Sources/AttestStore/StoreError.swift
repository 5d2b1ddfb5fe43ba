import EventLoop
/// Why the state store could not answer. The gateway turns `unavailable` and `unexpectedReply` into
/// 503s; `invalidArgument` is a configuration or programming mistake caught before Redis is asked.
public enum StoreError: Error, Equatable, Sendable {
    /// Redis could not be reached in time: connect failure, timeout, broken connection, no Cluster node for the slot.
    case unavailable(String)
    /// Redis answered, but not as the store expects (an error reply, a wrong type, a malformed record).
    case unexpectedReply(String)
    /// A bad Redis URL, key prefix, TTL, window or key id.
    case invalidArgument(String)

    public var reasonCode: String {
        switch self {
        case .unavailable: return "store_unavailable"
        case .unexpectedReply: return "store_error"
        case .invalidArgument: return "store_invalid_argument"
        }
    }

    public var message: String {
        switch self {
        case .unavailable(let detail), .unexpectedReply(let detail), .invalidArgument(let detail): return detail
        }
    }

    /// Error replies that mean "Redis is there but cannot serve right now" rather than "we asked wrongly".
    private static let transientErrorPrefixes = ["LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY"]

    /// Classifies an error reply from Redis.
    static func reply(_ message: String, context: String) -> StoreError {
        let transient = transientErrorPrefixes.contains { message.hasPrefix($0) }
        return transient ? .unavailable("\(context): \(message)") : .unexpectedReply("\(context): \(message)")
    }
}
