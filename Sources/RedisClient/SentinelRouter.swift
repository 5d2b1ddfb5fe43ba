import EventLoop

/// A primary that sentinels name, from one event loop. The primary is asked of the sentinels (in turn)
/// before every new connection to it — so a loop that was idle through a failover never reconnects to the
/// old primary, even once it is back — and again after a failure or a READONLY reply; ROLE is checked at
/// login. Asking again waits `resolvePauseMs` between attempts, so a dead primary the sentinels have not
/// replaced yet costs one question per pause, not one per request.
final class SentinelRouter: RedisRouting {
    static let resolvePauseMs: UInt64 = 200

    private let loop: EventLoop
    private let options: RedisOptions
    private let masterName: String
    private var sentinels: [LoopRedisNode]
    private var primary: LoopRedisNode?
    private var stale = true
    private var resolvedAtMs: UInt64 = 0
    private var resolveFailure: RedisClientError?
    private let resolving = SingleFlight()
    private let reporter: TopologyReporter

    init(loop: EventLoop, sentinels: [RedisAddress], masterName: String, options: RedisOptions, reporter: TopologyReporter) {
        self.loop = loop
        self.reporter = reporter
        self.options = options
        self.masterName = masterName
        // Sentinels take no database; their login (if any) is their own, not the data servers'.
        var sentinelOptions = options
        (sentinelOptions.username, sentinelOptions.password) = (options.sentinelUsername, options.sentinelPassword)
        (sentinelOptions.database, sentinelOptions.connectionsPerNode) = (0, 1)
        self.sentinels = sentinels.map { LoopRedisNode(loop: loop, address: $0, options: sentinelOptions) }
    }

    func command(_ arguments: [[UInt8]], key: [UInt8]?) async throws(RedisClientError) -> RedisReply {
        var node = try await current()
        var rerouted = false
        while true {
            do throws(RedisClientError) {
                let reply = try await node.command(arguments)
                if case .error(let message) = reply, message.hasPrefix("READONLY") || message.hasPrefix("MASTERDOWN") {
                    stale = true
                    throw .unavailable("Redis at \(node.address) is no longer the primary of \(masterName): \(message)")
                }
                return reply
            } catch {
                stale = true
                // Not sent: if the sentinels name another primary by now, it goes there (once).
                if case .unreachable = error, !rerouted, let next = try? await current(), next !== node {
                    (node, rerouted) = (next, true)
                    continue
                }
                throw error
            }
        }
    }

    /// Opened rarely (at start, after it broke): the sentinels are asked first.
    func subscriptionAddress() async throws(RedisClientError) -> RedisAddress {
        stale = true
        return try await current().address
    }

    private func current() async throws(RedisClientError) -> LoopRedisNode {
        let reconnecting = !(primary?.isConnected ?? false)
        if stale || reconnecting, primary == nil || loop.nowMs >= resolvedAtMs + Self.resolvePauseMs {
            await resolving.run { await resolve() }
        }
        guard let primary else {
            throw resolveFailure ?? .unavailable("no sentinel named the primary of \(masterName)")
        }
        return primary
    }

    /// Asks each sentinel in turn; the first that names the primary is asked first next time.
    private func resolve() async {
        resolvedAtMs = loop.nowMs
        var failures: [String] = []
        for (index, sentinel) in sentinels.enumerated() {
            do throws(RedisClientError) {
                let reply = try await sentinel.command(["SENTINEL", "get-master-addr-by-name", masterName].map { Array($0.utf8) })
                guard case .array(let fields) = reply, fields.count == 2, case .string(let host) = fields[0],
                      case .string(let portText) = fields[1], let port = Int(String(decoding: portText, as: UTF8.self)) else {
                    // An error reply says why (NOAUTH: the sentinel wants `sentinel_auth`).
                    if case .error(let message) = reply { failures.append("\(sentinel.address) answered \(message)") } else {
                        failures.append("\(sentinel.address) answered \(reply.kind)")
                    }
                    continue
                }
                use(RedisAddress(host: String(decoding: host, as: UTF8.self), port: port))
                sentinels.swapAt(0, index)
                return
            } catch {
                failures.append(error.message)
            }
        }
        resolveFailure = .unavailable("no sentinel named the primary of \(masterName) (\(failures.joined(separator: "; ")))")
    }

    private func use(_ address: RedisAddress) {
        stale = false
        resolveFailure = nil
        reporter.primary(address, masterName: masterName)
        if primary?.address == address { return }
        primary?.close()
        primary = LoopRedisNode(loop: loop, address: address, options: options, expect: .primary)
    }

    func close() {
        primary?.close()
        sentinels.forEach { $0.close() }
    }
}
