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

    func perform<T>(_ prepared: Prepared<T>) async throws(StoreError) -> T {
        guard let request = prepared.request else { return prepared.answer! }
        return try prepared.decode(await send(request))
    }
}

/// One Redis request of the store: a plain command (with the key that places it on a Cluster slot) or one
/// of its scripts (placed by its first key: every key of a script shares one slot).
enum StoreRequest {
    case command([[UInt8]], key: [UInt8]?)
    case script(LuaScript, keys: [[UInt8]], arguments: [[UInt8]])

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

    func send(_ request: StoreRequest) async throws(StoreError) -> RedisReply {
        switch request {
        case .command(let arguments, let key): return try await command(arguments, key: key)
        case .script(let script, let keys, let arguments):
            let key = keys.first
            return try await script.run(keys: keys, arguments: arguments) { (command) async throws(StoreError) -> RedisReply in
                try await self.command(command, key: key)
            }
        }
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

    private func command(_ arguments: [[UInt8]], key: [UInt8]?) async throws(StoreError) -> RedisReply {
        do {
            return try await redis.command(arguments, key: key)
        } catch {
            throw .unavailable(error.message)
        }
    }
}
