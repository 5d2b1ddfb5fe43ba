import AssertionCheck
import Foundation
import GoogleServices

/// Google's Play Integrity API built from `play_integrity.service_account_file` and `api_url`: the standard
/// path of `/play-integrity/token`. Every attempt is logged (`google_call`) and counted, never with the key,
/// the assertion, the access token or the integrity token.
final class GoogleRuntime: Sendable {
    /// What the client was built from: a reload that changes none of it keeps the client and its cached access token.
    struct Identity: Equatable {
        let file: String
        let clientEmail: String
        let privateKeyID: String
        let tokenURI: String
        let apiURL: String
    }

    let identity: Identity
    private let api: PlayIntegrityAPI

    /// Google answers a decode in well under a second: 3 attempts of at most 3 s each (plus about 0.75 s of
    /// pauses) keep a client's wait near 10 s when Google hangs (a token exchange, once an hour, adds as much).
    static let options = (connectTimeoutMs: 2000, timeoutMs: 3000)
    /// What a client refused with `integrity_unavailable` is told to wait.
    static let retryAfterSeconds = 5

    private init(identity: Identity, account: GoogleServiceAccount, log: EventLog, metrics: Metrics) throws(GoogleServiceError) {
        self.identity = identity
        api = try PlayIntegrityAPI(serviceAccount: account, apiURL: identity.apiURL,
                                   options: GoogleServiceOptions(connectTimeoutMs: Self.options.connectTimeoutMs, timeoutMs: Self.options.timeoutMs,
                                                                 observer: Self.observer(log: log, metrics: metrics)))
    }

    static func build(_ config: GatewayConfig, previous: GoogleRuntime?, log: EventLog, metrics: Metrics) throws -> GoogleRuntime? {
        guard let play = config.playIntegrity, let file = play.serviceAccountFile, let account = play.serviceAccount else { return nil }
        let identity = Identity(file: file, clientEmail: account.clientEmail, privateKeyID: account.privateKeyID, tokenURI: account.tokenURI,
                                apiURL: play.apiURL)
        if let previous, previous.identity == identity { return previous }
        return try GoogleRuntime(identity: identity, account: account, log: log, metrics: metrics)
    }

    /// The verdict JSON (`tokenPayloadExternal`) Google decoded from `token`. Google's 400 refuses the token
    /// (401 `integrity_token_rejected`); anything else that is not a verdict fails closed, 503 `integrity_unavailable`.
    func decode(packageName: String, token: String) async throws(GatewayError) -> [UInt8] {
        do {
            do {
                return try await api.decodeIntegrityToken(packageName: packageName, token: token)
            } catch .credentialsRefused {
                // Google's 401 drops the cached access token (revoked, or a Google that forgot it): the second
                // call exchanges a fresh one. A refused service account is refused again, and that is final.
                return try await api.decodeIntegrityToken(packageName: packageName, token: token)
            }
        } catch {
            switch error {
            case .tokenRejected(let detail): throw .integrity(IntegrityError(.tokenRejected, "Google refused the integrity token: \(detail)"))
            case .unavailable, .credentialsRefused, .badResponse, .invalidConfiguration: throw .integrityUnavailable(error.description)
            }
        }
    }

    private static func observer(log: EventLog, metrics: Metrics) -> GoogleCallObserver {
        { call in
            let endpoint = call.endpoint.rawValue
            log.event(call.outcome == "ok" ? .info : .warn, "google_call", [
                "endpoint": endpoint, "status": call.status ?? 0, "attempt": call.attempt, "outcome": call.outcome,
                "latency_ms": (call.latency * 1_000_000).rounded() / 1000, "will_retry": call.willRetry,
            ])
            metrics.increment("gateway_google_calls_total", ["endpoint": endpoint, "outcome": call.outcome], help: MetricHelp.googleCalls)
            metrics.observe("gateway_google_call_duration_seconds", ["endpoint": endpoint], seconds: call.latency, help: MetricHelp.googleDuration)
        }
    }
}
