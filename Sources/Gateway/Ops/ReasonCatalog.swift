import RedisClient
import EventLoop
import AttestStore
import AppleServices
import GoogleServices
import AssertionCheck
import Upstream

/// Every reason code of the request path, with where it can occur: the zero-valued series of /metrics
/// are generated from it, so `rate()` and alerts work before the first failure. The `places` switches
/// are exhaustive: a new `GatewayError` case or `VerificationError.Reason` does not compile until it is
/// placed here, and a test checks that `catalogue` holds one sample of every `GatewayError` case.
enum ReasonCatalog {
    /// Where a reason can arise. A route offers the places its configuration enables.
    enum Place: Hashable {
        /// Before a route matched (route "-").
        case unrouted
        /// Any matched route (body over the route's limit).
        case anyRoute
        /// Routes that list `methods`.
        case listedMethods
        case denyRoute
        /// Routes that forward (pass and assert): the upstream exchange.
        case forwarding
        /// The checks of an assert route (thrown inside the assertion decision: report mode forwards them).
        case assertion
        /// `client_data: json` assert routes: the challenge and the request binding.
        case jsonClientData
        case fallback
        case deviceBits
        case oncePerDevice
        case rateLimit
        case riskDeny
        case builtin(BuiltinEndpoints.Endpoint)
    }

    /// One sample of every case (the associated values are placeholders: only code and status matter).
    static let catalogue: [GatewayError] = [
        .assertionMissing(""), .badHeader(""), .badRequest(""), .badPath, .bodyTooLarge(limit: 0), .challengeInvalid,
        .challengeExpired, .challengeWrongKind, .challengeReused, .challengeRateLimited(retryAfterSeconds: 1),
        .keyUnknown, .noMatchingKey, .keyRevoked, .keyAlreadyRegistered, .routeNotFound, .methodNotAllowed(allowed: []), .routeDenied,
        .storeUnavailable(""), .storeError(""), .upstreamUnavailable(""), .upstreamTLSFailed(""), .upstreamTimeout(""),
        .upstreamProtocolError(""),
        .deviceTokenMissing, .deviceTokenInvalid(""), .deviceTokenReused, .deviceFlagged(""), .alreadyClaimed, .claimInProgress,
        .rateLimited(retryAfterSeconds: 1), .riskTooHigh(metric: 0, limit: 0), .appleUnavailable(""), .appleMisconfigured(""),
        .tokenExpired, .tokenInvalid(""), .tokenRevoked, .tokenReused, .tokenSigningFailed(""),
        .body(.timeout), .body(.clientGone), .body(.overloaded), .body(.malformed("")), .body(.badChunk("")), .debugTokenInvalid,
        .debugTokenRefused, .tokenMethodRefused(""), .integrityUnavailable(""),
    ] + VerificationError.Reason.allCases.map { .verification(VerificationError($0, "")) }
        + IntegrityError.Reason.allCases.map { .integrity(IntegrityError($0, "")) }

    /// Answered by the HTTP layer before the handler saw the request (decision `rejected`, route "-").
    static let httpLayer: [(reason: String, status: Int)] = [
        ("bad_request_target", 400), ("ambiguous_framing", 400), ("unsupported_transfer_encoding", 501), ("body_too_large", 413),
        ("bad_request", 400), ("bad_request_line", 400), ("bad_header", 400), ("obs_fold", 400), ("bare_lf", 400),
        ("duplicate_host", 400), ("missing_host", 400), ("bad_host", 400), ("unsupported_http_version", 400), ("method_not_allowed", 405),
        ("headers_too_large", 431), ("uri_too_long", 414), ("header_timeout", 408), ("connection_limit", 503), ("per_ip_connection_limit", 503),
    ]

    /// Reasons of a failed upstream exchange (`gateway_upstream_errors_total`); invalid_target is caught by validation.
    static let upstreamReasons: [String] = [
        UpstreamError.unavailable(""), .tlsFailed(""), .timeout(""), .protocolError(""), .responseTooLarge(limit: 0), .invalidRequest(""),
    ].map(\.reasonCode)

    static let storeReasons = [StoreError.unavailable(""), .unexpectedReply("")].map(\.reasonCode)

    /// Outcomes of a call to Apple that was sent (invalid_configuration fails before sending).
    static let appleOutcomes = ["ok"] + [AppleServiceError.unavailable(""), .rejectedToken(""), .authFailed(""), .timeout(""),
                                         .badResponse("")].map(\.reasonCode)

    /// Outcomes of a call to Google that was sent (invalid_configuration fails before sending).
    static let googleOutcomes = ["ok"] + [GoogleServiceError.unavailable(""), .credentialsRefused(""), .tokenRejected(""),
                                          .badResponse("")].map(\.reasonCode)

    /// The attestation reasons `POST /attest/verify` counts in `gateway_attestations_total`.
    static var attestationReasons: [String] {
        VerificationError.Reason.allCases.filter { places(of: $0).contains(.builtin(.attestVerify)) }.map(\.rawValue)
            + ["key_already_registered"]
    }

    static func places(of error: GatewayError) -> Set<Place> {
        let checks: [BuiltinEndpoints.Endpoint] = [.attestChallenge, .assertChallenge, .attestVerify, .playIntegrityChallenge, .playIntegrityToken]
        switch error {
        case .verification(let verification): return places(of: verification.reason)
        case .assertionMissing, .badHeader, .keyUnknown, .noMatchingKey, .keyRevoked: return [.assertion]
        case .badRequest:
            return [.anyRoute, .builtin(.assertChallenge), .builtin(.attestVerify), .builtin(.verifyDevice), .builtin(.playIntegrityToken)]
        case .badPath, .routeNotFound: return [.unrouted]
        case .bodyTooLarge, .body: return [.anyRoute]
        case .tokenExpired, .tokenInvalid, .tokenRevoked, .tokenReused: return [.assertion]
        case .tokenSigningFailed: return [.builtin(.assertToken), .builtin(.playIntegrityToken)]
        case .tokenMethodRefused: return [.assertion]
        case .integrity, .integrityUnavailable: return [.builtin(.playIntegrityToken)]
        case .debugTokenInvalid, .debugTokenRefused: return [.assertion]
        case .challengeInvalid, .challengeExpired, .challengeWrongKind, .challengeReused: return [.jsonClientData, .builtin(.attestVerify)]
        case .challengeRateLimited: return [.builtin(.attestChallenge), .builtin(.assertChallenge), .builtin(.playIntegrityChallenge)]
        case .keyAlreadyRegistered: return [.builtin(.attestVerify)]
        case .methodNotAllowed: return Set([.listedMethods, .builtin(.assertToken)] + (allEndpoints + playIntegrityEndpoints).map { .builtin($0) })
        case .routeDenied: return [.denyRoute]
        case .storeUnavailable, .storeError: return Set([.assertion] + checks.map { .builtin($0) })
        case .upstreamUnavailable, .upstreamTLSFailed, .upstreamTimeout, .upstreamProtocolError: return [.forwarding]
        case .deviceTokenMissing: return [.deviceBits, .oncePerDevice]
        case .deviceTokenInvalid, .appleUnavailable, .appleMisconfigured:
            return [.fallback, .deviceBits, .oncePerDevice, .builtin(.verifyDevice)]
        case .deviceTokenReused: return [.fallback]
        case .deviceFlagged: return [.deviceBits]
        case .alreadyClaimed, .claimInProgress: return [.oncePerDevice]
        case .rateLimited: return [.rateLimit]
        case .riskTooHigh: return [.riskDeny]
        }
    }

    static func places(of reason: VerificationError.Reason) -> Set<Place> {
        switch reason {
        case .badAssertion, .signatureInvalid, .counterNotIncreasing: return [.assertion]
        case .appIdMismatch, .environmentMismatch: return [.assertion, .builtin(.attestVerify)]
        case .clientDataInvalid, .methodMismatch, .pathMismatch, .queryMismatch, .bodyHashMismatch: return [.jsonClientData]
        case .badCBOR, .badFormat, .badCertificate, .chainInvalid, .certExpired, .certNotYetValid, .nonceMismatch,
             .keyIdMismatch, .counterNotZero, .credentialIdMismatch, .credentialKeyMismatch:
            return [.builtin(.attestVerify)]
        // Not produced on the request path (offline commands, receipts, the Apple key).
        case .badBase64, .badPublicKey, .receiptInvalid, .receiptSignatureInvalid, .receiptChainInvalid, .receiptExpired,
             .receiptNotYetValid, .receiptTooOld, .receiptAppIdMismatch, .receiptKeyMismatch, .badPrivateKey:
            return []
        }
    }

    static let allEndpoints: [BuiltinEndpoints.Endpoint] = [.attestChallenge, .assertChallenge, .attestVerify, .verifyDevice]
    /// Present with a `play_integrity:` section.
    static let playIntegrityEndpoints: [BuiltinEndpoints.Endpoint] = [.playIntegrityChallenge, .playIntegrityToken]

    /// Places whose failures a `mode: report` route forwards instead of refusing.
    static let reportable: Set<Place> = [.assertion, .jsonClientData, .fallback, .deviceBits, .oncePerDevice, .rateLimit, .riskDeny]
}
