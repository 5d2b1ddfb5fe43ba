import EventLoop
import Foundation
import HTTPServer
import Synchronization
import Upstream

/// The admin listener: /healthz (process up), /readyz (Redis reachable), /metrics (Prometheus text).
/// Kept off the public port so probes and scrapes never compete with, or leak to, API clients.
final class AdminHandler: WholeRequestHandler, @unchecked Sendable {
    private let proxy: ProxyHandler
    /// The public listener, for its connection gauges.
    private let listener: HTTPServer
    /// Set when SIGTERM starts the drain: /readyz then says 503 so load balancers stop sending.
    let draining = Atomic<Bool>(false)

    init(proxy: ProxyHandler, listener: HTTPServer) {
        self.proxy = proxy
        self.listener = listener
    }

    func maxBodyBytes(for head: RequestHead) -> Int { 0 }

    func respond(to request: HTTPRequest) async -> HTTPResponse {
        guard request.method == "GET" || request.method == "HEAD" else {
            return HTTPResponse.error(status: 405, reason: "method_not_allowed", message: "admin endpoints accept GET")
        }
        switch request.path {
        case "/healthz":
            return text(200, "ok\n")
        case "/readyz":
            if draining.load(ordering: .relaxed) {
                return HTTPResponse.error(status: 503, reason: "draining", message: "the gateway is shutting down")
            }
            return await proxy.runtime.store.ping() ? text(200, "ready\n") : HTTPResponse.error(status: 503, reason: "store_unavailable", message: "Redis does not answer PING")
        case "/metrics":
            return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "text/plain; version=0.0.4")],
                                body: .bytes(Array(await metricsText().utf8)))
        default:
            return HTTPResponse.error(status: 404, reason: "route_not_found", message: "admin endpoints: /healthz /readyz /metrics")
        }
    }

    /// Counters and histograms, then what is read at scrape time: gauges, Redis' answer, build and process.
    private func metricsText() async -> String {
        let runtime = proxy.runtime
        var gauges = [
            (name: "gateway_key_cache_entries", help: "Public keys cached in process.", value: Double(proxy.keyCache.count)),
            (name: "gateway_open_connections", help: "Client connections open on the public listener, idle keep-alive ones included.",
             value: Double(listener.activeConnections)),
            (name: "gateway_in_flight_requests", help: "Requests received and not yet fully answered.",
             value: Double(listener.inFlightRequests)),
            (name: "gateway_store_up", help: "1 when Redis answered PING at this scrape, else 0.",
             value: await runtime.store.ping() ? 1.0 : 0.0),
        ]
        if runtime.apple != nil, let due = try? await runtime.store.dueReceiptCount(now: Date()) {
            gauges.append((name: "gateway_receipt_refresh_backlog", help: "Keys whose receipt refresh is due and not yet taken by a refresher.",
                           value: Double(due)))
        }
        return proxy.metrics.exposition(extra: gauges) + BuildInfo.exposition + ProcessMetrics.exposition
    }

    private func text(_ status: Int, _ body: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: [HTTPField("Content-Type", "text/plain")], body: .bytes(Array(body.utf8)))
    }
}
