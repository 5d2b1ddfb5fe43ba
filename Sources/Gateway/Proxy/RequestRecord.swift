import Foundation
import HTTPServer
import Synchronization

/// What one request did, gathered along its path and written once as the request's log line and
/// metrics when it ends (for a streamed response: when the stream closes).
final class RequestRecord: @unchecked Sendable {
    let requestId: String
    let method: String
    let path: String
    let started = DispatchTime.now().uptimeNanoseconds
    var route = "-"
    var decision = "denied"
    var reason: String?
    /// What a dependency said when it failed (`GatewayError.internalDetail`): for the log only.
    var detail: String?
    var keyId: String?
    /// How an assert-route request proved itself: `assertion`, `token`, `devicecheck`.
    var attestMethod: String?
    var counter: UInt32?
    var riskMetric: Int?
    /// The name of the debug token a `debug` request passed on.
    var debugToken: String?
    var upstreamStatus: Int?
    var status = 0
    var bytesIn = 0
    var bytesOut = 0
    var verifyMs: Double?
    var storeMs: Double?
    var upstreamMs: Double?
    /// How the response ended; nil for requests the server refused before a handler ran.
    var outcome: ExchangeOutcome?
    // Access-log fields (AccessLogFields.swift); the upstream's address from the forwarder.
    var clientIP = ""
    var forwardedFor: String?
    var userAgent: String?
    var traceparent: String?
    var upstreamAddr: String?
    /// "HTTP/1.1", "HTTP/1.0"; with TLS, its version ("TLSv1.3") and what ALPN chose.
    var httpProtocol: String?
    var tlsVersion: String?
    var alpn: String?
    private let finished = Atomic<Bool>(false)

    init(requestId: String, method: String, path: String, bytesIn: Int) {
        self.requestId = requestId
        self.method = method
        self.path = path
        self.bytesIn = bytesIn
    }

    static func milliseconds(since start: UInt64) -> Double {
        Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
    }

    /// Logs and counts the request exactly once.
    func finish(log: EventLog, metrics: Metrics) {
        guard !finished.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let totalMs = RequestRecord.milliseconds(since: started)
        log.request(level: status >= 500 ? .error : .info) { line in
            line.string("request_id", requestId)
            line.string("route", route)
            line.string("method", method)
            line.string("path", path)
            line.string("decision", decision)
            if let reason { line.string("reason", reason) }
            if let detail { line.string("detail", String(detail.prefix(512))) }
            line.int("status", status)
            if let attestMethod { line.string("attest_method", attestMethod) }
            line.string("client_ip", clientIP)
            if let httpProtocol { line.string("protocol", httpProtocol) }
            if let tlsVersion { line.string("tls_version", tlsVersion) }
            if let alpn { line.string("alpn", alpn) }
            if let forwardedFor { line.string("forwarded_for", forwardedFor) }
            if let userAgent { line.string("user_agent", userAgent) }
            if let traceparent { line.string("traceparent", traceparent) }
            if let keyId { line.string("key_id", keyId) }
            if let counter { line.int("counter", Int(counter)) }
            if let riskMetric { line.int("risk_metric", riskMetric) }
            if let debugToken { line.string("debug_token", debugToken) }
            if let upstreamStatus { line.int("upstream_status", upstreamStatus) }
            if let upstreamAddr { line.string("upstream_addr", upstreamAddr) }
            line.int("bytes_in", bytesIn)
            line.int("bytes_out", bytesOut)
            if let outcome { line.string("outcome", outcome.rawValue) }
            line.number("total_ms", totalMs)
            if let verifyMs { line.number("verify_ms", verifyMs) }
            if let storeMs { line.number("store_ms", storeMs) }
            if let upstreamMs { line.number("upstream_ms", upstreamMs) }
        }
        // One lock for all of this request's metrics.
        let series = RequestSeries.of(RequestSeries.Shape(route: route, decision: decision, reason: reason ?? "",
                                                          code: KnownSeries.code(status), attestMethod: attestMethod))
        let storeError = reason.flatMap { reason in
            reason.hasPrefix("store_") ? Metrics.Update.count("gateway_store_errors_total", ["reason": reason], help: MetricHelp.storeErrors) : nil
        }
        metrics.record { batch in
            batch.count(series.requests)
            batch.observe(series.duration, totalMs / 1000)
            if let upstreamMs, upstreamStatus != nil { batch.observe(series.upstream, upstreamMs / 1000) }
            if let attest = series.attest { batch.count(attest) }
            if let storeError { batch.apply(storeError) }
            if let verifyMs { batch.observe(RequestSeries.verify, verifyMs / 1000) }
            if let storeMs { batch.observe(RequestSeries.store, storeMs / 1000) }
        }
    }
}
