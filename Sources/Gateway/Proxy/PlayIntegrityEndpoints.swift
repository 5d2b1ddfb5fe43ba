import AssertionCheck
import AttestStore
import Foundation
import HTTPServer
import Upstream

/// The Play Integrity exchange, present when the config has `play_integrity:` (and so `app_attest.token`):
///   GET  {prefix}/play-integrity/challenge  → a challenge of its own kind, passed by the app as the request's
///                                            `nonce` (classic) or `requestHash` (standard)
///   POST {prefix}/play-integrity/token      → {"integrity_token","challenge"} → {"token","expires_in"}
extension BuiltinEndpoints {
    /// A token of at most 16 KiB and a 72-character challenge, in JSON.
    static let integrityRequestBodyLimit = 32 * 1024

    /// Counts every outcome: minted, or refused with an `integrity_*` code.
    func exchangeIntegrityToken(_ request: HTTPRequest, record: RequestRecord) async throws(GatewayError) -> HTTPResponse {
        guard runtime.config.playIntegrity != nil, let tokens = runtime.tokens else { throw .routeNotFound }
        record.attestMethod = "play_integrity"
        let token: String
        do throws(GatewayError) {
            token = try await mintForVerdict(request, tokens: tokens, record: record)
        } catch {
            if case .integrity(let refusal) = error {
                metrics.increment("gateway_play_integrity_verdicts_total", ["result": "refused", "reason": refusal.reasonCode],
                                  help: MetricHelp.integrityVerdicts)
            }
            throw error
        }
        metrics.increment("gateway_play_integrity_verdicts_total", ["result": "minted", "reason": ""], help: MetricHelp.integrityVerdicts)
        let body = #"{"token":"\#(token)","expires_in":\#(tokens.config.ttlSeconds)}"#
        return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "application/json"), HTTPField("Cache-Control", "no-store")],
                            body: .bytes(Array(body.utf8)))
    }

    /// Checks the challenge (MAC, kind, expiry), obtains the verdict, judges it, and only then spends the
    /// challenge (the one write: a refused token leaves nothing in Redis) and signs a token.
    private func mintForVerdict(_ request: HTTPRequest, tokens: GatewayTokens, record: RequestRecord) async throws(GatewayError) -> String {
        guard let play = runtime.config.playIntegrity else { throw .routeNotFound }
        let exchange = try IntegrityExchange(request.body)
        let challenge: ChallengeUse
        do throws(GatewayError) {
            challenge = try await runtime.challenges.codec().check(exchange.challenge, kind: .playIntegrity, keyId: nil)
        } catch {
            throw Self.integrityChallengeError(error)
        }
        let start = DispatchTime.now().uptimeNanoseconds
        let (payload, binding) = try await verdictPayload(exchange, config: play)
        let verdict: IntegrityVerdict
        do throws(IntegrityError) {
            verdict = try IntegrityVerdict(json: payload)
            try play.policy(clockSkewSeconds: tokens.config.clockSkewSeconds).judge(verdict, challenge: exchange.challenge, binding: binding, now: Date())
        } catch {
            throw .integrity(error)
        }
        record.verifyMs = RequestRecord.milliseconds(since: start)
        let spent: Bool
        do {
            spent = try await runtime.store.spendChallenge(challenge)
        } catch {
            throw GatewayError(error)
        }
        guard spent else { throw Self.integrityChallengeError(.challengeReused) }
        // The verdict names no device: the token's subject is drawn here, so a revocation can still name it.
        let subject = SecureRandom.bytes(32)
        record.keyId = Base64.encode(subject)
        return try tokens.mint(keyId: subject, origin: .playIntegrity(package: verdict.requestPackageName,
                                                                       deviceIntegrity: verdict.deviceRecognitionVerdict))
    }

    /// The exchange answers every refusal 401/403 with a code of its own (the App Attest endpoints' challenge
    /// codes are 409): a client of this endpoint tells its challenge problems apart from the others'.
    static func integrityChallengeError(_ error: GatewayError) -> GatewayError {
        let reason: IntegrityError.Reason
        switch error {
        case .challengeInvalid: reason = .challengeInvalid
        case .challengeWrongKind: reason = .challengeWrongKind
        case .challengeExpired: reason = .challengeExpired
        case .challengeReused: reason = .challengeReused
        default: return error
        }
        return .integrity(IntegrityError(reason, error.message))
    }

    /// The verdict JSON and how it echoes the challenge: a classic token (compact JWE) is decrypted here when
    /// the Console keys are configured; any other token goes to Google's decodeIntegrityToken, for the body's
    /// `package_name` or the first listed package (Google answers 400 for another app's token).
    private func verdictPayload(_ exchange: IntegrityExchange, config: PlayIntegrityConfig) async throws(GatewayError) -> ([UInt8], IntegrityPolicy.Binding) {
        let token = exchange.integrityToken
        let classic = IntegrityToken.isCompactJWE(token)
        if classic, let keys = config.localKeys {
            do throws(IntegrityError) {
                return (try IntegrityToken.decrypt(token, keys: keys), .nonce)
            } catch {
                throw .integrity(error)
            }
        }
        guard let google = runtime.google, let package = exchange.packageName ?? config.packageNames.first else {
            throw .integrity(IntegrityError(.tokenMalformed, config.localKeys == nil
                ? "this gateway has neither the Console keys nor a service account to read this token"
                : "not a classic token (a compact JWE); standard tokens need play_integrity.service_account_file"))
        }
        guard config.packageNames.contains(package) else {
            throw .integrity(IntegrityError(.packageNotAllowed, "package_name \"\(package.prefix(128))\" is not in package_names"))
        }
        return (try await google.decode(packageName: package, token: token), classic ? .nonce : .requestHash)
    }
}

/// The JSON body of POST /play-integrity/token.
struct IntegrityExchange {
    let integrityToken: String
    let challenge: String
    /// Optional: which listed app a standard token is decoded for (several `package_names`).
    let packageName: String?

    init(_ body: [UInt8]) throws(GatewayError) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] else {
            throw .badRequest("body must be a JSON object {\"integrity_token\": \"…\", \"challenge\": \"…\"}")
        }
        guard let token = object["integrity_token"] as? String, !token.isEmpty else {
            throw .badRequest("\"integrity_token\" is missing or not a string")
        }
        guard token.utf8.count <= IntegrityToken.maxBytes else {
            throw .integrity(IntegrityError(.tokenMalformed, "longer than \(IntegrityToken.maxBytes) bytes"))
        }
        guard let challenge = object["challenge"] as? String, !challenge.isEmpty else {
            throw .badRequest("\"challenge\" is missing or not a string (GET /play-integrity/challenge)")
        }
        guard object["package_name"] == nil || object["package_name"] is String else {
            throw .badRequest("\"package_name\" must be a string")
        }
        integrityToken = token
        self.challenge = challenge
        packageName = object["package_name"] as? String
    }
}
