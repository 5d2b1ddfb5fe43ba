/// Why an exchange with the upstream failed. `reasonCode` is stable (logs, error bodies, metrics); the
/// associated text is curl's or our explanation for humans and may change.
public enum UpstreamError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Nothing usable answered: connection refused, name not resolved, reset or closed before a response.
    case unavailable(String)
    /// The TLS handshake with an `https://` upstream failed: its certificate did not verify (untrusted CA,
    /// wrong name, expired), a client certificate was refused or missing, or the TLS files would not load.
    case tlsFailed(String)
    /// The connect timeout or the total timeout elapsed.
    case timeout(String)
    /// The upstream answered with something that is not valid HTTP, or broke off the body.
    case protocolError(String)
    /// The response body is longer than the caller allowed (`UpstreamResponse.readAll(limit:)`).
    case responseTooLarge(limit: Int)
    /// The request cannot be sent as given (bad method, path or header); nothing was sent.
    case invalidRequest(String)
    /// The configured target is not a usable http(s) base URL with positive timeouts.
    case invalidTarget(String)

    public var reasonCode: String {
        switch self {
        case .unavailable: "upstream_unavailable"
        case .tlsFailed: "upstream_tls_failed"
        case .timeout: "upstream_timeout"
        case .protocolError: "upstream_protocol_error"
        case .responseTooLarge: "upstream_response_too_large"
        case .invalidRequest: "upstream_invalid_request"
        case .invalidTarget: "upstream_invalid_target"
        }
    }

    public var description: String {
        switch self {
        case .unavailable(let detail), .tlsFailed(let detail), .timeout(let detail), .protocolError(let detail),
             .invalidRequest(let detail), .invalidTarget(let detail):
            "\(reasonCode): \(detail)"
        case .responseTooLarge(let limit):
            "\(reasonCode): body exceeds \(limit) bytes"
        }
    }
}
