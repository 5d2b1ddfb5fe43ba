import EventLoop
import RedisClient

/// A Lua script run with EVALSHA. Its SHA1 is learned from SCRIPT LOAD on first use; a server that has not
/// seen it (a restart, a failover, another Cluster node) answers NOSCRIPT, and then EVAL runs it and caches
/// it there. Every script touches keys of a single hash tag, so it stays valid on Redis Cluster.
final class LuaScript: Sendable {
    let name: String
    private let source: String
    private let sha = Locked<String?>(nil)

    init(name: String, source: String) {
        self.name = name
        self.source = source
    }

    /// Runs the script through `command` (which places every command on the keys' server); an error reply is
    /// thrown.
    func run(keys: [[UInt8]], arguments: [[UInt8]],
             command: (_ arguments: [[UInt8]]) async throws(StoreError) -> RedisReply) async throws(StoreError) -> RedisReply {
        let counted = [Array(String(keys.count).utf8)] + keys + arguments
        let digest = try await knownDigest(command)
        let reply = try await command([Array("EVALSHA".utf8), Array(digest.utf8)] + counted)
        if case .error(let message) = reply, message.hasPrefix("NOSCRIPT") {
            return try checked(await command([Array("EVAL".utf8), Array(source.utf8)] + counted))
        }
        return try checked(reply)
    }

    private func knownDigest(_ command: (_ arguments: [[UInt8]]) async throws(StoreError) -> RedisReply) async throws(StoreError) -> String {
        if let known = sha.withLock({ $0 }) { return known }
        let loaded = try await command(["SCRIPT", "LOAD", source].map { Array($0.utf8) })
        guard case .string(let digest) = loaded else { throw loaded.storeError(context: "SCRIPT LOAD of \(name)") }
        let text = String(decoding: digest, as: UTF8.self)
        sha.withLock { $0 = text }
        return text
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
