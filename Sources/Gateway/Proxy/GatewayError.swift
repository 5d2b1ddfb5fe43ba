import RedisClient
import EventLoop
import AttestStore
import AppleServices
import AssertionCheck
import HTTPServer
import Upstream

/// Every way a request can end early. The one place where a reason becomes an HTTP status: the error
/// body, the log line's `reason` and the metric label all derive from `reasonCode`.
public enum GatewayError: Error, Equatable {
    case verification(VerificationError)
    case assertionMissing(String)
    case badHeader(String)
    case badRequest(String)
    case badPath
    case bodyTooLarge(limit: Int)
    /// The request body could not be read: too large, too slow, malformed, the client left, or the
    /// process-wide body budget is spent.
    case body(BodyReadError)
    /// Not a challenge this gateway issued (malformed, wrong MAC, or issued for another key id).
    case challengeInvalid
    case challengeExpired
    /// An attestation challenge presented with an assertion, or the other way round.
    case challengeWrongKind
    case challengeReused
    case challengeRateLimited(retryAfterSeconds: Int)
    case keyUnknown
    /// Without `X-App-Attest-Key-Id`: none of the keys that can have made the signature is registered — a
    /// wrong signature or an unregistered key, which only the key id can tell apart.
    case noMatchingKey
    case keyRevoked
    case keyAlreadyRegistered
    case routeNotFound
    case methodNotAllowed(allowed: [String])
    case routeDenied
    case storeUnavailable(String)
    case storeError(String)
    case upstreamUnavailable(String)
    /// The TLS handshake with an https upstream failed (its certificate, the name, a client certificate).
    case upstreamTLSFailed(String)
    case upstreamTimeout(String)
    case upstreamProtocolError(String)
    case deviceTokenMissing
    case deviceTokenInvalid(String)
    case deviceTokenReused
    case deviceFlagged(String)
    case alreadyClaimed
    case claimInProgress
    case rateLimited(retryAfterSeconds: Int)
    case riskTooHigh(metric: Int, limit: Int)
    case appleUnavailable(String)
    case appleMisconfigured(String)
    case tokenExpired
    case tokenInvalid(String)
    case tokenRevoked
    case tokenReused
    case tokenSigningFailed(String)
    case debugTokenInvalid
    case debugTokenRefused
    /// A Play Integrity token or verdict refused at /play-integrity/token.
    case integrity(IntegrityError)
    /// Google's Play Integrity API could not decode a token (down, overloaded, refusing the service account).
    case integrityUnavailable(String)
    /// A valid gateway token earned by a method the route's `token_methods` does not list.
    case tokenMethodRefused(String)

    public var reasonCode: String {
        switch self {
        case .verification(let error): return error.reasonCode
        case .assertionMissing: return "assertion_missing"
        case .badHeader: return "bad_header"
        case .badRequest: return "bad_request"
        case .badPath: return "bad_path"
        case .bodyTooLarge: return "body_too_large"
        case .body(let error): return error.reasonCode
        case .challengeInvalid: return "challenge_invalid"
        case .challengeExpired: return "challenge_expired"
        case .challengeWrongKind: return "challenge_wrong_kind"
        case .challengeReused: return "challenge_reused"
        case .challengeRateLimited: return "challenge_rate_limited"
        case .keyUnknown: return "key_unknown"
        case .noMatchingKey: return "no_matching_key"
        case .keyRevoked: return "key_revoked"
        case .keyAlreadyRegistered: return "key_already_registered"
        case .routeNotFound: return "route_not_found"
        case .methodNotAllowed: return "method_not_allowed"
        case .routeDenied: return "route_denied"
        case .storeUnavailable: return "store_unavailable"
        case .storeError: return "store_error"
        case .upstreamUnavailable: return "upstream_unavailable"
        case .upstreamTLSFailed: return "upstream_tls_failed"
        case .upstreamTimeout: return "upstream_timeout"
        case .upstreamProtocolError: return "upstream_protocol_error"
        case .deviceTokenMissing: return "device_token_missing"
        case .deviceTokenInvalid: return "device_token_invalid"
        case .deviceTokenReused: return "device_token_reused"
        case .deviceFlagged: return "device_flagged"
        case .alreadyClaimed: return "already_claimed"
        case .claimInProgress: return "claim_in_progress"
        case .rateLimited: return "rate_limited"
        case .riskTooHigh: return "risk_too_high"
        case .appleUnavailable: return "apple_unavailable"
        case .appleMisconfigured: return "apple_misconfigured"
        case .tokenExpired: return "token_expired"
        case .tokenInvalid: return "token_invalid"
        case .tokenRevoked: return "token_revoked"
        case .tokenReused: return "token_reused"
        case .tokenSigningFailed: return "token_signing_failed"
        case .debugTokenInvalid: return "debug_token_invalid"
        case .debugTokenRefused: return "debug_token_refused"
        case .integrity(let error): return error.reasonCode
        case .tokenMethodRefused: return "token_method_refused"
        case .integrityUnavailable: return "integrity_unavailable"
        }
    }

    public var status: Int {
        switch self {
        case .verification(let error): return GatewayError.status(for: error.reason)
        case .assertionMissing, .keyUnknown, .noMatchingKey: return 401
        case .badHeader, .badRequest, .badPath: return 400
        case .bodyTooLarge: return 413
        case .body(let error): return error.status
        case .challengeInvalid, .challengeExpired, .challengeWrongKind, .challengeReused, .keyAlreadyRegistered: return 409
        case .keyRevoked, .routeDenied: return 403
        case .routeNotFound: return 404
        case .methodNotAllowed: return 405
        case .storeUnavailable, .storeError: return 503
        case .upstreamUnavailable, .upstreamTLSFailed, .upstreamProtocolError: return 502
        case .upstreamTimeout: return 504
        case .deviceTokenMissing, .deviceTokenInvalid: return 401
        case .deviceTokenReused, .alreadyClaimed, .claimInProgress: return 409
        case .rateLimited, .challengeRateLimited: return 429
        case .deviceFlagged, .riskTooHigh: return 403
        case .appleUnavailable, .appleMisconfigured: return 503
        case .tokenExpired, .tokenInvalid: return 401
        case .tokenRevoked: return 403
        case .tokenReused: return 409
        case .tokenSigningFailed: return 503
        case .debugTokenInvalid: return 401
        case .debugTokenRefused: return 403
        case .integrity(let error): return error.status
        case .tokenMethodRefused: return 403
        case .integrityUnavailable: return 503
        }
    }

    public var message: String {
        switch self {
        case .verification(let error): return error.message
        case .assertionMissing(let detail), .badHeader(let detail), .badRequest(let detail): return detail
        case .badPath: return "the request path is malformed (bad percent escape, encoded slash, dot segment, a segment ending in a dot or space, or \";\")"
        case .bodyTooLarge(let limit): return "the request body exceeds \(limit) bytes"
        case .body(let error): return error.message
        case .challengeInvalid: return "the challenge was not issued by this gateway, or was issued for another key id; fetch a new one"
        case .challengeExpired: return "the challenge has expired; fetch a new one"
        case .challengeWrongKind: return "an attestation challenge was used for an assertion, or the other way round; fetch one from the right endpoint"
        case .challengeReused: return "the challenge was already used; fetch a new one for every request"
        case .challengeRateLimited(let seconds): return "too many challenges for this client address; retry in \(seconds) s"
        case .keyUnknown: return "the key id is not registered; attest the key first"
        case .noMatchingKey:
            return "no registered key matches this signature (a wrong signature, or an unregistered key): send X-App-Attest-Key-Id to tell which"
        case .keyRevoked: return "the key has been revoked"
        case .keyAlreadyRegistered: return "this key id is already registered; generate a new key to attest again"
        case .routeNotFound: return "no route matches this path"
        case .methodNotAllowed(let allowed): return "this route accepts \(allowed.joined(separator: ", "))"
        case .routeDenied: return "this route is closed"
        case .storeUnavailable: return "the state store is unavailable" + Self.seeLog
        case .storeError: return "the state store answered unexpectedly" + Self.seeLog
        case .upstreamUnavailable: return "the upstream is unavailable" + Self.seeLog
        case .upstreamTLSFailed: return "the TLS handshake with the upstream failed" + Self.seeLog
        case .upstreamTimeout: return "the upstream did not answer in time" + Self.seeLog
        case .upstreamProtocolError: return "the upstream answered with a malformed response" + Self.seeLog
        case .deviceTokenMissing: return "this route needs an X-Apple-Device-Token header (DCDevice.generateToken, base64)"
        case .deviceTokenInvalid(let detail): return "Apple did not accept the device token: \(detail)"
        case .deviceTokenReused: return "this device token was already used; generate a new one"
        case .deviceFlagged(let bits): return "the device is flagged (\(bits))"
        case .alreadyClaimed: return "this device has already done this once"
        case .claimInProgress: return "this app's previous request for this once-per-device action is still running"
        case .rateLimited(let seconds): return "this app key made too many requests on this route; retry in \(seconds) s"
        case .riskTooHigh(let metric, let limit): return "the key's risk metric \(metric) is above this route's limit \(limit)"
        case .appleUnavailable: return "Apple's DeviceCheck service cannot be reached" + Self.seeLog
        case .appleMisconfigured: return "the gateway's Apple credentials were refused" + Self.seeLog
        case .tokenExpired: return "the token has expired; mint a new one at /assert/token"
        case .tokenInvalid(let detail): return "the token is not valid: \(detail)"
        case .tokenRevoked: return "the key this token was minted for has been revoked"
        case .tokenReused: return "this route accepts a token once and this one was already used; mint a new one"
        case .tokenSigningFailed: return "the gateway could not sign a token" + Self.seeLog
        case .debugTokenInvalid: return "the debug token is not one of this gateway's app_attest.debug_tokens"
        case .debugTokenRefused: return "this route does not accept debug tokens (allow_debug: false)"
        case .integrity(let error): return error.message
        case .tokenMethodRefused(let detail): return detail
        case .integrityUnavailable: return "Google's Play Integrity API cannot decode the token now; retry later" + Self.seeLog
        }
    }

    private static let seeLog = "; the gateway's log line for this request (X-Request-Id) has the detail"

    /// What failed inside the gateway's own dependencies (Redis, the upstream, Apple, the token key) as the
    /// gateway saw it: addresses, Redis', curl's or Apple's words. Logged as `detail`, never sent: a client
    /// learns which part failed, not the deployment behind it.
    public var internalDetail: String? {
        switch self {
        case .storeUnavailable(let detail), .storeError(let detail), .upstreamUnavailable(let detail), .upstreamTimeout(let detail),
             .upstreamTLSFailed(let detail), .upstreamProtocolError(let detail), .appleUnavailable(let detail),
             .appleMisconfigured(let detail), .tokenSigningFailed(let detail), .integrityUnavailable(let detail):
            return detail
        default:
            return nil
        }
    }

    /// The `Retry-After` of a 429, or of a 503 that will pass.
    var retryAfterSeconds: Int? {
        switch self {
        case .rateLimited(let seconds), .challengeRateLimited(let seconds): return seconds
        case .integrityUnavailable: return GoogleRuntime.retryAfterSeconds
        default: return nil
        }
    }

    /// Malformed input is 400; a well-formed object that fails a check is 401; replays are 409.
    private static func status(for reason: VerificationError.Reason) -> Int {
        switch reason {
        case .badBase64, .badCBOR, .badFormat, .badAssertion, .clientDataInvalid, .badPublicKey: return 400
        case .counterNotIncreasing: return 409
        default: return 401
        }
    }
}

extension GatewayError {
    init(_ error: AppleServiceError) {
        switch error {
        case .rejectedToken(let detail): self = .deviceTokenInvalid(detail)
        case .authFailed(let detail), .invalidConfiguration(let detail): self = .appleMisconfigured(detail)
        case .unavailable(let detail), .timeout(let detail), .badResponse(let detail): self = .appleUnavailable(detail)
        }
    }

    init(_ error: StoreError) {
        switch error {
        case .unavailable(let detail): self = .storeUnavailable(detail)
        case .unexpectedReply(let detail), .invalidArgument(let detail): self = .storeError(detail)
        }
    }

    init(_ rejection: CommitRejection) {
        switch rejection {
        case .keyUnknown: self = .keyUnknown
        case .keyRevoked: self = .keyRevoked
        case .challengeReused: self = .challengeReused
        case .counterNotIncreasing:
            self = .verification(VerificationError(.counterNotIncreasing, "the counter is not above the highest one seen for this key (replay?)"))
        }
    }

    init(_ error: UpstreamError) {
        switch error {
        case .timeout(let detail): self = .upstreamTimeout(detail)
        case .unavailable(let detail): self = .upstreamUnavailable(detail)
        case .tlsFailed(let detail): self = .upstreamTLSFailed(detail)
        case .protocolError, .responseTooLarge, .invalidRequest, .invalidTarget: self = .upstreamProtocolError(error.description)
        }
    }
}
