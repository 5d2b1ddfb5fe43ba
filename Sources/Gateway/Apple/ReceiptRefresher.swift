import RedisClient
import EventLoop
import AttestStore
import AppleServices
import AssertionCheck
import Foundation
import Synchronization

/// Exchanges stored App Attest receipts with Apple on a schedule (Redis sorted set, leased so several
/// gateways share the work) and stores each fresh receipt and its risk metric with the key record.
final class ReceiptRefresher: Sendable {
    /// How often the schedule is polled; each pass is jittered so gateways do not poll in step.
    static let pollSeconds = 30.0
    /// How long a claimed key stays with this gateway before another may retry it.
    static let leaseSeconds = 600.0

    private let runtime: @Sendable () -> GatewayRuntime
    private let log: EventLog
    private let metrics: Metrics
    private let clock: @Sendable () -> Date
    private let stopped = Atomic<Bool>(false)
    private let wake = DispatchSemaphore(value: 0)

    init(runtime: @escaping @Sendable () -> GatewayRuntime, log: EventLog, metrics: Metrics,
         clock: @escaping @Sendable () -> Date = { Date() }) {
        self.runtime = runtime
        self.log = log
        self.metrics = metrics
        self.clock = clock
    }

    func start() {
        Thread.detachNewThread { [self] in
            while !stopped.load(ordering: .relaxed) {
                // A full batch means more keys are due (a backlog after an outage, or more keys than one
                // pass per poll covers): go on at once until a pass comes back short.
                if let batch = batchSize(runtime()), runOnce() >= batch { continue }
                _ = wake.wait(timeout: .now() + ReceiptRefresher.pollSeconds * Double.random(in: 0.8...1.2))
            }
        }
    }

    /// Keys claimed per pass: enough to keep every exchange slot busy for a while.
    private func batchSize(_ runtime: GatewayRuntime) -> Int? {
        runtime.apple.map { $0.config.receiptRefreshConcurrency * 8 }
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        wake.signal()
    }

    /// One pass over the keys due now, at most `receipt_refresh_concurrency` exchanges at once.
    /// Answers how many keys it handled.
    @discardableResult
    func runOnce() -> Int {
        let runtime = self.runtime()
        guard let apple = runtime.apple, let batch = batchSize(runtime) else { return 0 }
        let now = clock()
        let due: [(keyId: [UInt8], environment: AppAttestEnvironment)]
        do {
            due = try runtime.store.claimDueReceipts(now: now, leaseUntil: now.addingTimeInterval(ReceiptRefresher.leaseSeconds),
                                                     limit: batch)
        } catch {
            log.event(.warn, "receipt_refresh_skipped", ["reason": error.reasonCode, "message": error.message])
            return 0
        }
        let slots = DispatchSemaphore(value: apple.config.receiptRefreshConcurrency)
        let group = DispatchGroup()
        for entry in due {
            slots.wait()
            group.enter()
            DispatchQueue.global().async { [self] in
                refresh(entry.keyId, entry.environment, runtime: runtime, apple: apple, now: now)
                slots.signal()
                group.leave()
            }
        }
        group.wait()
        return due.count
    }

    private func refresh(_ keyId: [UInt8], _ environment: AppAttestEnvironment, runtime: GatewayRuntime, apple: AppleRuntime, now: Date) {
        let store = runtime.store
        let outcome: String
        var fields: [String: Any] = ["key_id": Base64.encode(keyId), "environment": environment.rawValue]
        var next: Date? = now.addingTimeInterval(Double(apple.config.receiptRefreshSeconds))
        do {
            guard let record = try store.loadKey(keyId: keyId, environment: environment), !record.revoked,
                  let appID = AppID(record.appID) else {
                try store.unscheduleReceiptRefresh(keyId: keyId, environment: environment)
                return
            }
            switch try apple.receipts(for: environment).exchange(receipt: record.receipt) {
            case .refreshed(let receipt):
                let verified = try ReceiptVerifier.verify(receipt: receipt, appID: appID,
                                                          publicKey: try P256PublicKey(bytes: record.publicKeySPKI), at: now)
                _ = try store.storeReceipt(keyId: keyId, environment: environment, receipt: receipt, riskMetric: verified.riskMetric, at: now)
                fields["risk_metric"] = verified.riskMetric ?? NSNull()
                outcome = "refreshed"
            case .tooEarly:
                next = now.addingTimeInterval(3600)
                outcome = "too_early"
            case .noData:
                next = nil
                outcome = "no_data"
            }
        } catch let error as AppleServiceError {
            // Apple refusing the receipt itself (400) will not change: stop; anything else is retried.
            if case .rejectedToken = error { next = nil } else { next = now.addingTimeInterval(900) }
            outcome = error.reasonCode
        } catch let error as VerificationError {
            outcome = error.reasonCode
        } catch let error as StoreError {
            next = now.addingTimeInterval(900)
            outcome = error.reasonCode
        } catch {
            outcome = "receipt_refresh_failed"
        }
        fields["outcome"] = outcome
        do {
            if let next {
                try store.scheduleReceiptRefresh(keyId: keyId, environment: environment, at: next)
            } else {
                try store.unscheduleReceiptRefresh(keyId: keyId, environment: environment)
            }
        } catch {
            fields["schedule_error"] = error.reasonCode
        }
        log.event(outcome == "refreshed" || outcome == "too_early" ? .info : .warn, "receipt_refresh", fields)
        var updates = [Metrics.Update.count("gateway_receipt_refreshes_total", ["outcome": outcome], help: MetricHelp.receiptRefreshes)]
        if let risk = fields["risk_metric"] as? Int {
            updates.append(.observe("gateway_receipt_risk_metric", [:], value: Double(risk), buckets: MetricHelp.riskMetricBuckets,
                                    help: MetricHelp.riskMetric))
        }
        metrics.apply(updates)
    }
}
