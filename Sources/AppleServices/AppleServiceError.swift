/// Why a call to Apple failed. `reasonCode` is stable (logs, error bodies, metrics); the text explains it
/// for humans, never quotes the key or the JWT, and may change.
public enum AppleServiceError: Error, Equatable, Sendable, CustomStringConvertible {
    /// HTTP 429 or 5xx, or no HTTP answer at all (refused, reset, closed), after the allowed retries.
    case unavailable(String)
    /// HTTP 400: Apple refused the device token or receipt, or the payload (not retried).
    case rejectedToken(String)
    /// HTTP 401: Apple refused the JWT (wrong key id, team id or key; not retried).
    case authFailed(String)
    /// The connect or total timeout elapsed on the last attempt.
    case timeout(String)
    /// An answer that is not one of the documented ones (status, body, size).
    case badResponse(String)
    /// The credentials, base URL or options cannot be used; nothing was sent.
    case invalidConfiguration(String)

    public var reasonCode: String {
        switch self {
        case .unavailable: "apple_unavailable"
        case .rejectedToken: "apple_rejected_token"
        case .authFailed: "apple_auth_failed"
        case .timeout: "apple_timeout"
        case .badResponse: "apple_bad_response"
        case .invalidConfiguration: "apple_invalid_configuration"
        }
    }

    public var description: String {
        switch self {
        case .unavailable(let detail), .rejectedToken(let detail), .authFailed(let detail), .timeout(let detail),
             .badResponse(let detail), .invalidConfiguration(let detail):
            "\(reasonCode): \(detail)"
        }
    }
}
