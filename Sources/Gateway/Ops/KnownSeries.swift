import AssertionCheck
import AppleServices
import GoogleServices
import HTTPServer
import TLS

/// The labelled series a configuration makes knowable, exported at zero from start (and after each
/// reload, for new routes): an alert on `rate(...)` or a ratio then has a series to work on before the
/// first failure, and a dashboard shows 0 rather than "no data". Derived from `ReasonCatalog`.
struct KnownSeries {
    /// One `gateway_requests_total` series.
    struct Request: Hashable {
        let route: String
        let decision: String
        let reason: String
        let code: String
    }

    /// What an upstream can answer: its status is relayed, so every class may occur.
    static let forwardedCodes = ["2xx", "3xx", "4xx", "5xx"]

    let config: GatewayConfig
    /// The `apple:` section is in force (built-in /verify-device, Apple calls, receipt refreshes).
    var apple: Bool { config.apple != nil }

    /// Literals for the classes that occur (an interpolated string per request showed up in profiles).
    static func code(_ status: Int) -> String {
        switch status / 100 {
        case 1: "1xx"
        case 2: "2xx"
        case 3: "3xx"
        case 4: "4xx"
        case 5: "5xx"
        default: "\(status / 100)xx"
        }
    }

    var requests: [Request] {
        var series: [Request] = []
        for error in ReasonCatalog.catalogue where ReasonCatalog.places(of: error).contains(.unrouted) {
            series.append(Request(route: "-", decision: "denied", reason: error.reasonCode, code: KnownSeries.code(error.status)))
        }
        for (reason, status) in ReasonCatalog.httpLayer {
            series.append(Request(route: "-", decision: "rejected", reason: reason, code: KnownSeries.code(status)))
        }
        let endpoints = ReasonCatalog.allEndpoints + (config.playIntegrity == nil ? [] : ReasonCatalog.playIntegrityEndpoints)
        for endpoint in endpoints where endpoint != .verifyDevice || apple {
            let route = "builtin:" + endpoint.rawValue
            series.append(Request(route: route, decision: "builtin", reason: "", code: "2xx"))
            for error in ReasonCatalog.catalogue where ReasonCatalog.places(of: error).contains(.builtin(endpoint)) {
                series.append(Request(route: route, decision: "denied", reason: error.reasonCode, code: KnownSeries.code(error.status)))
            }
        }
        if let token = config.appAttest.token { series += tokenEndpoints(rateLimited: token.rateLimit != nil) }
        for route in config.routes { series += requests(on: route) }
        var seen = Set<Request>()
        return series.filter { seen.insert($0).inserted }
    }

    /// `POST /assert/token` checks an assertion as a `client_data: json` assert route does (not a token or a
    /// debug token: those are the routes' own gates), then signs; the JWK Set only answers.
    private func tokenEndpoints(rateLimited: Bool) -> [Request] {
        let mint = "builtin:" + BuiltinEndpoints.Endpoint.assertToken.rawValue
        var checks: Set<ReasonCatalog.Place> = [.assertion, .jsonClientData, .anyRoute, .builtin(.assertToken)]
        if rateLimited { checks.insert(.rateLimit) }
        let routesOnly = Set([GatewayError.tokenExpired, .tokenInvalid(""), .tokenRevoked, .tokenReused, .debugTokenInvalid,
                              .debugTokenRefused, .tokenMethodRefused("")].map(\.reasonCode))
        var series = [Request(route: mint, decision: "builtin", reason: "", code: "2xx"),
                      Request(route: "builtin:" + BuiltinEndpoints.Endpoint.jwks.rawValue, decision: "builtin", reason: "", code: "2xx")]
        for error in ReasonCatalog.catalogue where !ReasonCatalog.places(of: error).isDisjoint(with: checks)
            && !routesOnly.contains(error.reasonCode) {
            series.append(Request(route: mint, decision: "denied", reason: error.reasonCode, code: KnownSeries.code(error.status)))
        }
        return series
    }

    private func requests(on route: RouteConfig) -> [Request] {
        let places = KnownSeries.places(of: route)
        var series: [Request] = []
        func add(_ decision: String, _ reason: String, codes: [String]) {
            series += codes.map { Request(route: route.name, decision: decision, reason: reason, code: $0) }
        }
        switch route.policy {
        case .deny, .pass: break
        case .assert:
            add("verified", "", codes: KnownSeries.forwardedCodes)
            if route.deviceCheck.maxRiskMetric != nil, route.deviceCheck.riskAction == .report {
                add("verified", "risk_above_limit", codes: KnownSeries.forwardedCodes)
            }
            if route.deviceCheck.fallback { add("devicecheck", "", codes: KnownSeries.forwardedCodes) }
        }
        if route.policy == .pass { add("pass", "", codes: KnownSeries.forwardedCodes) }
        for error in ReasonCatalog.catalogue {
            let occurs = ReasonCatalog.places(of: error).intersection(places)
            guard !occurs.isEmpty else { continue }
            if occurs.contains(.forwarding) {
                add("upstream_error", error.reasonCode, codes: [KnownSeries.code(error.status)])
            } else if route.mode == .report, route.policy == .assert, !occurs.isDisjoint(with: ReasonCatalog.reportable) {
                add("report_failed", error.reasonCode, codes: KnownSeries.forwardedCodes)
            } else {
                add("denied", error.reasonCode, codes: [KnownSeries.code(error.status)])
            }
        }
        return series
    }

    /// The places a route's configuration enables.
    static func places(of route: RouteConfig) -> Set<ReasonCatalog.Place> {
        var places: Set<ReasonCatalog.Place> = [.anyRoute]
        if route.methods != nil { places.insert(.listedMethods) }
        switch route.policy {
        case .deny: places.insert(.denyRoute)
        case .pass: places.insert(.forwarding)
        case .assert:
            places.formUnion([.forwarding, .assertion])
            let policy = route.deviceCheck
            if route.clientData == .json { places.insert(.jsonClientData) }
            if policy.fallback { places.insert(.fallback) }
            if !policy.denyIfBits.isEmpty { places.insert(.deviceBits) }
            if policy.oncePerDevice != nil { places.insert(.oncePerDevice) }
            if route.rateLimit != nil { places.insert(.rateLimit) }
            if policy.maxRiskMetric != nil, policy.riskAction == .deny { places.insert(.riskDeny) }
        }
        return places
    }

    /// Every zero series: counters at 0, histograms without observations.
    var updates: [Metrics.Update] {
        let known = requests
        var updates = known.map {
            Metrics.Update.count("gateway_requests_total", ["route": $0.route, "decision": $0.decision, "reason": $0.reason, "code": $0.code],
                                 by: 0, help: MetricHelp.requests)
        }
        var durations = Set<[String]>()
        for series in known where durations.insert([series.route, series.code]).inserted {
            updates.append(.declareHistogram("gateway_request_duration_seconds", ["route": series.route, "code": series.code],
                                             help: MetricHelp.requestDuration))
        }
        for route in config.routes where route.policy != .deny {
            updates.append(.declareHistogram("gateway_upstream_duration_seconds", ["route": route.name], help: MetricHelp.upstreamDuration))
        }
        for upstream in config.upstreams {
            updates += ReasonCatalog.upstreamReasons.map {
                .count("gateway_upstream_errors_total", ["upstream": upstream.name, "reason": $0], by: 0, help: MetricHelp.upstreamErrors)
            }
        }
        updates += ReasonCatalog.storeReasons.map { .count("gateway_store_errors_total", ["reason": $0], by: 0, help: MetricHelp.storeErrors) }
        updates.append(.declareHistogram("gateway_verify_duration_seconds", [:], help: MetricHelp.verifyDuration))
        updates.append(.declareHistogram("gateway_store_duration_seconds", [:], help: MetricHelp.storeDuration))
        updates.append(.count("gateway_attestations_total", ["result": "registered", "reason": ""], by: 0, help: MetricHelp.attestations))
        updates += ReasonCatalog.attestationReasons.map {
            .count("gateway_attestations_total", ["result": "rejected", "reason": $0], by: 0, help: MetricHelp.attestations)
        }
        updates += ["hit", "miss"].map { .count("gateway_key_cache_total", ["result": $0], by: 0, help: MetricHelp.keyCache) }
        updates += ["registered", "unknown"].map { .count("gateway_key_recoveries_total", ["result": $0], by: 0, help: MetricHelp.keyRecoveries) }
        updates += config.routes.filter { $0.policy == .assert }.map {
            .count("gateway_attest_requests_total", ["route": $0.name, "attest_method": "assertion", "decision": "verified", "reason": ""],
                   by: 0, help: "Assert-route requests by how they proved themselves, decision and reason code.")
        }
        updates += config.appAttest.debugTokens.map {
            .count("gateway_debug_requests_total", ["token": $0.name], by: 0, help: "Requests let through on an app_attest.debug_tokens entry.")
        }
        updates += config.appAttest.environments.map {
            .count("gateway_tokens_minted_total", ["environment": $0.rawValue], by: 0, help: "Gateway tokens minted.")
        }
        if config.playIntegrity != nil {
            updates.append(.count("gateway_play_integrity_verdicts_total", ["result": "minted", "reason": ""], by: 0, help: MetricHelp.integrityVerdicts))
            updates += IntegrityError.Reason.allCases.map {
                .count("gateway_play_integrity_verdicts_total", ["result": "refused", "reason": $0.rawValue], by: 0, help: MetricHelp.integrityVerdicts)
            }
        }
        if config.playIntegrity?.serviceAccount != nil {
            for endpoint in GoogleEndpoint.allCases {
                updates += ReasonCatalog.googleOutcomes.map {
                    .count("gateway_google_calls_total", ["endpoint": endpoint.rawValue, "outcome": $0], by: 0, help: MetricHelp.googleCalls)
                }
                updates.append(.declareHistogram("gateway_google_call_duration_seconds", ["endpoint": endpoint.rawValue], help: MetricHelp.googleDuration))
            }
        }
        if apple { updates += appleUpdates }
        if config.tls != nil && config.server.http2 || config.server.h2c {
            updates += HTTP2Protections.reasons.map {
                .count("gateway_http2_protections_total", ["reason": $0], by: 0, help: MetricHelp.http2Protections)
            }
        }
        if config.tls != nil {
            updates += TLSFailure.reasonCodes.map {
                .count("gateway_tls_handshake_failures_total", ["reason": $0], by: 0, help: MetricHelp.tlsHandshakeFailures)
            }
        }
        return updates
    }

    private var appleUpdates: [Metrics.Update] {
        var updates: [Metrics.Update] = []
        for endpoint in AppleEndpoint.allCases {
            updates += ReasonCatalog.appleOutcomes.map {
                .count("gateway_apple_calls_total", ["endpoint": endpoint.rawValue, "outcome": $0], by: 0, help: MetricHelp.appleCalls)
            }
            updates.append(.declareHistogram("gateway_apple_call_duration_seconds", ["endpoint": endpoint.rawValue], help: MetricHelp.appleDuration))
        }
        let receiptFailures = ReasonCatalog.catalogue.compactMap { error -> String? in
            guard case .verification(let verification) = error, verification.reasonCode.hasPrefix("receipt_"),
                  verification.reason != .receiptTooOld else { return nil }
            return verification.reasonCode
        }
        let outcomes = ["refreshed", "too_early", "no_data"] + ReasonCatalog.appleOutcomes.dropFirst() + ReasonCatalog.storeReasons
            + receiptFailures + ["receipt_refresh_failed"]
        updates += outcomes.map { .count("gateway_receipt_refreshes_total", ["outcome": $0], by: 0, help: MetricHelp.receiptRefreshes) }
        updates.append(.declareHistogram("gateway_receipt_risk_metric", [:], buckets: MetricHelp.riskMetricBuckets, help: MetricHelp.riskMetric))
        return updates
    }
}

/// HELP texts shared by the code that counts and the zero series, so a scrape shows one text per metric.
enum MetricHelp {
    static let requests = "Requests by route, decision, reason code and status class."
    static let requestDuration = "Time from request received to response finished."
    static let upstreamDuration = "Time from forwarding to the last upstream byte relayed."
    static let upstreamErrors = "Upstream requests that failed before a response."
    static let storeErrors = "Requests that failed on the Redis state store."
    static let verifyDuration = "Assertion verification time (pure checks and signature)."
    static let storeDuration = "Time of the Redis commit of an assertion (one round trip)."
    static let attestations = "Attestations by result."
    static let googleCalls = "Calls to Google's OAuth token endpoint and Play Integrity API, by outcome."
    static let googleDuration = "Latency of each attempt at a Google call."
    static let integrityVerdicts = "Play Integrity tokens exchanged at /play-integrity/token: minted, or refused by reason."
    static let keyCache = "Public key cache lookups."
    static let keyRecoveries = "Assertions without X-App-Attest-Key-Id whose key was recovered from the signature."
    static let appleCalls = "Calls to Apple's DeviceCheck and App Attest servers, by outcome."
    static let appleDuration = "Latency of each attempt at an Apple server call."
    static let receiptRefreshes = "Receipt exchanges with Apple, by outcome."
    static let tlsHandshakeFailures = "TLS handshakes on the listener that failed, by reason."
    static let http2Protections = "HTTP/2 connections (or streams) cut for misbehaving, by reason."
    static let riskMetric = "Risk metrics of the receipts this process refreshed (Apple's count of attestations on the device)."
    /// Apple's metric is a small count; a genuine device rarely goes past a handful.
    static let riskMetricBuckets: [Double] = [0, 1, 2, 3, 5, 10, 20, 50, 100, 500]
}
