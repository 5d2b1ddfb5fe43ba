import AssertionCheck
import Foundation
import Synchronization
import Upstream

/// One request's path: route → (built-in endpoint | deny | pass | assert) → forward → log.
/// Every early end is a `GatewayError`, turned into a response, a log line and a metric in one place.
public final class ProxyHandler: HTTPHandler, @unchecked Sendable {
    private let current: Locked<GatewayRuntime>
    let keyCache: KeyCache
    let metrics: Metrics
    let log: EventLog

    public init(runtime: GatewayRuntime, metrics: Metrics, log: EventLog) {
        current = Locked(runtime)
        keyCache = KeyCache(capacity: runtime.config.appAttest.keyCacheSize)
        self.metrics = metrics
        self.log = log
    }

    public var runtime: GatewayRuntime { current.withLock { $0 } }

    /// Swaps in a new configuration; requests already running finish with the old one.
    public func replace(_ runtime: GatewayRuntime) { current.withLock { $0 = runtime } }

    /// Decided before the body is read: the built-in endpoints have their own limit (a registration
    /// is ~10 KB of JSON), every route its configured one, anything else `server.max_body_bytes`.
    public func maxBodyBytes(method: String, path: String) -> Int? {
        let runtime = self.runtime
        guard let decoded = PathDecoding.decode(path) else { return runtime.config.server.maxBodyBytes }
        if let endpoint = BuiltinEndpoints(runtime: runtime, keyCache: keyCache, metrics: metrics).endpoint(for: decoded) {
            return endpoint.maxBodyBytes
        }
        if case .route(let route) = runtime.router.match(method: method, path: decoded) { return route.maxBodyBytes }
        return runtime.config.server.maxBodyBytes
    }

    public func rejected(method: String, target: String, clientAddress: String, status: Int, reason: String) {
        let record = RequestRecord(requestId: RequestID.accept([]), method: method,
                                   path: String(target.prefix { $0 != "?" }.prefix(512)), bytesIn: 0)
        record.decision = "rejected"
        record.reason = reason
        record.status = status
        record.finish(log: log, metrics: metrics)
    }

    public func handle(_ request: HTTPRequest) -> HTTPResponse {
        let runtime = self.runtime
        let record = RequestRecord(requestId: RequestID.accept(request.headers.values(named: "X-Request-Id")),
                                   method: request.method, path: request.path, bytesIn: request.body.count)
        do {
            let response = try route(request, runtime: runtime, record: record)
            record.status = response.status
            if case .bytes = response.body { record.finish(log: log, metrics: metrics) }
            return response
        } catch {
            record.reason = error.reasonCode
            if record.decision != "upstream_error" { record.decision = "denied" }
            record.status = error.status
            record.finish(log: log, metrics: metrics)
            var response = HTTPResponse.error(status: error.status, reason: error.reasonCode, message: error.message)
            // Tells the app this JSON error is the gateway's, not one the upstream API returned.
            response.headers.append(HTTPField("X-Attest-Error", error.reasonCode))
            response.headers.append(HTTPField("X-Request-Id", record.requestId))
            if case .methodNotAllowed(let allowed) = error { response.headers.append(HTTPField("Allow", allowed.joined(separator: ", "))) }
            if let seconds = error.retryAfterSeconds { response.headers.append(HTTPField("Retry-After", String(seconds))) }
            return response
        }
    }

    private func route(_ request: HTTPRequest, runtime: GatewayRuntime, record: RequestRecord) throws(GatewayError) -> HTTPResponse {
        guard let path = PathDecoding.decode(request.path) else { throw .badPath }
        if !runtime.config.hardening.allowPathParameters, PathDecoding.hasPathParameters(path) { throw .badPath }
        let builtins = BuiltinEndpoints(runtime: runtime, keyCache: keyCache, metrics: metrics)
        if let endpoint = builtins.endpoint(for: path) {
            record.decision = "builtin"
            return try builtins.handle(endpoint, request, record: record)
        }
        let route: RouteConfig
        switch runtime.router.match(method: request.method, path: path) {
        case .notFound: throw .routeNotFound
        case .methodNotAllowed(let matched, let allowed):
            record.route = matched.name
            throw .methodNotAllowed(allowed: allowed)
        case .route(let matched): route = matched
        }
        record.route = route.name
        if request.body.count > route.maxBodyBytes { throw .bodyTooLarge(limit: route.maxBodyBytes) }
        let assertRoute = AssertRoute(runtime: runtime, keyCache: keyCache, metrics: metrics, log: log)
        let outcome: AssertRoute.Outcome
        switch route.policy {
        case .deny:
            throw .routeDenied
        case .pass:
            record.decision = "pass"
            outcome = AssertRoute.Outcome(identity: Forwarder.Identity(status: "unverified", keyId: nil, riskMetric: nil), pendingClaim: nil)
        case .assert:
            outcome = try assertRoute.decide(request, path: path, route: route, record: record)
        }
        defer { assertRoute.release(inFlight: outcome.inFlight, route: route, record: record) }
        guard let upstream = runtime.upstreams[route.upstream ?? ""] else { throw .routeNotFound }
        let response: HTTPResponse
        do {
            response = try Forwarder(log: log, metrics: metrics, forwardUnderscoreHeaders: runtime.config.hardening.forwardUnderscoreHeaders).forward(request, to: upstream, identity: outcome.identity, record: record)
        } catch {
            record.decision = "upstream_error"
            throw error
        }
        assertRoute.afterUpstream(status: response.status, outcome: outcome, route: route, record: record)
        return response
    }
}

/// Request ids: the client's own when it looks like one, otherwise a fresh random one.
enum RequestID {
    static func accept(_ offered: [String]) -> String {
        if offered.count == 1, let id = offered.first, (1...128).contains(id.utf8.count),
           id.utf8.allSatisfy({ isAllowed($0) }) {
            return id
        }
        return Bytes.hex(SecureRandom.bytes(12))
    }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
    }
}

extension RouteConfig {
    /// How logs and metrics name the route: its path prefix, or "=path" for an exact route.
    var name: String {
        switch match {
        case .exact(let path): return "=" + path
        case .prefix(let path): return path
        }
    }
}
