import EventLoop
import RedisClient

/// A Lua script run with EVALSHA. Its SHA1 is learned from SCRIPT LOAD on first use; when Redis has
/// forgotten it (restart, failover, SCRIPT FLUSH) the NOSCRIPT error triggers one reload and a retry.
/// Every script touches keys of a single hash tag, so it stays valid on Redis Cluster.
final class LuaScript: Sendable {
    let name: String
    private let source: String
    private let sha = Locked<String?>(nil)

    init(name: String, source: String) {
        self.name = name
        self.source = source
    }

    /// Runs the script; an error reply (other than a NOSCRIPT that a reload cures) is thrown.
    func run(on connection: RedisConnection, keys: [[UInt8]], arguments: [[UInt8]]) throws(StoreError) -> RedisReply {
        if let known = sha.withLock({ $0 }) {
            let reply = try evaluate(on: connection, sha: known, keys: keys, arguments: arguments)
            guard case .error(let message) = reply, message.hasPrefix("NOSCRIPT") else { return try checked(reply) }
        }
        return try checked(evaluate(on: connection, sha: load(on: connection), keys: keys, arguments: arguments))
    }

    /// The same over any transport that runs one command at a time (an event loop's Redis client).
    func run(keys: [[UInt8]], arguments: [[UInt8]],
             command: (_ arguments: [[UInt8]]) async throws(StoreError) -> RedisReply) async throws(StoreError) -> RedisReply {
        if let known = sha.withLock({ $0 }) {
            let reply = try await command(["EVALSHA", known, String(keys.count)].map { Array($0.utf8) } + keys + arguments)
            guard case .error(let message) = reply, message.hasPrefix("NOSCRIPT") else { return try checked(reply) }
        }
        let loaded = try await command(["SCRIPT", "LOAD", source].map { Array($0.utf8) })
        guard case .string(let digest) = loaded else { throw loaded.storeError(context: "SCRIPT LOAD of \(name)") }
        let sha = String(decoding: digest, as: UTF8.self)
        self.sha.withLock { $0 = sha }
        return try checked(await command(["EVALSHA", sha, String(keys.count)].map { Array($0.utf8) } + keys + arguments))
    }

    private func evaluate(on connection: RedisConnection, sha: String, keys: [[UInt8]],
                          arguments: [[UInt8]]) throws(StoreError) -> RedisReply {
        let head = ["EVALSHA", sha, String(keys.count)].map { Array($0.utf8) }
        return try connection.command(head + keys + arguments)
    }

    private func load(on connection: RedisConnection) throws(StoreError) -> String {
        let reply = try connection.command("SCRIPT", "LOAD", source)
        guard case .string(let digest) = reply else {
            throw reply.storeError(context: "SCRIPT LOAD of \(name)")
        }
        let loaded = String(decoding: digest, as: UTF8.self)
        sha.withLock { $0 = loaded }
        return loaded
    }

    private func checked(_ reply: RedisReply) throws(StoreError) -> RedisReply {
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
