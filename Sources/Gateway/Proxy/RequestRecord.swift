import Foundation
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
    var keyId: String?
    var counter: UInt32?
    var riskMetric: Int?
    var upstreamStatus: Int?
    var status = 0
    var bytesIn = 0
    var bytesOut = 0
    var verifyMs: Double?
    var storeMs: Double?
    var upstreamMs: Double?
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
        var fields: [String: Any] = [
            "request_id": requestId, "route": route, "method": method, "path": path, "decision": decision,
            "status": status, "bytes_in": bytesIn, "bytes_out": bytesOut, "total_ms": RequestRecord.round(totalMs),
        ]
        if let reason { fields["reason"] = reason }
        if let keyId { fields["key_id"] = String(keyId.prefix(12)) }
        if let counter { fields["counter"] = counter }
        if let riskMetric { fields["risk_metric"] = riskMetric }
        if let upstreamStatus { fields["upstream_status"] = upstreamStatus }
        if let verifyMs { fields["verify_ms"] = RequestRecord.round(verifyMs) }
        if let storeMs { fields["store_ms"] = RequestRecord.round(storeMs) }
        if let upstreamMs { fields["upstream_ms"] = RequestRecord.round(upstreamMs) }
        log.request(fields)
        metrics.increment("gateway_requests_total", ["route": route, "decision": decision, "reason": reason ?? ""],
                          help: "Requests by route, decision and reason code.")
        metrics.observe("gateway_request_duration_seconds", ["route": route], seconds: totalMs / 1000,
                        help: "Time from request received to response finished.")
        if let upstreamMs, upstreamStatus != nil {
            metrics.observe("gateway_upstream_duration_seconds", ["route": route], seconds: upstreamMs / 1000,
                            help: "Time from forwarding to the last upstream byte relayed.")
        }
        if let reason, reason.hasPrefix("store_") {
            metrics.increment("gateway_store_errors_total", ["reason": reason], help: "Requests that failed on the Redis state store.")
        }
        if let verifyMs {
            metrics.observe("gateway_verify_duration_seconds", seconds: verifyMs / 1000, help: "Assertion verification time (pure checks and signature).")
        }
    }

    private static func round(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
}
