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
    }

    func decide(_ request: HTTPRequest, path: String, route: RouteConfig, record: RequestRecord) throws(GatewayError) -> Outcome {
        do {
            return try check(request, path: path, route: route, record: record)
        } catch {
            guard route.mode == .report else { throw error }
            record.decision = "report_failed"
            record.reason = error.reasonCode
            return Outcome(identity: Forwarder.Identity(status: "report_failed:" + error.reasonCode, keyId: nil, riskMetric: nil),
                           pendingClaim: nil)
        }
    }

    /// `once_per_device`: the bit is set only once the upstream has done the thing (2xx). A failure here
    /// cannot undo the upstream's work, so it is logged loudly rather than turned into an error.
    func afterUpstream(status: Int, outcome: Outcome, route: RouteConfig, record: RequestRecord) {
        guard let device = outcome.pendingClaim, (200..<300).contains(status), let apple = runtime.apple else { return }
        do {
            try DeviceGate(apple: apple, store: runtime.store).claim(device, policy: route.deviceCheck)
        } catch {
            log.event(.error, "devicecheck_claim_failed", ["request_id": record.requestId, "route": route.name,
                                                           "reason": error.reasonCode, "message": error.message])
        }
    }

    private func check(_ request: HTTPRequest, path: String, route: RouteConfig, record: RequestRecord) throws(GatewayError) -> Outcome {
        let policy = route.deviceCheck
        let token = request.headers.first(named: DeviceGate.tokenHeader)
        let devices = runtime.apple.map { DeviceGate(apple: $0, store: runtime.store) }
        if policy.fallback, !AssertRoute.carriesAssertion(request), let token, let devices {
            let device = try devices.authenticate(token: token, policy: policy)
            record.decision = "devicecheck"
            return Outcome(identity: Forwarder.Identity(status: "devicecheck", keyId: nil, riskMetric: nil),
                           pendingClaim: policy.oncePerDevice == nil ? nil : device)
        }
        let gate = AssertGate(store: runtime.store, keyCache: keyCache, metrics: metrics,
                              apps: runtime.config.appAttest.apps, environments: runtime.config.appAttest.environments)
        let passed = try gate.check(request, decodedPath: path, route: route, record: record)
        record.riskMetric = passed.riskMetric
        try checkRisk(passed.riskMetric, policy: policy, record: record)
        var claim: DeviceGate.Device?
        if !policy.denyIfBits.isEmpty || policy.oncePerDevice != nil, let devices {
            guard let token else { throw .deviceTokenMissing }
            let device = try devices.inspect(token: token, policy: policy)
            claim = policy.oncePerDevice == nil ? nil : device
        }
        record.decision = "verified"
        return Outcome(identity: Forwarder.Identity(status: "verified", keyId: passed.keyId, riskMetric: passed.riskMetric),
                       pendingClaim: claim)
    }

    /// Apple calls the risk metric a signal, not a verdict: `risk_action: report` (the default) only marks it.
    private func checkRisk(_ metric: Int?, policy: DeviceCheckPolicy, record: RequestRecord) throws(GatewayError) {
        guard let limit = policy.maxRiskMetric, let metric, metric > limit else { return }
        if policy.riskAction == .deny { throw .riskTooHigh(metric: metric, limit: limit) }
        record.reason = "risk_above_limit"
    }

    private static func carriesAssertion(_ request: HTTPRequest) -> Bool {
        ["X-App-Attest-Key-Id", "X-App-Attest-Assertion", "X-App-Assertion"].contains { request.headers.first(named: $0) != nil }
    }
}
