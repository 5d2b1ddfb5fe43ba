import EventLoop
import RedisClient

/// A Lua script run with EVALSHA. Its SHA1 is learned from SCRIPT LOAD on first use; a server that has not
/// seen it (a restart, a failover, another Cluster node) answers NOSCRIPT, and then EVAL runs it and caches
/// it there. Every script touches keys of a single hash tag, so it stays valid on Redis Cluster.
///
/// A call's arguments are the number of keys, the keys, then the script's own arguments, in RESP
/// (`RedisArguments`); the script puts EVALSHA and the SHA1 (or EVAL and the source) in front.
final class LuaScript: Sendable {
    let name: String
    private let source: [UInt8]
    /// EVALSHA and the SHA1, as a command starts, once SCRIPT LOAD has answered the SHA1.
    private let evalsha = Locked<RedisArguments?>(nil)
    /// EVAL and the source, for a server that answers NOSCRIPT.
    private let eval: RedisArguments

    init(name: String, source: String) {
        self.name = name
        self.source = Array(source.utf8)
        var eval = RedisArguments(capacity: self.source.count + 32)
        eval.append(Array("EVAL".utf8))
        eval.append(self.source)
        self.eval = eval
    }

    /// The arguments of a call with `keys` and `arguments`.
    static func call(keys: [[UInt8]], arguments: [[UInt8]]) -> RedisArguments {
        var call = RedisArguments(capacity: 16 + keys.reduce(0) { $0 + $1.count + 16 } + arguments.reduce(0) { $0 + $1.count + 16 })
        call.append(keys.count)
        for key in keys { call.append(key) }
        for argument in arguments { call.append(argument) }
        return call
    }

    /// EVALSHA and the SHA1 as a call starts; nil until SCRIPT LOAD answered (`loaded`).
    var start: RedisArguments? { evalsha.withLock { $0 } }

    /// The call's command for a server that answered NOSCRIPT: EVAL and the source (it caches the script).
    func evalCommand(_ call: RedisArguments) -> RedisCommand { RedisCommand(eval, call) }

    var loadCommand: RedisCommand { RedisCommand([Array("SCRIPT".utf8), Array("LOAD".utf8), source]) }

    /// What SCRIPT LOAD answered: the start of every call from now on.
    func loaded(_ reply: RedisReply) throws(StoreError) -> RedisArguments {
        guard case .string(let digest) = reply else { throw reply.storeError(context: "SCRIPT LOAD of \(name)") }
        var start = RedisArguments(capacity: 64)
        start.append(Array("EVALSHA".utf8))
        start.append(digest)
        evalsha.withLock { $0 = start }
        return start
    }

    /// The reply, unless it is an error.
    func checked(_ reply: RedisReply) throws(StoreError) -> RedisReply {
        if case .error = reply { throw reply.storeError(context: "script \(name)") }
        return reply
    }
}

extension RedisReply {
    /// The error to throw for a reply the caller cannot use.
    func storeError(context: String) -> StoreError {
        if case .error(let message) = self { return StoreError.reply(message, context: context) }
        return .unexpectedReply("\(context) answered \(kind)")
    }
}
