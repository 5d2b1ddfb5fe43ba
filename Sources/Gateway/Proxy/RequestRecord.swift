import Foundation
import HTTPServer
import Synchronization

/// What one request did, gathered along its path and written once as the request's log line and
/// metrics when it ends (for a streamed response: when the stream closes).
final class RequestRecord: @unchecked Sendable {
    let requestId: String
    let method: String
    let path: String
    let started = RequestRecord.uptimeNanoseconds()
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

    /// Milliseconds since `start`, a reading of `uptimeNanoseconds()` or `DispatchTime.now().uptimeNanoseconds`.
    static func milliseconds(since start: UInt64) -> Double {
        Double(uptimeNanoseconds() - start) / 1e6
    }

    /// `DispatchTime.now().uptimeNanoseconds` read straight from its clock: on Linux libdispatch reads
    /// CLOCK_MONOTONIC (in nanoseconds on x86-64 and arm64 alike), but through dispatch_time's conversions,
    /// ~65 instructions a reading where this is ~15, and a request reads it several times.
    static func uptimeNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    /// Logs and counts the request exactly once.
    func finish(log: EventLog, metrics: Metrics) {
        guard !finished.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let totalMs = RequestRecord.milliseconds(since: started)
        log.request(level: status >= 500 ? .error : .info, LogFields(record: self, totalMs: totalMs))
        // One lock for all of this request's metrics.
        let series = RequestSeries.of(route: route, decision: decision, reason: reason ?? "", code: KnownSeries.code(status),
                                      attestMethod: attestMethod)
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

    /// The request's log line after time, level and event.
    private struct LogFields: JSONFields {
        let record: RequestRecord
        let totalMs: Double
        /// Cut once here: the line is written twice (measured, then written).
        let detail: String?

        init(record: RequestRecord, totalMs: Double) {
            (self.record, self.totalMs, detail) = (record, totalMs, record.detail.map { String($0.prefix(512)) })
        }

        func write<Line: JSONLineWriter & ~Copyable & ~Escapable>(to line: inout Line) {
            line.string("request_id", record.requestId)
            line.string("route", record.route)
            line.string("method", record.method)
            line.string("path", record.path)
            line.string("decision", record.decision)
            if let reason = record.reason { line.string("reason", reason) }
            if let detail { line.string("detail", detail) }
            line.int("status", record.status)
            if let attestMethod = record.attestMethod { line.string("attest_method", attestMethod) }
            line.string("client_ip", record.clientIP)
            if let httpProtocol = record.httpProtocol { line.string("protocol", httpProtocol) }
            if let tlsVersion = record.tlsVersion { line.string("tls_version", tlsVersion) }
            if let alpn = record.alpn { line.string("alpn", alpn) }
            if let forwardedFor = record.forwardedFor { line.string("forwarded_for", forwardedFor) }
            if let userAgent = record.userAgent { line.string("user_agent", userAgent) }
            if let traceparent = record.traceparent { line.string("traceparent", traceparent) }
            if let keyId = record.keyId { line.string("key_id", keyId) }
            if let counter = record.counter { line.int("counter", Int(counter)) }
            if let riskMetric = record.riskMetric { line.int("risk_metric", riskMetric) }
            if let debugToken = record.debugToken { line.string("debug_token", debugToken) }
            if let upstreamStatus = record.upstreamStatus { line.int("upstream_status", upstreamStatus) }
            if let upstreamAddr = record.upstreamAddr { line.string("upstream_addr", upstreamAddr) }
            line.int("bytes_in", record.bytesIn)
            line.int("bytes_out", record.bytesOut)
            if let outcome = record.outcome { line.string("outcome", outcome.rawValue) }
            line.number("total_ms", totalMs)
            if let verifyMs = record.verifyMs { line.number("verify_ms", verifyMs) }
            if let storeMs = record.storeMs { line.number("store_ms", storeMs) }
            if let upstreamMs = record.upstreamMs { line.number("upstream_ms", upstreamMs) }
        }
    }
}
