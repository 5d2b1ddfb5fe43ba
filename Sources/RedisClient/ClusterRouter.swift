import EventLoop

/// Redis Cluster from one event loop: each command goes to the primary of its key's slot, per the slot map
/// discovered with CLUSTER SLOTS. `MOVED` updates the map (and refreshes it in the background), `ASK` sends
/// ASKING and the command to the importing node, `TRYAGAIN` (a multi-key command while its slot migrates)
/// waits a little and asks again, within `timeoutMs`. A node that cannot be
/// reached fails its commands (`unavailable`: the caller answers 503) and has the map refreshed, so a
/// promoted replica is found as soon as the Cluster reports it.
final class ClusterRouter: RedisRouting {
    static let maxRedirects = 5
    static let refreshPauseMs: UInt64 = 100

    private let loop: EventLoop
    private let options: RedisOptions
    private let seeds: [RedisAddress]
    /// Each slot's primary; empty until discovered.
    private var owners = SlotOwners()
    private var nodes: [RedisAddress: LoopRedisNode] = [:]
    private let refreshing = SingleFlight()
    private var refreshedAtMs: UInt64 = 0
    private var refreshFailure: RedisClientError?
    private var subscriptionTurn = 0
    private let reporter: TopologyReporter

    init(loop: EventLoop, seeds: [RedisAddress], options: RedisOptions, reporter: TopologyReporter) {
        self.loop = loop
        self.seeds = seeds
        self.options = options
        self.reporter = reporter
    }

    func send(_ command: RedisCommand, key: [UInt8]?, reply: @escaping LoopRedisConnection.Reply) {
        routeInTask(on: loop, reply: reply) { [self] () async throws(RedisClientError) -> RedisReply in try await self.command(command, key: key) }
    }

    private func command(_ command: RedisCommand, key: [UInt8]?) async throws(RedisClientError) -> RedisReply {
        if owners.isEmpty { try await discover() }
        let slot = key.map(ClusterSlots.slot(of:))
        var target = try owner(of: slot)
        var asking = false
        var (moves, retries, rerouted) = (0, 0, false)
        let started = loop.nowMs
        while true {
            let reply: RedisReply
            do {
                reply = try await node(target).command(command, asking: asking)
            } catch {
                // Not sent: after a failover the refreshed map may name the slot's new primary; try it once.
                if case .unreachable = error, !rerouted, !asking {
                    rerouted = true
                    await refreshIfDue()
                    if let moved = try? owner(of: slot), moved != target {
                        target = moved
                        continue
                    }
                } else {
                    refreshSoon()
                }
                throw error
            }
            guard case .error(let message) = reply else { return reply }
            if message.hasPrefix("CLUSTERDOWN") {
                refreshSoon()
                throw .unavailable("Redis Cluster at \(target) is down: \(message)")
            }
            guard let redirect = ClusterSlots.redirect(message) else { return reply }
            switch redirect {
            case .moved(let movedSlot, let to):
                let address = to.host.isEmpty ? RedisAddress(host: target.host, port: to.port) : to
                owners.assign(movedSlot, to: address)
                refreshSoon()
                (target, asking) = (address, false)
                moves += 1
            case .ask(let to):
                // Answered by the importing node, or TRYAGAIN (bounded in time below).
                (target, asking) = (to.host.isEmpty ? RedisAddress(host: target.host, port: to.port) : to, true)
            case .tryAgain:
                // A multi-key command while its slot migrates: it runs once the slot has moved (a reshard
                // moves a slot in milliseconds), so wait and ask the owner again — within timeoutMs.
                let waited = loop.nowMs - started
                guard waited < UInt64(options.timeoutMs) else {
                    throw .unavailable("Redis Cluster slot \(slot.map(String.init) ?? "?") stayed in migration for \(waited) ms (TRYAGAIN)")
                }
                try? await Task.sleep(for: .milliseconds(min(50, 5 << min(retries, 4))))
                retries += 1
                (target, asking) = (try owner(of: slot), false)
            }
            if moves > Self.maxRedirects {
                throw .unavailable("Redis Cluster moved a command \(Self.maxRedirects) times (slot \(slot.map(String.init) ?? "none"))")
            }
        }
    }

    /// A subscription is opened rarely (at start, after it broke): the map is refreshed first, and the primaries
    /// are taken in turn, so a node that died under the last subscription is not chosen again and again.
    func subscriptionAddress() async throws(RedisClientError) -> RedisAddress {
        if owners.isEmpty { try await discover() } else { await refreshIfDue() }
        guard !owners.primaries.isEmpty else { throw .unavailable("the Redis Cluster map names no node") }
        subscriptionTurn += 1
        return owners.primaries[subscriptionTurn % owners.primaries.count]
    }

    /// The slot's primary; any known primary for keyless commands.
    private func owner(of slot: Int?) throws(RedisClientError) -> RedisAddress {
        if let slot {
            guard let address = owners.owner(of: slot) else {
                refreshSoon()
                throw .unavailable("no Redis Cluster node serves slot \(slot)")
            }
            return address
        }
        guard let address = owners.primaries.first(where: { !(nodes[$0]?.recentlyFailed ?? false) }) ?? owners.primaries.first else {
            throw .unavailable("the Redis Cluster map names no node")
        }
        return address
    }

    private func node(_ address: RedisAddress) -> LoopRedisNode {
        if let node = nodes[address] { return node }
        let node = LoopRedisNode(loop: loop, address: address, options: options)
        nodes[address] = node
        return node
    }

    /// Waits for a slot map (the first one, or after every node was forgotten).
    private func discover() async throws(RedisClientError) {
        await refreshing.run { await refresh() }
        if owners.isEmpty {
            throw refreshFailure ?? .unavailable("no Redis Cluster node answered CLUSTER SLOTS")
        }
    }

    /// A refresh now unless one ran within `refreshPauseMs` (or joins the one running).
    private func refreshIfDue() async {
        guard refreshing.isRunning || loop.nowMs >= refreshedAtMs + Self.refreshPauseMs else { return }
        await refreshing.run { await refresh() }
    }

    /// A refresh in the background, at most one per `refreshPauseMs`.
    private func refreshSoon() {
        guard !refreshing.isRunning, loop.nowMs >= refreshedAtMs + Self.refreshPauseMs else { return }
        refreshedAtMs = loop.nowMs
        let carried = Unchecked(self)
        Task(executorPreference: loop) { await carried.value.refreshing.run { await carried.value.refresh() } }
    }

    /// Asks the known primaries, then the seeds, for the slot map; the first complete answer wins.
    private func refresh() async {
        refreshedAtMs = loop.nowMs
        // Known primaries that answer, then the seeds, then the rest (a node that just failed is asked last).
        let all = owners.primaries + seeds.filter { !owners.primaries.contains($0) }
        let candidates = all.filter { !(nodes[$0]?.recentlyFailed ?? false) } + all.filter { nodes[$0]?.recentlyFailed ?? false }
        var failures: [String] = []
        for address in candidates {
            do throws(RedisClientError) {
                let reply = try await node(address).command([Array("CLUSTER".utf8), Array("SLOTS".utf8)])
                guard let map = SlotOwners(reply, asked: address) else {
                    failures.append("\(address): CLUSTER SLOTS answered \(reply.kind)")
                    continue
                }
                install(map)
                refreshFailure = nil
                return
            } catch {
                failures.append(error.message)
            }
        }
        refreshFailure = .unavailable("no Redis Cluster node gave its slot map (\(failures.joined(separator: "; ")))")
    }

    /// The new map; nodes that are neither primaries in it nor seeds are closed.
    private func install(_ map: SlotOwners) {
        owners = map
        reporter.clusterPrimaries(map.primaries)
        let keep = Set(map.primaries).union(seeds)
        for (address, node) in nodes where !keep.contains(address) {
            node.close()
            nodes[address] = nil
        }
    }

    func close() {
        nodes.values.forEach { $0.close() }
        nodes = [:]
    }
}
