import EventLoop
import RedisClient

/// A Lua script run with EVALSHA. Its SHA1 is learned from SCRIPT LOAD on first use; a server that has not
/// seen it (a restart, a failover, another Cluster node) answers NOSCRIPT, and then EVAL runs it and caches
/// it there. Every script touches keys of a single hash tag, so it stays valid on Redis Cluster.
final class LuaScript: Sendable {
    let name: String
    private let source: [UInt8]
    /// The SHA1 as EVALSHA takes it, once SCRIPT LOAD has answered it.
    private let sha = Locked<[UInt8]?>(nil)
    private static let evalsha = Array("EVALSHA".utf8)
    private static let eval = Array("EVAL".utf8)

    init(name: String, source: String) {
        self.name = name
        self.source = Array(source.utf8)
    }

    /// Runs the script through `command` (which places every command on the keys' server); an error reply is
    /// thrown.
    func run(keys: [[UInt8]], arguments: [[UInt8]],
             command: (_ arguments: [[UInt8]]) async throws(StoreError) -> RedisReply) async throws(StoreError) -> RedisReply {
        // EVALSHA sha numkeys key… arg…, in one array sized once.
        let digest: [UInt8]
        if let known = sha.withLock({ $0 }) { digest = known } else { digest = try await load(command) }
        var words = [Self.evalsha, digest]
        words.reserveCapacity(3 + keys.count + arguments.count)
        words.append(Array(String(keys.count).utf8))
        words += keys
        words += arguments
        let reply = try await command(words)
        if case .error(let message) = reply, message.hasPrefix("NOSCRIPT") {
            words[0] = Self.eval
            words[1] = source
            return try checked(await command(words))
        }
        return try checked(reply)
    }

    /// SCRIPT LOAD, on first use (the known SHA1 is read without an async call of its own).
    private func load(_ command: (_ arguments: [[UInt8]]) async throws(StoreError) -> RedisReply) async throws(StoreError) -> [UInt8] {
        let loaded = try await command([Array("SCRIPT".utf8), Array("LOAD".utf8), source])
        guard case .string(let digest) = loaded else { throw loaded.storeError(context: "SCRIPT LOAD of \(name)") }
        sha.withLock { $0 = digest }
        return digest
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
