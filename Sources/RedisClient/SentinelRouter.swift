import EventLoop

/// A primary that sentinels name, from one event loop. The primary is asked of the sentinels (all at once)
/// before every new connection to it — so a loop that was idle through a failover never reconnects to the
/// old primary, even once it is back — and again after a failure or a READONLY reply; ROLE is checked at
/// login. Asking again waits `resolvePauseMs` between attempts, so a dead primary the sentinels have not
/// replaced yet costs one question per pause, not one per request.
///
/// While in use, the sentinels are also asked every `checkEveryMs`: after a planned failover (or one
/// where the old primary was only cut off) the old primary stays a working primary until the sentinels
/// demote it, 8–10 s later, and drop every write it took meanwhile; nothing fails to tell us sooner. When
/// the answer changes, the old primary's connections are closed (commands in flight on them fail, as any
/// lost connection) and new commands go to the new one. Polling rather than a `+switch-master`
/// subscription: no connection of its own to keep alive and re-subscribe, nothing lost if it silently
/// dies, and each loop keeps its state on its own thread; it adds at most a second to the sentinels' own
/// reaction time (they look at a promoted replica once a second too).
final class SentinelRouter: RedisRouting {
    static let resolvePauseMs: UInt64 = 200
    static let checkEveryMs: UInt64 = 1000

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
    private var checkTimer: LoopTimer?
    private var checkArmed = false
    /// Called (on this loop) when this router is the first to see the primary replaced.
    private let onNewPrimary: (RedisAddress) -> Void

    /// `onNewPrimary`: lets the other loops' routers check at once, so loops do not disagree for up to a
    /// check period (a key registered through one loop on the old primary, looked up through another on the new).
    init(loop: EventLoop, sentinels: [RedisAddress], masterName: String, options: RedisOptions, reporter: TopologyReporter,
         onNewPrimary: @escaping (RedisAddress) -> Void = { _ in }) {
        self.loop = loop
        self.reporter = reporter
        self.onNewPrimary = onNewPrimary
        self.options = options
        self.masterName = masterName
        // Sentinels take no database; their login (if any) is their own, not the data servers'.
        var sentinelOptions = options
        (sentinelOptions.username, sentinelOptions.password) = (options.sentinelUsername, options.sentinelPassword)
        (sentinelOptions.database, sentinelOptions.connectionsPerNode) = (0, 1)
        self.sentinels = sentinels.map { LoopRedisNode(loop: loop, address: $0, options: sentinelOptions) }
        // Made on the loop's thread (`Redis` makes routers there), as a libuv handle must be.
        checkTimer = LoopTimer(loop) { [weak self] in self?.check() }
    }

    func send(_ command: RedisCommand, key: [UInt8]?, reply: @escaping LoopRedisConnection.Reply) {
        routeInTask(on: loop, reply: reply) { [self] () async throws(RedisClientError) -> RedisReply in try await self.command(command, key: key) }
    }

    private func command(_ command: RedisCommand, key: [UInt8]?) async throws(RedisClientError) -> RedisReply {
        keepChecking()
        var node = try await current()
        var rerouted = false
        while true {
            do throws(RedisClientError) {
                let reply = try await node.command(command)
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

    /// Arms the next check: checks run only while commands come, so an idle loop asks nobody; one idle
    /// for longer than that asks before its next command instead (its primary may have changed meanwhile).
    private func keepChecking() {
        guard !checkArmed else { return }
        checkArmed = true
        if loop.nowMs >= resolvedAtMs + 2 * Self.checkEveryMs { stale = true }
        checkTimer?.start(milliseconds: Int(Self.checkEveryMs))
    }

    /// In the background: commands keep going to the known primary until the answer differs. A question
    /// is bounded by `timeoutMs`; while one runs, no other starts. Also called (on this loop)
    /// when another loop's router saw a new primary.
    func check() {
        checkArmed = false
        guard checkTimer != nil, !resolving.isRunning else { return }  // not once closed
        let carried = Unchecked(self)
        Task(executorPreference: loop) { await carried.value.resolving.run { await carried.value.resolve() } }
    }

    /// Asks every sentinel at once. The one that answered last time is listened to first; another's answer
    /// is taken only once that one has failed. So a question costs one timeout at most, not one per
    /// sentinel (blackholed sentinels were asked in turn before), and while the usual sentinel answers,
    /// the others cannot make the client flap between two primaries during a failover.
    private func resolve() async {
        resolvedAtMs = loop.nowMs
        let poll = SentinelPoll(count: sentinels.count)
        for index in sentinels.indices { ask(index, into: poll) }
        switch await poll.decision() {
        case .named(let address, let index):
            use(address)
            sentinels.swapAt(0, index)
        case .failed(let failures):
            resolveFailure = .unavailable("no sentinel named the primary of \(masterName) (\(failures.joined(separator: "; ")))")
        }
    }

    /// Puts the question to one sentinel; its answer goes to `poll` whenever it comes.
    private func ask(_ index: Int, into poll: SentinelPoll) {
        let question = Unchecked(SentinelQuestion(sentinel: sentinels[index], masterName: masterName, poll: poll, index: index))
        Task(executorPreference: loop) { await question.value.put() }
    }

    private func use(_ address: RedisAddress) {
        stale = false
        resolveFailure = nil
        if reporter.primary(address, masterName: masterName) { onNewPrimary(address) }
        if primary?.address == address { return }
        if let old = primary {
            // What it still answers would be dropped when the sentinels demote it: fail it instead (503).
            old.close(.unavailable("Redis at \(old.address) is no longer the primary of \(masterName): the sentinels name \(address)"))
        }
        primary = LoopRedisNode(loop: loop, address: address, options: options, expect: .primary)
    }

    func close() {
        checkTimer?.close()
        checkTimer = nil
        primary?.close()
        sentinels.forEach { $0.close() }
    }
}

/// One sentinel asked for the primary; its answer goes to the poll.
private struct SentinelQuestion {
    let sentinel: LoopRedisNode
    let masterName: String
    let poll: SentinelPoll
    let index: Int

    func put() async { poll.record(index, await answer()) }

    /// The address the sentinel names, or why it names none.
    private func answer() async -> Result<RedisAddress, SentinelPoll.Failure> {
        let reply: RedisReply
        do throws(RedisClientError) {
            reply = try await sentinel.command(["SENTINEL", "get-master-addr-by-name", masterName].map { Array($0.utf8) })
        } catch {
            return .failure(.init(message: error.message))
        }
        guard case .array(let fields) = reply, fields.count == 2, case .string(let host) = fields[0],
              case .string(let portText) = fields[1], let port = Int(String(decoding: portText, as: UTF8.self)) else {
            // An error reply says why (NOAUTH: the sentinel wants `sentinel_auth`).
            if case .error(let message) = reply { return .failure(.init(message: "\(sentinel.address) answered \(message)")) }
            return .failure(.init(message: "\(sentinel.address) answered \(reply.kind)"))
        }
        return .success(RedisAddress(host: String(decoding: host, as: UTF8.self), port: port))
    }
}

/// The answers to one question put to every sentinel at once (loop thread only). Decided when the
/// preferred sentinel (index 0) names a primary, or once it has failed and another has named one (the
/// first to), or when all have failed.
final class SentinelPoll {
    struct Failure: Error { let message: String }

    enum Decision {
        case named(RedisAddress, index: Int)
        case failed([String])
    }

    private var answers: [Result<RedisAddress, Failure>?]
    /// The first sentinel other than the preferred one to name a primary, and what it named.
    private var firstOther: (index: Int, address: RedisAddress)?
    private var waiting: CheckedContinuation<Decision, Never>?
    private(set) var decided: Decision?

    init(count: Int) { answers = Array(repeating: nil, count: count) }

    func record(_ index: Int, _ answer: Result<RedisAddress, Failure>) {
        guard decided == nil else { return }  // a late answer: the question is settled
        answers[index] = answer
        if index != 0, firstOther == nil, case .success(let address) = answer { firstOther = (index, address) }
        guard let decision = decide() else { return }
        decided = decision
        waiting?.resume(returning: decision)
        waiting = nil
    }

    func decision() async -> Decision {
        if let settled = decided ?? decide() { return settled }
        return await withCheckedContinuation { waiting = $0 }
    }

    private func decide() -> Decision? {
        if let preferred = answers.first {
            switch preferred {
            case .success(let address)?: return .named(address, index: 0)
            case nil: return nil  // still listening to the usual sentinel
            case .failure?: break
            }
        }
        if let firstOther { return .named(firstOther.address, index: firstOther.index) }
        guard answers.allSatisfy({ $0 != nil }) else { return nil }
        return .failed(answers.compactMap { answer in
            if case .failure(let failure)? = answer { return failure.message }
            return nil
        })
    }
}
