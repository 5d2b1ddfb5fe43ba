import EventLoop
import RedisClient
import CHiredis
#if canImport(Glibc)
import Glibc
#endif

/// One blocking connection to Redis through hiredis' sync API; the only place that touches hiredis.
/// Not thread-safe: `RedisPool` lends it to one thread at a time. Once hiredis flags an error on the
/// context (I/O, timeout, protocol) the connection is broken for good and the pool drops it.
public final class RedisConnection {
    private let context: UnsafeMutablePointer<redisContext>
    private let endpoint: RedisEndpoint

    /// hiredis sends with write(2): a server that closed the socket would raise SIGPIPE and kill the
    /// whole gateway, so the signal is ignored once per process and the write fails with EPIPE instead.
    private static let brokenPipeIgnored: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    /// Connects within `timeoutMs`, bounds every later command by `timeoutMs`, then AUTH and SELECT.
    public init(endpoint: RedisEndpoint, timeoutMs: Int) throws(StoreError) {
        context = try Self.connect(endpoint, timeoutMs: timeoutMs)
        self.endpoint = endpoint
        try logIn()
    }

    /// A hiredis context connected within `timeoutMs`, every later command bounded by it too (shared with
    /// `RedisSubscription`). Frees the context itself when it fails.
    static func connect(_ endpoint: RedisEndpoint, timeoutMs: Int) throws(StoreError) -> UnsafeMutablePointer<redisContext> {
        _ = brokenPipeIgnored
        let timeout = timeval(milliseconds: timeoutMs)
        let made: UnsafeMutablePointer<redisContext>?
        switch endpoint.address {
        case .tcp(let host, let port): made = redisConnectWithTimeout(host, Int32(port), timeout)
        case .unix(let path): made = redisConnectUnixWithTimeout(path, timeout)
        }
        guard let made else { throw .unavailable("cannot allocate a hiredis context") }
        guard made.pointee.err == 0, redisSetTimeout(made, timeout) == REDIS_OK else {
            let detail = errorText(of: made)
            redisFree(made)
            throw .unavailable("cannot connect to \(endpoint.redacted): \(detail)")
        }
        return made
    }

    deinit { redisFree(context) }

    /// hiredis flagged an error: this context must not be used again.
    public var isBroken: Bool { context.pointee.err != 0 }

    /// An idle connection has nothing to read; if its socket is readable, the server closed it (restart,
    /// idle timeout, CLIENT KILL) and the next command would fail. Checked before reuse, without a round trip.
    var closedWhileIdle: Bool {
        var descriptor = pollfd(fd: context.pointee.fd, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, 0) != 0
    }

    /// Sends one command, binary-safe (every argument goes with its length), and waits for its reply.
    /// Error replies come back as `.error`; only I/O failures and timeouts throw.
    public func command(_ arguments: [[UInt8]]) throws(StoreError) -> RedisReply {
        guard !isBroken else { throw .unavailable("connection to \(endpoint.redacted) is broken: \(errorText)") }
        guard !arguments.isEmpty else { throw .invalidArgument("a Redis command needs at least its name") }
        var buffer = [UInt8]()
        var offsets = [Int]()
        var lengths = [Int]()
        for argument in arguments {
            offsets.append(buffer.count)
            lengths.append(argument.count)
            buffer += argument
        }
        buffer.append(0)  // never empty, so every argument pointer points into real memory
        let raw: UnsafeMutableRawPointer? = buffer.withUnsafeBytes { bytes in
            var argv: [UnsafePointer<CChar>?] = offsets.map { offset in
                (bytes.baseAddress! + offset).assumingMemoryBound(to: CChar.self)
            }
            return redisCommandArgv(context, Int32(arguments.count), &argv, lengths)
        }
        guard let raw else { throw .unavailable("Redis at \(endpoint.redacted) did not answer: \(errorText)") }
        defer { freeReplyObject(raw) }
        return Self.reply(UnsafePointer(raw.assumingMemoryBound(to: redisReply.self)))
    }

    public func command(_ arguments: String...) throws(StoreError) -> RedisReply {
        try command(arguments.map { Array($0.utf8) })
    }

    private func logIn() throws(StoreError) {
        if let password = endpoint.password {
            let login = [endpoint.username, password].compactMap { $0 }
            try expectOK(command((["AUTH"] + login).map { Array($0.utf8) }), doing: "AUTH")
        }
        if endpoint.database != 0 {
            try expectOK(command("SELECT", String(endpoint.database)), doing: "SELECT \(endpoint.database)")
        }
    }

    /// A refused login or database is a deployment problem: the store is unavailable until it is fixed.
    private func expectOK(_ reply: RedisReply, doing step: String) throws(StoreError) {
        guard case .status("OK") = reply else {
            throw .unavailable("\(step) on \(endpoint.redacted) failed: \(reply.kind)")
        }
    }

    private var errorText: String { Self.errorText(of: context) }

    static func errorText(of context: UnsafeMutablePointer<redisContext>) -> String {
        withUnsafeBytes(of: context.pointee.errstr) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
    }

    private static func timeval(milliseconds: Int) -> timeval {
        Glibc.timeval(tv_sec: milliseconds / 1000, tv_usec: (milliseconds % 1000) * 1000)
    }

    private static func reply(_ pointer: UnsafePointer<redisReply>) -> RedisReply {
        let reply = pointer.pointee
        switch reply.type {
        case REDIS_REPLY_STRING: return .string(bytes(of: reply))
        case REDIS_REPLY_STATUS: return .status(String(decoding: bytes(of: reply), as: UTF8.self))
        case REDIS_REPLY_ERROR: return .error(String(decoding: bytes(of: reply), as: UTF8.self))
        case REDIS_REPLY_INTEGER: return .integer(Int64(reply.integer))
        case REDIS_REPLY_ARRAY:
            return .array((0..<reply.elements).map { index in
                reply.element[index].map { Self.reply(UnsafePointer($0)) } ?? .null
            })
        default: return .null
        }
    }

    private static func bytes(of reply: redisReply) -> [UInt8] {
        guard let text = reply.str else { return [] }
        return Array(UnsafeRawBufferPointer(start: text, count: reply.len))
    }
}
