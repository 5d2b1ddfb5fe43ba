import Foundation
import Synchronization
import Upstream

/// The admin listener: /healthz (process up), /readyz (Redis reachable), /metrics (Prometheus text).
/// Kept off the public port so probes and scrapes never compete with, or leak to, API clients.
final class AdminHandler: HTTPHandler, @unchecked Sendable {
    private let proxy: ProxyHandler
    /// Set when SIGTERM starts the drain: /readyz then says 503 so load balancers stop sending.
    let draining = Atomic<Bool>(false)

    init(proxy: ProxyHandler) {
        self.proxy = proxy
    }

    func handle(_ request: HTTPRequest) -> HTTPResponse {
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
            return proxy.runtime.store.ping() ? text(200, "ready\n") : HTTPResponse.error(status: 503, reason: "store_unavailable", message: "Redis does not answer PING")
        case "/metrics":
            let gauges = [(name: "gateway_key_cache_entries", help: "Public keys cached in process.", value: Double(proxy.keyCache.count))]
            return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "text/plain; version=0.0.4")],
                                body: .bytes(Array(proxy.metrics.exposition(extra: gauges).utf8)))
        default:
            return HTTPResponse.error(status: 404, reason: "route_not_found", message: "admin endpoints: /healthz /readyz /metrics")
        }
    }

    private func text(_ status: Int, _ body: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: [HTTPField("Content-Type", "text/plain")], body: .bytes(Array(body.utf8)))
    }
}
