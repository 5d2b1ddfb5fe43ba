import RedisClient
import EventLoop
import AttestStore
import HTTPServer
import AppleServices
import AssertionCheck
import Foundation
import Upstream

/// The gateway's own endpoints: one-time challenges and key registration.
///   GET  {prefix}/attest/challenge            → text/plain challenge for attestKey
///   POST {prefix}/attest/verify               → {"key_id","attestation","challenge"} registers the key
///   GET  {prefix}/assert/challenge[?key_id=]  → text/plain challenge for the next assertion (of that key)
///   POST {prefix}/verify-device               → {"device_token"} checked with Apple, answers the two bits
///   POST {prefix}/assert/token                → a signed request exchanged for a gateway token (TokenEndpoints.swift)
///   GET  {prefix}/.well-known/jwks.json       → the token signing keys
///   GET  {prefix}/play-integrity/challenge    → text/plain challenge for a Play Integrity request (PlayIntegrityEndpoints.swift)
///   POST {prefix}/play-integrity/token        → {"integrity_token","challenge"} exchanged for a gateway token
struct BuiltinEndpoints {
    /// A registration carries a base64 attestation (≤ 64 KiB raw) and two short fields.
    static let registrationBodyLimit = 128 * 1024

    let runtime: GatewayRuntime
    let keyCache: KeyCache
    let metrics: Metrics

    enum Endpoint: String, CaseIterable {
        case attestChallenge = "/attest/challenge"
        case attestVerify = "/attest/verify"
        case assertChallenge = "/assert/challenge"
        case verifyDevice = "/verify-device"
        case assertToken = "/assert/token"
        case jwks = "/.well-known/jwks.json"
        case playIntegrityChallenge = "/play-integrity/challenge"
        case playIntegrityToken = "/play-integrity/token"

        var method: String { [.attestVerify, .verifyDevice, .assertToken, .playIntegrityToken].contains(self) ? "POST" : "GET" }

        var maxBodyBytes: Int {
            switch self {
            case .attestVerify: return BuiltinEndpoints.registrationBodyLimit
            case .verifyDevice: return 32 * 1024
            case .assertToken: return BuiltinEndpoints.tokenRequestBodyLimit
            case .playIntegrityToken: return BuiltinEndpoints.integrityRequestBodyLimit
            case .attestChallenge, .assertChallenge, .jwks, .playIntegrityChallenge: return 0
            }
        }
    }

    /// `/verify-device` exists only when the config has an `apple:` section, the Play Integrity ones with `play_integrity:`.
    func endpoint(for path: String) -> Endpoint? {
        guard let endpoint = Self.named(path, after: runtime.config.prefix) else { return nil }
        if endpoint == .verifyDevice, runtime.apple == nil { return nil }
        if endpoint == .assertToken || endpoint == .jwks, runtime.tokens == nil { return nil }
        if endpoint == .playIntegrityChallenge || endpoint == .playIntegrityToken, runtime.config.playIntegrity == nil { return nil }
        return endpoint
    }

    /// The endpoints' names as bytes, and their lengths (a bit each; all are shorter than 64) to tell most
    /// other paths apart in one test.
    private static let names: [(bytes: [UInt8], endpoint: Endpoint)] = Endpoint.allCases.map { (Array($0.rawValue.utf8), $0) }
    private static let nameLengths: UInt64 = names.reduce(0) { $0 | 1 << UInt64($1.bytes.count) }

    /// The endpoint `path` names after `prefix`, comparing bytes in place: every proxied request asks, and
    /// `hasPrefix`, a count of characters and a substring's UTF-8 view cost it ~1,100 instructions. The prefix
    /// is ASCII (GatewayConfig checks it) and the names too, so bytes match exactly when characters do.
    static func named(_ path: String, after prefix: String) -> Endpoint? {
        path.utf8.withContiguousStorageIfAvailable { named($0, after: prefix) }
            ?? Array(path.utf8).withUnsafeBufferPointer { named($0, after: prefix) }
    }

    private static func named(_ path: UnsafeBufferPointer<UInt8>, after prefix: String) -> Endpoint? {
        let length = path.count - prefix.utf8.count
        guard length > 0, length < 64, nameLengths & 1 << UInt64(length) != 0, path.starts(with: prefix.utf8) else { return nil }
        let rest = UnsafeBufferPointer(rebasing: path[(path.count - length)...])
        return names.first { $0.bytes.count == length && $0.bytes.elementsEqual(rest) }?.endpoint
    }

    /// Challenges and keys are answered on the loop; registration and Apple's API (blocking) via `offload`.
    func handle(_ endpoint: Endpoint, _ request: HTTPRequest, body: BodySource, record: RequestRecord,
                offload: (@escaping () throws(GatewayError) -> HTTPResponse) async throws(GatewayError) -> HTTPResponse) async throws(GatewayError) -> HTTPResponse {
        record.route = "builtin:" + endpoint.rawValue
        guard request.method == endpoint.method else { throw .methodNotAllowed(allowed: [endpoint.method]) }
        switch endpoint {
        case .attestChallenge:
            try admitChallenge(record)
            return challengeResponse(try await runtime.challenges.codec().issue(.attest, ttlSeconds: runtime.config.appAttest.challengeTTLSeconds))
        case .assertChallenge:
            return challengeResponse(try await assertChallenge(request, record: record))
        case .attestVerify:
            return try await offload { () throws(GatewayError) in try register(request, record: record) }
        case .verifyDevice:
            return try await verifyDevice(request)
        case .assertToken:
            return try await mintToken(request, body: body, record: record)
        case .jwks:
            return try jwks()
        case .playIntegrityChallenge:
            try admitChallenge(record)
            return challengeResponse(try await runtime.challenges.codec().issue(.playIntegrity, ttlSeconds: runtime.config.appAttest.challengeTTLSeconds))
        case .playIntegrityToken:
            return try await exchangeIntegrityToken(request, record: record)
        }
    }

    /// Validates the token with Apple and answers the device's two bits (as Apple's query_two_bits does).
    private func verifyDevice(_ request: HTTPRequest) async throws(GatewayError) -> HTTPResponse {
        guard let apple = runtime.apple else { throw .routeNotFound }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any],
              let token = object["device_token"] as? String, let raw = Base64.decode(token), !raw.isEmpty else {
            throw .badRequest("body must be a JSON object {\"device_token\": \"<base64 DCDevice token>\"}")
        }
        let bits: TwoBits
        do {
            bits = try await apple.deviceCheck.query(deviceToken: token)
        } catch {
            throw GatewayError(error)
        }
        var answer: [String: Any] = ["bit0": bits.bit0, "bit1": bits.bit1]
        answer["last_update_time"] = bits.lastUpdate ?? NSNull()
        return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "application/json")],
                            body: .bytes(Array(JSONOutput.line(answer).utf8)))
    }

    /// Without `key_id` any key may use the challenge (once); with it, only that key (the key id is MAC'd).
    private func assertChallenge(_ request: HTTPRequest, record: RequestRecord) async throws(GatewayError) -> String {
        var keyId: [UInt8]?
        if let keyIdText = QueryString.value(of: "key_id", in: request.query) {
            guard let bytes = Base64.decode(keyIdText), bytes.count == 32 else {
                throw .badRequest("key_id is not base64 of a 32-byte key id")
            }
            keyId = bytes
        }
        try admitChallenge(record)
        return try await runtime.challenges.codec().issue(.assert, keyId: keyId, ttlSeconds: runtime.config.appAttest.challengeTTLSeconds)
    }

    /// `app_attest.challenge_rate_limit`, per client address (`server.trusted_proxies` applied).
    func admitChallenge(_ record: RequestRecord) throws(GatewayError) {
        if let seconds = runtime.challengeLimiter?.admit(record.clientIP) { throw .challengeRateLimited(retryAfterSeconds: seconds) }
    }

    func challengeResponse(_ challenge: String) -> HTTPResponse {
        HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "text/plain; charset=utf-8"), HTTPField("Cache-Control", "no-store")],
                     body: .bytes(Array(challenge.utf8)))
    }

    /// Checks the challenge's MAC, kind and expiry, verifies the attestation, then spends the challenge (so
    /// only a valid attestation writes to Redis) and stores the key.
    private func register(_ request: HTTPRequest, record: RequestRecord) throws(GatewayError) -> HTTPResponse {
        let registration = try RegistrationRequest(request.body)
        record.keyId = Base64.encode(registration.keyId)
        guard let challengeText = String(validating: registration.challenge, as: UTF8.self) else { throw .challengeInvalid }
        let challenge = try runtime.challenges.codecBlocking().check(challengeText, kind: .attest, keyId: nil)
        let start = DispatchTime.now().uptimeNanoseconds
        let key: AttestedKey
        do {
            key = try AttestationVerifier.verify(attestation: registration.attestation, keyId: registration.keyId,
                                                 clientData: .challenge(registration.challenge), policy: runtime.attestationPolicy)
        } catch {
            metrics.increment("gateway_attestations_total", ["result": "rejected", "reason": error.reasonCode], help: "Attestations by result.")
            throw .verification(error)
        }
        record.verifyMs = RequestRecord.milliseconds(since: start)
        guard try storeCall({ () throws(StoreError) in try runtime.store.spendChallenge(challenge) }) else { throw .challengeReused }
        let stored = KeyRecord(keyId: key.keyId, environment: key.environment, appID: key.appID.description,
                               publicKeySPKI: key.publicKey.spki, counter: 0, receipt: key.receipt, createdAt: key.verifiedAt)
        guard try storeCall({ () throws(StoreError) in try runtime.store.register(stored) }) == .created else {
            metrics.increment("gateway_attestations_total", ["result": "rejected", "reason": "key_already_registered"], help: "Attestations by result.")
            throw .keyAlreadyRegistered
        }
        let appID = runtime.config.appAttest.apps.first { $0 == key.appID } ?? key.appID
        keyCache.store(KeyCache.Entry(publicKey: key.publicKey, appID: appID, environment: key.environment), for: key.keyId)
        if let apple = runtime.apple {
            // Apple answers a receipt exchange only after the receipt's "not before" (a day after attestation).
            // The key is registered either way: a failure here only delays its first risk metric.
            let first = Date().addingTimeInterval(Double(max(apple.config.receiptRefreshSeconds, 86_400)))
            do {
                try runtime.store.scheduleReceiptRefresh(keyId: key.keyId, environment: key.environment, at: first)
            } catch {
                record.reason = "receipt_schedule_failed"
                record.detail = error.message
            }
        }
        metrics.increment("gateway_attestations_total", ["result": "registered", "reason": ""], help: "Attestations by result.")
        let body = JSONOutput.line(["key_id": Base64.encode(key.keyId), "environment": key.environment.rawValue, "app_id": key.appID.description])
        return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", "application/json")], body: .bytes(Array(body.utf8)))
    }

    private func storeCall<T>(_ body: () throws(StoreError) -> T) throws(GatewayError) -> T {
        do {
            return try body()
        } catch {
            throw GatewayError(error)
        }
    }
}

/// The JSON body of POST /attest/verify.
struct RegistrationRequest {
    let keyId: [UInt8]
    let attestation: [UInt8]
    let challenge: [UInt8]

    init(_ body: [UInt8]) throws(GatewayError) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] else {
            throw .badRequest("body must be a JSON object {\"key_id\", \"attestation\", \"challenge\"}")
        }
        func field(_ name: String) throws(GatewayError) -> [UInt8] {
            guard let text = object[name] as? String, !text.isEmpty else { throw .badRequest("\"\(name)\" is missing or not a string") }
            guard let bytes = Base64.decode(text) else { throw .badRequest("\"\(name)\" is not base64") }
            return bytes
        }
        keyId = try field("key_id")
        guard keyId.count == 32 else { throw .badRequest("\"key_id\" must be base64 of 32 bytes") }
        attestation = try field("attestation")
        challenge = try field("challenge")
    }
}

/// Reads one parameter of a raw query string (percent-decoded).
enum QueryString {
    static func value(of name: String, in query: String?) -> String? {
        guard let query else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.first.map(String.init) == name else { continue }
            let raw = parts.count > 1 ? String(parts[1]) : ""
            // "+" stays "+": base64 key ids contain it, and clients rarely escape it.
            return raw.removingPercentEncoding
        }
        return nil
    }
}
