import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The gateway's own refusal: its `X-Attest-Error` reason code, the JSON body's message and the request id
/// to quote in bug reports (the gateway logs the request under it).
public struct GatewayRejection: Sendable, Equatable, CustomStringConvertible {
    public let status: Int
    /// The stable reason code, e.g. `key_revoked` (docs/client.md lists them all).
    public let reason: String
    /// For people; may change between gateway versions.
    public let message: String
    public let requestId: String?
    /// `Retry-After` seconds, sent with `429 rate_limited`.
    public let retryAfterSeconds: Int?

    public init(status: Int, reason: String, message: String, requestId: String? = nil, retryAfterSeconds: Int? = nil) {
        self.status = status
        self.reason = reason
        self.message = message
        self.requestId = requestId
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// The gateway's error when `response` is one (it carries `X-Attest-Error`), nil for the upstream's answers.
    init?(_ response: HTTPURLResponse, body: Data) {
        guard let reason = response.value(forHTTPHeaderField: "X-Attest-Error"), !reason.isEmpty else { return nil }
        let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any]
        self.init(status: response.statusCode, reason: reason, message: object?["message"] as? String ?? "",
                  requestId: response.value(forHTTPHeaderField: "X-Request-Id"),
                  retryAfterSeconds: response.value(forHTTPHeaderField: "Retry-After").flatMap { Int($0) })
    }

    public var description: String { "\(status) \(reason): \(message)" + (requestId.map { " (request \($0))" } ?? "") }
}

/// Everything `AttestClient` throws, by what the app should do about it. The gateway's refusals are
/// thrown only after the client's own recovery (fresh challenge, new key, back-off) ran out.
public enum AttestClientError: Error, Sendable, Equatable {
    /// This device can prove nothing: no App Attest, no DeviceCheck token, no debug token, and the route
    /// needs one (`401 assertion_missing`). Use another check, or a `mode: report` route.
    case unsupported
    /// The request cannot be signed as given (no URL, a body in `httpBodyStream`).
    case invalidRequest(String)
    /// App Attest or DeviceCheck failed on the device for a reason retrying does not fix.
    case deviceFailure(String)
    /// `key_revoked` even for a freshly registered key: do not retry; report it.
    case keyRevoked(GatewayRejection)
    /// `rate_limited`: wait `retryAfterSeconds`, then try again.
    case rateLimited(GatewayRejection)
    /// The device itself is refused: `device_flagged`, `risk_too_high`, or a DeviceCheck token Apple refused
    /// (`device_token_invalid`, `device_token_reused`) twice.
    case deviceRefused(GatewayRejection)
    /// A once-per-device action: `already_claimed`, or `claim_in_progress` while an earlier claim runs.
    case alreadyClaimed(GatewayRejection)
    /// The gateway did not accept this app's key (`environment_mismatch`, `app_id_mismatch`, a failed Apple
    /// check): a configuration problem between the build and the gateway. Do not retry in a loop.
    case registrationRefused(GatewayRejection)
    /// `debug_token_invalid` (not in the gateway's `debug_tokens`) or `debug_token_refused` (`allow_debug: false`).
    case debugTokenRefused(GatewayRejection)
    /// The gateway or what is behind it is down (`503` after back-off, `502`, `504`): retry later.
    case unavailable(GatewayRejection)
    /// The route says no: `route_denied`, `route_not_found`, `method_not_allowed`, `body_too_large`.
    case routeRefused(GatewayRejection)
    /// Any other refusal: a bug in the client or a configuration mismatch. Report `requestId`.
    case rejected(GatewayRejection)
    /// A gateway endpoint answered something that is not the gateway's protocol (a proxy's error page?).
    case unexpectedResponse(status: Int)

    /// The case for a gateway refusal of a signed request (`registering`: of `POST /attest/verify`).
    public static func gateway(_ rejection: GatewayRejection, registering: Bool = false) -> AttestClientError {
        switch rejection.reason {
        case "assertion_missing": return .unsupported
        case "key_revoked": return .keyRevoked(rejection)
        case "rate_limited": return .rateLimited(rejection)
        case "device_flagged", "risk_too_high", "device_token_invalid", "device_token_reused": return .deviceRefused(rejection)
        case "already_claimed", "claim_in_progress": return .alreadyClaimed(rejection)
        case "debug_token_invalid", "debug_token_refused": return .debugTokenRefused(rejection)
        case "route_denied", "route_not_found", "method_not_allowed", "body_too_large": return .routeRefused(rejection)
        default: break
        }
        if [502, 503, 504].contains(rejection.status) { return .unavailable(rejection) }
        if registering, rejection.status == 401 || rejection.status == 409 { return .registrationRefused(rejection) }
        return .rejected(rejection)
    }

    /// The gateway's refusal behind this error, if it is one.
    public var rejection: GatewayRejection? {
        switch self {
        case .keyRevoked(let rejection), .rateLimited(let rejection), .deviceRefused(let rejection), .alreadyClaimed(let rejection),
             .registrationRefused(let rejection), .debugTokenRefused(let rejection), .unavailable(let rejection),
             .routeRefused(let rejection), .rejected(let rejection):
            return rejection
        case .unsupported, .invalidRequest, .deviceFailure, .unexpectedResponse:
            return nil
        }
    }
}
