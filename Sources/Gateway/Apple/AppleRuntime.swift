import AppleServices
import AssertionCheck
import Foundation

/// The clients for Apple's server APIs built from `apple:`; every call Apple answers (or not) is logged
/// and counted, never with the token, the key or the device token.
final class AppleRuntime: Sendable {
    let config: AppleConfig
    let deviceCheck: DeviceCheckClient
    /// Receipts only work against their own environment's host.
    private let receiptClients: [AppAttestEnvironment: ReceiptRefreshClient]

    init(config: AppleConfig, log: EventLog, metrics: Metrics) throws(AppleServiceError) {
        self.config = config
        let jwt = try AppleJWT(credentials: AppleCredentials(teamID: config.teamID, keyID: config.keyID,
                                                             privateKeyFile: config.privateKeyPath))
        let options = AppleServiceOptions(connectTimeoutMs: min(config.timeoutMs, 3000), timeoutMs: config.timeoutMs,
                                          observer: AppleRuntime.observer(log: log, metrics: metrics))
        deviceCheck = try DeviceCheckClient(baseURL: config.deviceCheckURL, jwt: jwt, options: options)
        var clients: [AppAttestEnvironment: ReceiptRefreshClient] = [:]
        for environment in AppAttestEnvironment.allCases {
            clients[environment] = try ReceiptRefreshClient(baseURL: config.attestDataURL ?? AppleServiceBase.appAttestData(environment),
                                                            jwt: jwt, options: options)
        }
        receiptClients = clients
    }

    func receipts(for environment: AppAttestEnvironment) -> ReceiptRefreshClient {
        receiptClients[environment]!
    }

    private static func observer(log: EventLog, metrics: Metrics) -> AppleCallObserver {
        { call in
            let endpoint = call.endpoint.rawValue
            log.event(call.outcome == "ok" ? .info : .warn, "apple_call", [
                "endpoint": endpoint, "status": call.status ?? 0, "attempt": call.attempt, "outcome": call.outcome,
                "latency_ms": (call.latency * 1_000_000).rounded() / 1000, "will_retry": call.willRetry,
            ])
            metrics.increment("gateway_apple_calls_total", ["endpoint": endpoint, "outcome": call.outcome],
                              help: "Calls to Apple's DeviceCheck and App Attest servers, by outcome.")
            metrics.observe("gateway_apple_call_duration_seconds", ["endpoint": endpoint], seconds: call.latency,
                            help: "Latency of each attempt at an Apple server call.")
        }
    }
}
