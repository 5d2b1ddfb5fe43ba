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

/// One Redis request of the store: a plain command or one of its scripts.
enum StoreRequest {
    case command([[UInt8]])
    case script(LuaScript, keys: [[UInt8]], arguments: [[UInt8]])
}

/// How the store reaches Redis. From an event loop (the request path) it uses that loop's own pipelined
/// connections, so a request never waits on a thread; anywhere else (CLI, receipt refresher, tests) the
/// blocking pool.
final class StoreTransport: @unchecked Sendable {
    let pool: RedisPool
    private let login: RedisLogin?
    private let lock = PthreadLock()
    private var clients: [ObjectIdentifier: LoopRedisClient] = [:]

    init(pool: RedisPool) {
        self.pool = pool
        if case .tcp(let host, let port) = pool.endpoint.address {
            login = RedisLogin(host: host, port: port, username: pool.endpoint.username, password: pool.endpoint.password,
                               database: pool.endpoint.database)
        } else {
            login = nil  // unix sockets: the blocking pool everywhere
        }
    }

    func sendBlocking(_ request: StoreRequest) throws(StoreError) -> RedisReply {
        try pool.with { connection throws(StoreError) in
            switch request {
            case .command(let arguments): return try connection.command(arguments)
            case .script(let script, let keys, let arguments): return try script.run(on: connection, keys: keys, arguments: arguments)
            }
        }
    }

    func send(_ request: StoreRequest) async throws(StoreError) -> RedisReply {
        guard let client = loopClient() else { return try sendBlocking(request) }
        switch request {
        case .command(let arguments): return try await Self.command(arguments, on: client)
        case .script(let script, let keys, let arguments):
            return try await script.run(keys: keys, arguments: arguments) { (command) async throws(StoreError) -> RedisReply in
                try await Self.command(command, on: client)
            }
        }
    }

    private static func command(_ arguments: [[UInt8]], on client: LoopRedisClient) async throws(StoreError) -> RedisReply {
        do {
            return try await client.command(arguments)
        } catch {
            switch error {
            case .unavailable(let detail), .timeout(let detail): throw .unavailable(detail)
            }
        }
    }

    /// This loop's client, made on first use (on the loop's own thread, as its handles require).
    private func loopClient() -> LoopRedisClient? {
        guard let login, let loop = EventLoop.current else { return nil }
        return lock.withLock {
            if let client = clients[ObjectIdentifier(loop)] { return client }
            // A few pipelined connections per loop carry what the pool's many blocking ones did.
            let client = LoopRedisClient(loop: loop, login: login, connections: min(4, max(1, pool.size / 8)), timeoutMs: pool.timeoutMs)
            clients[ObjectIdentifier(loop)] = client
            return client
        }
    }
}
