import HTTPServer
import AssertionCheck

/// What an `assert` route decides before forwarding: an App Attest assertion (or, on `fallback:
/// devicecheck`, a DeviceCheck token), the device's bits, the key's risk metric. Enforce mode ends the
/// request on a failure; report mode logs it and forwards, marked `report_failed:<reason>` for the
/// upstream (the gradual rollout Apple recommends).
struct AssertRoute {
    let runtime: GatewayRuntime
    let keyCache: KeyCache
    let metrics: Metrics
    let log: EventLog

    struct Outcome {
        let identity: Forwarder.Identity
        /// Set when `once_per_device` must be claimed after the upstream's 2xx.
        let pendingClaim: DeviceGate.Device?
        /// The key whose in-flight mark for this route `release(inFlight:route:record:)` ends once the claim is settled.
        var inFlight: [UInt8]? = nil
    }

    nonisolated(nonsending) func decide(_ request: HTTPRequest, body: BodySource, path: String, route: RouteConfig, record: RequestRecord) async throws(GatewayError) -> Outcome {
        do {
            return try await check(request, body: body, path: path, route: route, record: record)
        } catch {
            guard route.mode == .report else { throw error }
            record.decision = "report_failed"
            record.reason = error.reasonCode
            record.detail = error.internalDetail
            return Outcome(identity: Forwarder.Identity(status: "report_failed:" + error.reasonCode, keyId: nil, riskMetric: nil),
                           pendingClaim: nil)
        }
    }

    /// `once_per_device`: the bit is set only once the upstream has done the thing (2xx). A failure here
    /// cannot undo the upstream's work, so it is logged loudly rather than turned into an error.
    func afterUpstream(status: Int, outcome: Outcome, route: RouteConfig, record: RequestRecord) async {
        guard let device = outcome.pendingClaim, (200..<300).contains(status), let apple = runtime.apple else { return }
        do {
            try await DeviceGate(apple: apple, store: runtime.store).claim(device, policy: route.deviceCheck)
        } catch {
            log.event(.error, "devicecheck_claim_failed", ["request_id": record.requestId, "route": route.name,
                                                           "reason": error.reasonCode, "message": error.message,
                                                           "detail": error.internalDetail ?? ""])
        }
    }

    /// Ends the in-flight mark taken for a `once_per_device` request (after `afterUpstream`, or when
    /// forwarding failed). A failure leaves the mark to expire on its own.
    func release(inFlight keyId: [UInt8]?, route: RouteConfig, record: RequestRecord) async {
        guard let keyId else { return }
        do {
            try await runtime.store.releaseClaim(keyId: keyId, route: route.name)
        } catch {
            log.event(.warn, "claim_release_failed", ["request_id": record.requestId, "route": route.name,
                                                          "reason": error.reasonCode])
        }
    }

    nonisolated(nonsending) private func check(_ request: HTTPRequest, body: BodySource, path: String, route: RouteConfig, record: RequestRecord) async throws(GatewayError) -> Outcome {
        if let debug = try DebugTokenGate(tokens: runtime.config.appAttest.debugTokens, metrics: metrics).check(request, route: route, record: record) {
            return Outcome(identity: debug, pendingClaim: nil)
        }
        let policy = route.deviceCheck
        // Looked up only where a DeviceCheck policy reads it (a lookup by a name that is not a KnownHeader compares
        // every field's name: ~800 instructions).
        let readsDevice = policy.fallback || !policy.denyIfBits.isEmpty || policy.oncePerDevice != nil
        let token = readsDevice ? request.headers.first(named: DeviceGate.tokenHeader) : nil
        let devices = runtime.apple.map { DeviceGate(apple: $0, store: runtime.store) }
        if policy.fallback, !AssertRoute.carriesAssertion(request), let token, let devices {
            let device = try await devices.authenticate(token: token, policy: policy)
            record.decision = "devicecheck"
            record.attestMethod = "devicecheck"
            return Outcome(identity: Forwarder.Identity(status: "devicecheck", keyId: nil, riskMetric: nil, method: "devicecheck"),
                           pendingClaim: policy.oncePerDevice == nil ? nil : device)
        }
        let passed = try await prove(request, body: body, path: path, route: route, record: record)
        record.riskMetric = passed.riskMetric
        try checkRisk(passed.riskMetric, policy: policy, record: record)
        var claim: DeviceGate.Device?
        var inFlight: [UInt8]?
        if !policy.denyIfBits.isEmpty || policy.oncePerDevice != nil, let devices {
            guard let token else { throw .deviceTokenMissing }
            if policy.oncePerDevice != nil {
                // Marked before the bits are read: two requests of one app reading "not yet" at the same
                // moment would otherwise both be forwarded and both claim.
                try await markInFlight(passed.keyId, route: route)
                inFlight = passed.keyId
            }
            do {
                let device = try await devices.inspect(token: token, policy: policy)
                claim = policy.oncePerDevice == nil ? nil : device
            } catch {
                await release(inFlight: inFlight, route: route, record: record)
                throw error
            }
        }
        record.decision = "verified"
        return Outcome(identity: Forwarder.Identity(status: "verified", keyId: passed.keyIdBase64, riskMetric: passed.riskMetric,
                                                    method: passed.method, deviceIntegrity: passed.deviceIntegrity),
                       pendingClaim: claim, inFlight: inFlight)
    }

    /// Held for at most the upstream's timeout plus a minute (for Apple's update), should the gateway die.
    nonisolated(nonsending) private func markInFlight(_ keyId: [UInt8], route: RouteConfig) async throws(GatewayError) {
        let timeouts = runtime.upstreams[route.upstream ?? ""].map { route.timeouts.applied(to: $0.client.target.timeouts) ?? $0.client.target.timeouts }
        let upstreamMs = timeouts.map { $0.totalMs > 0 ? $0.totalMs : $0.connectMs + $0.firstByteMs } ?? 0
        let marked: Bool
        do {
            marked = try await runtime.store.claimInFlight(keyId: keyId, route: route.name, ttlMs: upstreamMs + 60_000)
        } catch {
            throw GatewayError(error)
        }
        guard marked else { throw .claimInProgress }
    }

    /// Apple calls the risk metric a signal, not a verdict: `risk_action: report` (the default) only marks it.
    private func checkRisk(_ metric: Int?, policy: DeviceCheckPolicy, record: RequestRecord) throws(GatewayError) {
        guard let limit = policy.maxRiskMetric, let metric, metric > limit else { return }
        if policy.riskAction == .deny { throw .riskTooHigh(metric: metric, limit: limit) }
        record.reason = "risk_above_limit"
    }

    /// A gateway token counts: the fallback is for apps without App Attest, not for a token that failed.
    private static func carriesAssertion(_ request: HTTPRequest) -> Bool {
        carriesAssertionHeaders(request) || request.headers.first(named: GatewayTokens.header) != nil
    }
}
