/// One reply of the Redis protocol (RESP2).
public enum RedisReply: Equatable, Sendable {
    case string([UInt8])
    case status(String)
    case integer(Int64)
    case array([RedisReply])
    case null
    case error(String)
}

extension RedisReply {
    /// A short form for error messages: never the payload, which may be a receipt or a key.
    public var kind: String {
        switch self {
        case .string(let bytes): return "bulk string of \(bytes.count) bytes"
        case .status(let text): return "status \(text)"
        case .integer(let value): return "integer \(value)"
        case .array(let items): return "array of \(items.count)"
        case .null: return "nil"
        case .error(let message): return "error \(message)"
        }
    }
}
