import HTTPServer
import AssertionCheck

/// The debug provider's gateway side: on an `assert` route, a request carrying `X-App-Attest-Debug-Token`
/// is decided by that header alone. Its SHA-256 is compared, in constant time, with every configured
/// `app_attest.debug_tokens` hash; a match is forwarded as `X-Attest-Status: debug` with the token's name.
/// Fails closed: a token on a route with `allow_debug: false`, or one that is not configured, is refused.
struct DebugTokenGate {
    static let header = "X-App-Attest-Debug-Token"

    let tokens: [DebugToken]
    let metrics: Metrics

    /// nil when the request carries no debug token (the route's usual checks apply).
    func check(_ request: HTTPRequest, route: RouteConfig, record: RequestRecord) throws(GatewayError) -> Forwarder.Identity? {
        // By the field's KnownHeader code, counted in place: this runs on every assert request.
        var secret: String?
        var count = 0
        for field in request.headers where field.known == .xAppAttestDebugToken {
            if count == 0 { secret = field.value }
            count += 1
        }
        guard let secret else { return nil }
        guard count == 1 else { throw .badHeader("\(DebugTokenGate.header) appears more than once") }
        guard route.allowDebug else { throw .debugTokenRefused }
        let hash = SHA256.hash(Array(secret.utf8))
        var match: DebugToken?
        // Every configured hash is compared, whatever matched before, so timing tells nothing about the list.
        for token in tokens where Bytes.constantTimeEqual(token.sha256, hash) { match = match ?? token }
        guard let match else { throw .debugTokenInvalid }
        record.decision = "debug"
        record.debugToken = match.name
        metrics.increment("gateway_debug_requests_total", ["token": match.name],
                          help: "Requests let through on an app_attest.debug_tokens secret, by token name.")
        return Forwarder.Identity(status: "debug", keyId: nil, riskMetric: nil, debugName: match.name)
    }
}
