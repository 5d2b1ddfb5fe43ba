import EventLoop
import Foundation
import RedisClient

/// A store operation prepared: answered without Redis, or one request whose reply `decode` reads.
struct Prepared<T> {
    let answer: T?
    let request: StoreRequest?
    let decode: (RedisReply) throws(StoreError) -> T

    static func answered(_ value: T) -> Prepared { Prepared(answer: value, request: nil, decode: { _ throws(StoreError) in value }) }

    static func send(_ request: StoreRequest, _ decode: @escaping (RedisReply) throws(StoreError) -> T) -> Prepared {
        Prepared(answer: nil, request: request, decode: decode)
    }
}

extension StoreTransport {
    func perform<T>(_ prepared: Prepared<T>) throws(StoreError) -> T {
        guard let request = prepared.request else { return prepared.answer! }
        return try prepared.decode(sendBlocking(request))
    }

    @inline(__always) nonisolated(nonsending)
    func perform<T>(_ prepared: Prepared<T>) async throws(StoreError) -> T {
        guard let request = prepared.request else { return prepared.answer! }
        return try prepared.decode(await send(request))
    }
}

/// One Redis request of the store: a plain command (with the key that places it on a Cluster slot) or a
/// call of one of its scripts (placed by its first key: every key of a script shares one slot).
enum StoreRequest {
    case command([[UInt8]], key: [UInt8]?)
    /// `call`: the number of keys, the keys and the arguments (`LuaScript.call`); `key`: any name of the
    /// keys' slot.
    case script(LuaScript, call: RedisArguments, key: [UInt8]?)

    static func script(_ script: LuaScript, keys: [[UInt8]], arguments: [[UInt8]]) -> StoreRequest {
        .script(script, call: LuaScript.call(keys: keys, arguments: arguments), key: keys.first)
    }

    /// A command on the key that is its first argument (SET key …, ZADD key …).
    static func keyed(_ arguments: [[UInt8]]) -> StoreRequest { .command(arguments, key: arguments.dropFirst().first) }
}

/// How the store reaches Redis: on an event loop through that loop's own connections (a request never
/// waits on a thread); from threads that may block (operator commands, the receipt refresher) by waiting
/// for the same path on the client's helper loop.
final class StoreTransport: Sendable {
    let redis: Redis

    init(redis: Redis) {
        self.redis = redis
    }

    /// Runs on the caller's executor, as do the steps below it: an assertion's commit takes no task switch
    /// of its own before its one wait for the reply.
    @inline(__always) nonisolated(nonsending)
    func send(_ request: StoreRequest) async throws(StoreError) -> RedisReply {
        switch request {
        case .command(let arguments, let key): return try await command(RedisCommand(arguments), key: key)
        case .script(let script, let call, let key): return try await run(script, call, key: key)
        }
    }

    /// EVALSHA (after SCRIPT LOAD on first use), and EVAL where the server answers NOSCRIPT.
    @inline(__always) nonisolated(nonsending)
    private func run(_ script: LuaScript, _ call: RedisArguments, key: [UInt8]?) async throws(StoreError) -> RedisReply {
        let start: RedisArguments
        if let known = script.start { start = known } else { start = try script.loaded(await command(script.loadCommand, key: key)) }
        let reply = try await command(RedisCommand(start, call), key: key)
        if case .error(let message) = reply, message.hasPrefix("NOSCRIPT") {
            return try script.checked(await command(script.evalCommand(call), key: key))
        }
        return try script.checked(reply)
    }

    func sendBlocking(_ request: StoreRequest) throws(StoreError) -> RedisReply {
        // A script may take three round trips (EVALSHA, NOSCRIPT, EVAL), each bounded by the client.
        let waitMs = 3 * redis.longestCommandMs
        let outcome = waitFor(timeoutMs: waitMs) { () async -> Unchecked<Result<RedisReply, StoreError>> in
            do throws(StoreError) {
                return Unchecked(.success(try await self.send(request)))
            } catch {
                return Unchecked(.failure(error))
            }
        }
        guard let outcome else { throw .unavailable("no answer from \(redis.options.description) within \(waitMs) ms") }
        return try outcome.value.get()
    }

    @inline(__always) nonisolated(nonsending)
    private func command(_ command: RedisCommand, key: [UInt8]?) async throws(StoreError) -> RedisReply {
        do {
            return try await redis.command(command, key: key)
        } catch {
            throw .unavailable(error.message)
        }
    }
}
