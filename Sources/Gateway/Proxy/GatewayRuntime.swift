import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Upstream
import Foundation

/// One upstream as the forwarder uses it.
struct UpstreamBinding: Sendable {
    let name: String
    let client: UpstreamClient
    let preserveHost: Bool
}

/// Everything built from one configuration: swapped whole on reload, so a request sees one
/// consistent set of routes, upstreams and store.
public final class GatewayRuntime: Sendable {
    public let config: GatewayConfig
    let router: Router
    let upstreams: [String: UpstreamBinding]
    public let store: AttestStore
    let attestationPolicy: AttestationPolicy
    /// Apple's server APIs, when the config has an `apple:` section.
    let apple: AppleRuntime?
    /// Gateway tokens, when the config has an `app_attest.token` section.
    let tokens: GatewayTokens?
    /// Google's Play Integrity API, when `play_integrity` has a `service_account_file`.
    let google: GoogleRuntime?
    /// Issues and checks challenges (StatelessChallenge.swift).
    let challenges: ChallengeAuthority
    /// `app_attest.challenge_rate_limit`, when set.
    let challengeLimiter: ChallengeRateLimiter?

    private init(config: GatewayConfig, router: Router, upstreams: [String: UpstreamBinding], store: AttestStore, apple: AppleRuntime?,
                 tokens: GatewayTokens?, google: GoogleRuntime?, previous: GatewayRuntime?) {
        self.config = config
        self.router = router
        self.upstreams = upstreams
        self.store = store
        self.apple = apple
        self.tokens = tokens
        self.google = google
        challenges = ChallengeAuthority(configured: config.appAttest.challengeSecrets, store: store, previous: previous?.challenges)
        // Counts survive a reload that keeps the same limit.
        challengeLimiter = config.appAttest.challengeRateLimit.map { limit in
            previous?.challengeLimiter.flatMap { $0.limit == limit ? $0 : nil } ?? ChallengeRateLimiter(limit: limit)
        }
        attestationPolicy = AttestationPolicy(apps: config.appAttest.apps, environments: Set(config.appAttest.environments),
                                              trustAnchor: config.appAttest.trustAnchor)
    }

    /// Reuses what did not change since `previous`: upstream clients (and their kept-alive
    /// connections), the Redis pool, the Apple clients (and their cached JWT) and the Google client (and its
    /// cached access token).
    static func build(_ config: GatewayConfig, previous: GatewayRuntime? = nil, log: EventLog, metrics: Metrics) throws -> GatewayRuntime {
        var upstreams: [String: UpstreamBinding] = [:]
        for upstream in config.upstreams {
            let target = try UpstreamTarget(baseURL: upstream.url, timeouts: upstream.timeouts,
                                            maxIdleConnections: upstream.maxIdleConnections, keepAliveMs: upstream.keepAliveTimeoutMs,
                                            tls: upstream.tls)
            let client = previous?.upstreams[upstream.name].flatMap { $0.client.target == target ? $0.client : nil }
                ?? UpstreamClient(target: target)
            upstreams[upstream.name] = UpstreamBinding(name: upstream.name, client: client, preserveHost: upstream.hostHeader == .preserve)
        }
        let store: AttestStore
        if let previous, previous.config.redis == config.redis {
            store = previous.store
        } else {
            store = try makeStore(config.redis, log: log)
        }
        var apple: AppleRuntime?
        if let appleConfig = config.apple {
            if let running = previous?.apple, running.config == appleConfig {
                apple = running
            } else {
                apple = try AppleRuntime(config: appleConfig, log: log, metrics: metrics)
            }
        }
        metrics.apply(KnownSeries(config: config).updates)
        let tokens = try GatewayTokens.build(config, store: store, previous: previous?.tokens, log: log)
        let google = try GoogleRuntime.build(config, previous: previous?.google, log: log, metrics: metrics)
        return GatewayRuntime(config: config, router: Router(routes: config.routes, upstreams: upstreams), upstreams: upstreams, store: store, apple: apple,
                              tokens: tokens, google: google, previous: previous)
    }

    /// `log`: where a followed failover or a changed Cluster is told (`redis_primary_changed`, `redis_cluster_changed`).
    static func makeStore(_ redis: RedisConfig, log: EventLog? = nil) throws(StoreError) -> AttestStore {
        var topologyChanged: (@Sendable (RedisTopologyEvent) -> Void)?
        if let log { topologyChanged = { event in logTopology(event, log) } }
        return try AttestStore(redis: Redis(options: redis.options(), onTopologyChange: topologyChanged), keyPrefix: redis.keyPrefix)
    }

    private static func logTopology(_ event: RedisTopologyEvent, _ log: EventLog) {
        switch event {
        case .primaryChanged(let masterName, let previous, let primary):
            log.event(previous == nil ? .info : .warn, "redis_primary_changed",
                      ["master_name": masterName, "previous": previous?.description ?? NSNull(), "primary": primary.description])
        case .clusterPrimariesChanged(let previous, let primaries):
            log.event(previous.isEmpty ? .info : .warn, "redis_cluster_changed",
                      ["previous": previous.map(\.description), "primaries": primaries.map(\.description)])
        }
    }
}
