import EventLoop
import RedisClient
import CHiredis
#if canImport(Glibc)
import Glibc
#endif

/// One Redis connection in subscribe mode (pub/sub), for one thread: connects, logs in, subscribes to a
/// channel, then hands out what the server pushes. Its own hiredis context rather than a pooled
/// `RedisConnection`: a subscribed connection can do nothing else, and waiting for a push must not break
/// the connection when nothing comes (hiredis' blocking read flags a timeout as a fatal error, so this type
/// polls the socket itself and only reads what is there).
public final class RedisSubscription {
    public enum Push: Equatable {
        /// A message published on the channel.
        case message([UInt8])
        /// The answer to `ping()`: every message published before the ping has been delivered.
        case pong
        /// Anything else (the subscribe confirmation).
        case other
    }

    private let context: UnsafeMutablePointer<redisContext>
    private let endpoint: RedisEndpoint
    private let timeoutMs: Int

    /// Connects within `timeoutMs`, logs in, subscribes and waits (at most `timeoutMs`) for the confirmation.
    public init(endpoint: RedisEndpoint, timeoutMs: Int, channel: [UInt8]) throws(StoreError) {
        context = try RedisConnection.connect(endpoint, timeoutMs: timeoutMs)
        self.endpoint = endpoint
        self.timeoutMs = timeoutMs
        if let password = endpoint.password {
            try send([endpoint.username, password].compactMap { $0 }.reduce(into: [Array("AUTH".utf8)]) { $0.append(Array($1.utf8)) })
            guard try reply(waitingMs: timeoutMs) == .status("OK") else { throw .unavailable("AUTH on \(endpoint.redacted) failed") }
        }
        try send([Array("SUBSCRIBE".utf8), channel])
        guard case .array(let items)? = try reply(waitingMs: timeoutMs), items.first == .string(Array("subscribe".utf8)) else {
            throw .unavailable("SUBSCRIBE on \(endpoint.redacted) was not confirmed within \(timeoutMs) ms")
        }
    }

    deinit { redisFree(context) }

    /// Sends PING; its `.pong` comes back in order with the messages.
    public func ping() throws(StoreError) {
        try send([Array("PING".utf8)])
    }

    /// The next push, waiting at most `waitingMs`; nil when nothing came. Throws once the connection is gone.
    public func next(waitingMs: Int) throws(StoreError) -> Push? {
        guard let reply = try reply(waitingMs: waitingMs) else { return nil }
        guard case .array(let items) = reply, case .string(let kind)? = items.first else { return .other }
        switch String(decoding: kind, as: UTF8.self) {
        case "message" where items.count == 3:
            guard case .string(let payload) = items[2] else { return .other }
            return .message(payload)
        case "pong": return .pong
        default: return .other
        }
    }

    private func send(_ arguments: [[UInt8]]) throws(StoreError) {
        var buffer = [UInt8]()
        var offsets = [Int]()
        let lengths = arguments.map(\.count)
        for argument in arguments {
            offsets.append(buffer.count)
            buffer += argument
        }
        buffer.append(0)
        let appended = buffer.withUnsafeBytes { bytes in
            var argv: [UnsafePointer<CChar>?] = offsets.map { (bytes.baseAddress! + $0).assumingMemoryBound(to: CChar.self) }
            return redisAppendCommandArgv(context, Int32(arguments.count), &argv, lengths)
        }
        guard appended == REDIS_OK else { throw .unavailable("cannot queue a command for \(endpoint.redacted): \(errorText)") }
        var done: Int32 = 0
        while done == 0 {
            guard redisBufferWrite(context, &done) == REDIS_OK else { throw .unavailable("lost \(endpoint.redacted): \(errorText)") }
        }
    }

    /// A reply already buffered, or one read after the socket became readable within `waitingMs`.
    private func reply(waitingMs: Int) throws(StoreError) -> RedisReply? {
        if let buffered = try buffered() { return buffered }
        var descriptor = pollfd(fd: context.pointee.fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, Int32(waitingMs))
        if ready == 0 || (ready < 0 && errno == EINTR) { return nil }
        guard ready > 0, redisBufferRead(context) == REDIS_OK else { throw .unavailable("lost \(endpoint.redacted): \(errorText)") }
        return try buffered()
    }

    private func buffered() throws(StoreError) -> RedisReply? {
        var raw: UnsafeMutableRawPointer?
        guard redisGetReplyFromReader(context, &raw) == REDIS_OK else { throw .unavailable("bad reply from \(endpoint.redacted): \(errorText)") }
        guard let raw else { return nil }
        defer { freeReplyObject(raw) }
        return Self.convert(raw.assumingMemoryBound(to: redisReply.self).pointee)
    }

    private var errorText: String { RedisConnection.errorText(of: context) }

    private static func convert(_ reply: redisReply) -> RedisReply {
        func bytes() -> [UInt8] { reply.str.map { Array(UnsafeRawBufferPointer(start: $0, count: reply.len)) } ?? [] }
        switch reply.type {
        case REDIS_REPLY_STRING: return .string(bytes())
        case REDIS_REPLY_STATUS: return .status(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_ERROR: return .error(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_INTEGER: return .integer(Int64(reply.integer))
        case REDIS_REPLY_ARRAY:
            return .array((0..<reply.elements).map { index in reply.element[index].map { convert($0.pointee) } ?? .null })
        default: return .null
        }
    }
}
