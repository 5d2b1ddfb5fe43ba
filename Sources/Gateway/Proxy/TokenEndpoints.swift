import HTTPServer
import AssertionCheck
import Foundation
import Upstream

/// The gateway-token endpoints, present when the config has `app_attest.token`:
///   POST {prefix}/assert/token            signed like any assert request → {"token","expires_in"}
///   GET  {prefix}/.well-known/jwks.json   the public signing keys (current and previous) as a JWK Set
extension BuiltinEndpoints {
    /// The app signs the body's hash like on any route; it has no use for a large one here.
    static let tokenRequestBodyLimit = 64 * 1024

    /// The assertion is checked exactly as on an assert route (challenge, binding, counter, revocation),
    /// counted by `app_attest.token.rate_limit`; only then is a token signed.
    func mintToken(_ request: HTTPRequest, body: BodySource, record: RequestRecord) async throws(GatewayError) -> HTTPResponse {
        guard let tokens = runtime.tokens, let path = PathDecoding.decode(request.path) else { throw .routeNotFound }
        record.attestMethod = "assertion"
        let route = RouteConfig(match: .exact(path), methods: ["POST"], upstream: nil, policy: .assert,
                                maxBodyBytes: Self.tokenRequestBodyLimit, rateLimit: tokens.config.rateLimit)
        let gate = AssertGate(store: runtime.store, keyCache: keyCache, metrics: metrics,
                              apps: runtime.config.appAttest.apps, environments: runtime.config.appAttest.environments,
                              challenges: runtime.challenges)
        let passed = try await gate.check(request, body: body, decodedPath: path, route: route, record: record)
        let token = try tokens.mint(keyId: passed.keyId, origin: .appAttest(app: passed.appID, environment: passed.environment))
        metrics.increment("gateway_tokens_minted_total", ["environment": passed.environment.rawValue], help: "Gateway tokens minted.")
        let body = #"{"token":"\#(token)","expires_in":\#(tokens.config.ttlSeconds)}"#
        return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "application/json"), HTTPField("Cache-Control", "no-store")],
                            body: .bytes(Array(body.utf8)))
    }

    /// Public keys only; cacheable for a few minutes (a rotation keeps the previous key listed meanwhile).
    func jwks() throws(GatewayError) -> HTTPResponse {
        guard let tokens = runtime.tokens else { throw .routeNotFound }
        return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "application/jwk-set+json"),
                                                   HTTPField("Cache-Control", "public, max-age=300")],
                            body: .bytes(Array(tokens.jwks.utf8)))
    }
}
