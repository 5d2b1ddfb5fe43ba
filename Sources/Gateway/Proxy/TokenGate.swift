import RedisClient
import EventLoop
import AttestStore
import HTTPServer
import AssertionCheck
import Foundation

/// A key proven on an `assert` route, by an assertion or by a gateway token.
struct ProvenKey {
    let keyId: [UInt8]
    /// The receipt risk metric stored for the key (assertions only: a token carries none).
    let riskMetric: Int?
    /// `assertion`, `token` (an App Attest token) or `play_integrity` (a token minted for a verdict): the
    /// upstream's `X-Attest-Method`.
    let method: String
    /// A Play Integrity token's device labels (only the known ones, as minted).
    var deviceIntegrity: [String]? = nil
    /// The key id as the request spelled it, when that is the one spelling `keyIdBase64` answers.
    var spelling: String? = nil

    var keyIdBase64: String { spelling ?? Base64.encode(keyId) }
}

extension AssertRoute {
    /// The route's `accept:` decides: a request with `X-App-Attest-Token` on a route that takes tokens is
    /// checked as a token, anything else as an assertion (on routes that take those).
    nonisolated(nonsending) func prove(_ request: HTTPRequest, body: BodySource, path: String, route: RouteConfig, record: RequestRecord) async throws(GatewayError) -> ProvenKey {
        let carriesToken = request.headers.contains { $0.known == .xAppAttestToken }
        if route.accept.contains(.token), carriesToken || !route.accept.contains(.assertion) {
            record.attestMethod = "token"
            guard let tokens = runtime.tokens else { throw .tokenInvalid("this gateway has no app_attest.token section") }
            return try await TokenGate(tokens: tokens, store: runtime.store, config: runtime.config).check(request, route: route, record: record)
        }
        record.attestMethod = "assertion"
        if carriesToken, !AssertRoute.carriesAssertionHeaders(request) {
            throw .assertionMissing("this route does not accept X-App-Attest-Token; send a signed request (X-App-Attest-Key-Id, X-App-Attest-Assertion, X-App-Attest-Client-Data)")
        }
        let gate = AssertGate(store: runtime.store, keyCache: keyCache, metrics: metrics,
                              apps: runtime.config.appAttest.apps, environments: runtime.config.appAttest.environments,
                              challenges: runtime.challenges)
        let passed = try await gate.check(request, body: body, decodedPath: path, route: route, record: record)
        return ProvenKey(keyId: passed.keyId, riskMetric: passed.riskMetric, method: "assertion", spelling: passed.keyIdBase64)
    }

    static func carriesAssertionHeaders(_ request: HTTPRequest) -> Bool {
        ["X-App-Attest-Key-Id", "X-App-Attest-Assertion", "X-App-Assertion"].contains { request.headers.first(named: $0) != nil }
    }
}

/// The checks of a token request: the token itself (signature, `exp`), the app and environment (or the
/// package) against the configuration in force, the route's `token_methods`, the revocation set — all in
/// process — then, only on routes with
/// `token_use: limited` or a `rate_limit`, one Redis script on the key's slot.
struct TokenGate {
    let tokens: GatewayTokens
    let store: AttestStore
    let config: GatewayConfig

    func check(_ request: HTTPRequest, route: RouteConfig, record: RequestRecord) async throws(GatewayError) -> ProvenKey {
        let start = DispatchTime.now().uptimeNanoseconds
        let values = request.headers.filter { $0.hasName(GatewayTokens.header) }
        guard let token = values.first?.value, !token.isEmpty else { throw .assertionMissing("\(GatewayTokens.header) header is missing") }
        guard values.count == 1 else { throw .badHeader("\(GatewayTokens.header) appears more than once") }
        let now = Date()
        let claims = try tokens.verify(token, now: KeyRecord.seconds(now))
        record.keyId = claims.subject
        // Like assertions: an app, environment or package removed from the config stops working at once.
        switch claims.origin {
        case .appAttest(let app, let environment):
            guard config.appAttest.apps.contains(app) else { throw .tokenInvalid("minted for \(app), which is no longer configured") }
            guard config.appAttest.environments.contains(environment) else {
                throw .tokenInvalid("minted for a \(environment.rawValue) key, which is no longer accepted")
            }
        case .playIntegrity(let package, _):
            guard config.playIntegrity?.packageNames.contains(package) == true else {
                throw .tokenInvalid("minted for \(package.prefix(128)), which is not in play_integrity.package_names")
            }
        }
        let method = claims.origin.method
        guard route.tokenMethods?.contains(method) ?? true else {
            throw .tokenMethodRefused("this route accepts tokens earned by \(route.tokenMethods?.map(\.rawValue).joined(separator: ", ") ?? ""), not \(method.rawValue)")
        }
        guard try !tokens.revocations.isRevoked(claims.keyId) else { throw .tokenRevoked }
        record.verifyMs = RequestRecord.milliseconds(since: start)
        if route.tokenUse == .limited || route.rateLimit != nil {
            let storeStart = DispatchTime.now().uptimeNanoseconds
            defer { record.storeMs = RequestRecord.milliseconds(since: storeStart) }
            let outcome: TokenUseOutcome
            do {
                outcome = try await store.useToken(keyId: claims.keyId, tokenId: claims.tokenId, expiresAt: claims.expiresAt,
                                             spend: route.tokenUse == .limited, rateLimit: route.rateLimit, route: route.name, now: now)
            } catch {
                throw GatewayError(error)
            }
            switch outcome {
            case .accepted: break
            case .reused: throw .tokenReused
            case .rateLimited(let milliseconds): throw .rateLimited(retryAfterSeconds: max(1, (milliseconds + 999) / 1000))
            }
        }
        guard case .playIntegrity(_, let labels) = claims.origin else { return ProvenKey(keyId: claims.keyId, riskMetric: nil, method: "token") }
        return ProvenKey(keyId: claims.keyId, riskMetric: nil, method: "play_integrity",
                         deviceIntegrity: labels.filter(IntegrityPolicy.deviceLabels.contains))
    }
}
