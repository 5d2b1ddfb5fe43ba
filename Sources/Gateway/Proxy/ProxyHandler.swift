import AssertionCheck
import EventLoop
import Foundation
import HTTPServer
import Synchronization
import Upstream

/// One request's path: route → (built-in endpoint | deny | pass | assert) → forward → log.
/// Every early end is a `GatewayError`, turned into a response, a log line and a metric in one place.
/// Runs on the connection's event loop; blocking steps (Redis, Apple) go to the blocking pool.
public final class ProxyHandler: HTTPHandler, @unchecked Sendable {
    private let current: Locked<GatewayRuntime>
    let keyCache: KeyCache
    let metrics: Metrics
    let log: EventLog
    let blocking: BlockingPool
    public init(runtime: GatewayRuntime, metrics: Metrics, log: EventLog, blocking: BlockingPool) {
        current = Locked(runtime)
        keyCache = KeyCache(capacity: runtime.config.appAttest.keyCacheSize)
        self.metrics = metrics
        self.log = log
        self.blocking = blocking
    }

    public var runtime: GatewayRuntime { current.withLock { $0 } }

    /// Swaps in a new configuration; requests already running finish with the old one.
    public func replace(_ runtime: GatewayRuntime) { current.withLock { $0 = runtime } }

    public func rejected(method: String, target: String, clientAddress: String, status: Int, reason: String) {
        let record = RequestRecord(requestId: RequestID.accept([]), method: method,
                                   path: String(target.prefix { $0 != "?" }.prefix(512)), bytesIn: 0)
        record.decision = "rejected"
        record.clientIP = clientAddress
        record.reason = reason
        record.status = status
        record.finish(log: log, metrics: metrics)
    }

    /// A trusted proxy's connections carry many clients: `per_ip_connection_limit` does not count them.
    public func exemptFromPerIPLimit(_ peerAddress: String) -> Bool {
        IPAddress(peerAddress).map(runtime.config.clientAddress.trusts) ?? false
    }

    public func tlsHandshakeFailed(reason: String) {
        metrics.increment("gateway_tls_handshake_failures_total", ["reason": reason], help: MetricHelp.tlsHandshakeFailures)
    }

    public func http2Protection(reason: String) {
        metrics.increment("gateway_http2_protections_total", ["reason": reason], help: MetricHelp.http2Protections)
    }

    /// Plain callbacks where nothing waits (pass, deny, not found, errors); a task only for a step that does
    /// (`waiting`).
    public func start(_ exchange: HTTPExchange, done: @escaping () -> Void) {
        let runtime = self.runtime
        let record = RequestRecord(requestId: RequestID.accept(exchange.head.headers),
                                   method: exchange.head.method, path: exchange.head.path, bytesIn: 0)
        record.capture(exchange.head, clientAddress: runtime.config.clientAddress)
        let request = ProxyRequest(handler: self, exchange: exchange, runtime: runtime, record: record, done: done)
        // The line is written when the response has been sent (or failed), with what was really sent. The exchange
        // lets go of the callback (and with it the request) once it has called it.
        exchange.onFinished = { [request] outcome in request.log(outcome) }
        route(request)
    }

    fileprivate func errorResponse(_ error: GatewayError, record: RequestRecord) -> HTTPResponse {
        record.reason = error.reasonCode
        record.detail = error.internalDetail
        if record.decision != "upstream_error" { record.decision = "denied" }
        record.status = error.status
        var response = HTTPResponse.error(status: error.status, reason: error.reasonCode, message: error.message)
        // Tells the app this JSON error is the gateway's, not one the upstream API returned.
        response.headers.append(HTTPField("X-Attest-Error", error.reasonCode))
        response.headers.append(HTTPField("X-Request-Id", record.requestId))
        if case .methodNotAllowed(let allowed) = error { response.headers.append(HTTPField("Allow", allowed.joined(separator: ", "))) }
        if let seconds = error.retryAfterSeconds { response.headers.append(HTTPField("Retry-After", String(seconds))) }
        if case .body(.overloaded) = error { response.headers.append(HTTPField("Retry-After", "1")) }
        return response
    }

    /// How the handler's part of a request ended.
    fileprivate enum Answer {
        /// The upstream's response was relayed (with this status).
        case relayed(status: Int)
        /// This response is to be sent.
        case response(HTTPResponse)
        /// The request ends with this error's response.
        case failed(GatewayError)
    }

    private func route(_ request: ProxyRequest) {
        let (exchange, runtime, record) = (request.exchange, request.runtime, request.record)
        guard let path = runtime.config.hardening.routablePath(exchange.head.path) else { return request.answer(.failed(.badPath)) }
        let builtins = BuiltinEndpoints(runtime: runtime, keyCache: keyCache, metrics: metrics)
        if let endpoint = builtins.endpoint(for: path) {
            record.decision = "builtin"
            record.route = "builtin:" + endpoint.rawValue
            return waiting(request) { [self] () async throws(GatewayError) -> Answer in
                let body = BodySource(exchange, limit: endpoint.maxBodyBytes, record: record)
                let read = HTTPRequest(exchange.head, body: try await body.read())
                return .response(try await builtins.handle(endpoint, read, body: body, record: record, offload: offload))
            }
        }
        // The route's fields are read where the router keeps them (a copy of the route cost ~500 instructions).
        let entry: RouteEntry
        switch runtime.router.lookup(method: exchange.head.method, path: path) {
        case .notFound: return request.answer(.failed(.routeNotFound))
        case .methodNotAllowed(let matched, let allowed):
            record.route = matched.name
            return request.answer(.failed(.methodNotAllowed(allowed: allowed)))
        case .route(let matched): entry = matched
        }
        record.route = entry.name
        // Answered without reading the body (the connection then closes rather than skip it).
        if entry.config.policy == .deny { return request.answer(.failed(.routeDenied)) }
        // The upstream client's rule, before anything is read: GET and HEAD carry no body.
        if exchange.head.hasBody, !UpstreamRequest.mayCarryBody(exchange.head.method) {
            return request.answer(.failed(.badRequest("a \(exchange.head.method) request cannot carry a body")))
        }
        // A declared length over the limit is refused before any other check: it costs nothing to know.
        if case .contentLength(let length) = exchange.head.framing, length > entry.config.maxBodyBytes {
            return request.answer(.failed(.bodyTooLarge(limit: entry.config.maxBodyBytes)))
        }
        let body = BodySource(exchange, limit: entry.config.maxBodyBytes, record: record)
        switch entry.config.policy {
        case .deny:
            request.answer(.failed(.routeDenied))
        case .pass:
            record.decision = "pass"
            request.forward(route: entry, body: body, identity: Forwarder.Identity(status: "unverified", keyId: nil, riskMetric: nil))
        case .assert:
            let route = entry.config
            let assertRoute = AssertRoute(runtime: runtime, keyCache: keyCache, metrics: metrics, log: log)
            waiting(request) { () async throws(GatewayError) -> Answer in
                // Every header-only check happens before the body is read (inside `decide`).
                let outcome = try await assertRoute.decide(HTTPRequest(exchange.head, body: []), body: body, path: path, route: route,
                                                           record: record)
                let forwarded = await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<Answer>, Never>) in
                    request.forward(route: entry, body: body, identity: outcome.identity) { continuation.resume(returning: Unchecked($0)) }
                }
                switch forwarded.value {
                case .failed(let error):
                    await assertRoute.release(inFlight: outcome.inFlight, route: route, record: record)
                    throw error
                case .relayed(let status):
                    // Only `once_per_device` leaves anything to settle (two async calls a request otherwise).
                    if outcome.pendingClaim != nil || outcome.inFlight != nil {
                        await assertRoute.afterUpstream(status: status, outcome: outcome, route: route, record: record)
                        await assertRoute.release(inFlight: outcome.inFlight, route: route, record: record)
                    }
                case .response:
                    break
                }
                return forwarded.value
            }
        }
    }

    /// A step that waits (Redis, Apple, Google, a body read whole before a decision) runs as a task on the
    /// exchange's loop; the request is answered with its result there.
    private func waiting(_ request: ProxyRequest, _ step: @escaping () async throws(GatewayError) -> Answer) {
        let (request, step) = (Unchecked(request), Unchecked(step))
        Task(executorPreference: request.value.exchange.loop) {
            do throws(GatewayError) {
                request.value.answer(try await step.value())
            } catch {
                request.value.answer(.failed(error))
            }
        }
    }

    /// Runs a blocking step (Redis, Apple) on the blocking pool; the request's task waits without a thread.
    func offload<T>(_ body: @escaping () throws(GatewayError) -> T) async throws(GatewayError) -> T {
        try await blocking.run { () -> Result<T, GatewayError> in
            do throws(GatewayError) { return .success(try body()) } catch { return .failure(error) }
        }.get()
    }
}

/// One request on its way through the handler: what the callbacks of its steps share, in one object that each
/// of them captures alone (a closure capturing several values allocates its context: there were a dozen of
/// them a request). Loop thread only.
private final class ProxyRequest {
    let handler: ProxyHandler
    let exchange: HTTPExchange
    let runtime: GatewayRuntime
    let record: RequestRecord
    /// `HTTPHandler.start`'s: the handler has let go of the exchange.
    private let done: () -> Void
    /// The body being forwarded (its failure is the reason a forward failed).
    private var body: BodySource?
    /// Where a body still to be read is forwarded, once it is in. A body in hand goes as parameters: read back
    /// from here, the identity's strings were retained and released again.
    private var awaitingBody: (route: RouteEntry, identity: Forwarder.Identity)?
    /// Told how the forward went; nil: it is the request's answer.
    private var forwarded: ((ProxyHandler.Answer) -> Void)?

    init(handler: ProxyHandler, exchange: HTTPExchange, runtime: GatewayRuntime, record: RequestRecord, done: @escaping () -> Void) {
        (self.handler, self.exchange, self.runtime, self.record, self.done) = (handler, exchange, runtime, record, done)
    }

    /// The exchange ended (`outcome`): the access-log line and the metrics.
    func log(_ outcome: ExchangeOutcome) {
        record.status = exchange.status ?? record.status
        record.bytesOut = exchange.bytesSent
        record.outcome = outcome
        record.finish(log: handler.log, metrics: handler.metrics)
    }

    /// The handler's part ends with `answer`.
    func answer(_ answer: ProxyHandler.Answer) {
        switch answer {
        case .relayed: done()
        case .response(let response): exchange.send(response, then: done)
        case .failed(let error): exchange.send(handler.errorResponse(error, record: record), then: done)
        }
    }

    /// The body (relayed as it arrives on a pass route; an assert route has read and hashed it already), then
    /// the request forwarded on the loop its connection lives on: `then` is told once it was relayed, or why
    /// not (without `then`, that is the request's answer).
    func forward(route: RouteEntry, body: BodySource, identity: Forwarder.Identity, then: ((ProxyHandler.Answer) -> Void)? = nil) {
        (self.body, forwarded) = (body, then)
        if route.config.policy == .pass && exchange.head.hasBody {
            let upload = UpstreamUpload(length: exchange.head.framing.declaredLength)
            body.stream(into: upload)
            return send([], upload: upload, route: route, identity: identity)
        }
        if let read = body.readAtOnce() { return send(read, route: route, identity: identity) }
        awaitingBody = (route, identity)
        body.read { [self] read in
            guard let awaiting = awaitingBody.take() else { return }
            send(read, route: awaiting.route, identity: awaiting.identity)
        }
    }

    private func send(_ read: Result<[UInt8], GatewayError>, route: RouteEntry, identity: Forwarder.Identity) {
        switch read {
        case .success(let bytes): send(bytes, upload: nil, route: route, identity: identity)
        case .failure(let error): ended(.failed(error))
        }
    }

    private func send(_ bytes: [UInt8], upload: UpstreamUpload?, route: RouteEntry, identity: Forwarder.Identity) {
        guard let upstream = route.upstream, let multi = try? LoopMulti.current() else {
            return ended(.failed(.routeNotFound))
        }
        Forwarder(log: handler.log, metrics: handler.metrics, forwardUnderscoreHeaders: runtime.config.hardening.forwardUnderscoreHeaders,
                  clientAddress: runtime.config.clientAddress)
            .forward(exchange.head, body: bytes, exchange: exchange, multi: multi, to: upstream, timeouts: route.config.timeouts,
                     upload: upload, identity: identity, record: record) { [self] in relayed($0) }
    }

    private func relayed(_ result: Result<Int, GatewayError>) {
        switch result {
        case .success(let status):
            ended(.relayed(status: status))
        case .failure(let error):
            // The client's body broke off first: that is the reason, not the upstream exchange it aborted.
            if let failure = body?.streamFailure { return ended(.failed(failure)) }
            record.decision = "upstream_error"
            ended(.failed(error))
        }
    }

    private func ended(_ result: ProxyHandler.Answer) {
        guard let then = forwarded else { return answer(result) }
        forwarded = nil
        then(result)
    }
}

/// Request ids: the client's own when it looks like one, otherwise a fresh random one.
enum RequestID {
    /// From the request's headers: exactly one `X-Request-Id` is taken (when it looks like an id).
    static func accept(_ headers: [HTTPField]) -> String {
        var offered: String?, count = 0
        for index in headers.indices where headers[index].known == .xRequestId {
            offered = headers[index].value
            count += 1
        }
        if count == 1, let id = offered, (1...128).contains(id.utf8.count), id.allBytes(isAllowed) {
            return id
        }
        return random.hex(12)
    }

    private static let random = SecureRandomPool()

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
