/// Why a call to Google failed. `reasonCode` is stable (logs, error bodies, metrics); the text explains it for
/// humans, never quotes the private key, the assertion, an access token or the integrity token, and may change.
/// Only `tokenRejected` says anything about the app's integrity token: every other case means the verdict is
/// unknown, so a caller fails closed and may try again later.
public enum GoogleServiceError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No usable answer in time: refused, reset or timed-out connections, HTTP 429 or 5xx, after the allowed
    /// retries; or a wait for another caller's access-token exchange that outlasted its bound.
    case unavailable(String)
    /// Google refused the service account: the token endpoint's 400/401/403, or 401/403 from the Play Integrity
    /// API (wrong or deleted key, API not enabled, project not linked to the app in the Play Console).
    case credentialsRefused(String)
    /// HTTP 400 from decodeIntegrityToken: the integrity token is malformed, expired or not for this app; or a
    /// token this client would not send (empty, oversized, not printable ASCII).
    case tokenRejected(String)
    /// An answer that is not one of the documented ones (status, JSON shape, size).
    case badResponse(String)
    /// The service-account file, a URL, a package name or the options cannot be used; nothing was sent.
    case invalidConfiguration(String)

    public var reasonCode: String {
        switch self {
        case .unavailable: "google_unavailable"
        case .credentialsRefused: "google_credentials_refused"
        case .tokenRejected: "google_token_rejected"
        case .badResponse: "google_bad_response"
        case .invalidConfiguration: "google_invalid_configuration"
        }
    }

    public var description: String {
        switch self {
        case .unavailable(let detail), .credentialsRefused(let detail), .tokenRejected(let detail), .badResponse(let detail),
             .invalidConfiguration(let detail):
            "\(reasonCode): \(detail)"
        }
    }
}
