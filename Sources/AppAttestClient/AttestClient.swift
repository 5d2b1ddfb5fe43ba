import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The app's side of the App Attest gateway: registers a key once, signs each request over a fresh
/// challenge, and recovers by itself from what a retry fixes (a used challenge, a lost counter race, a key
/// the gateway forgot or revoked, the gateway's Redis or Apple briefly down).
///
///     let attest = AttestClient(gateway: URL(string: "https://api.example.com")!)
///     let (data, response) = try await attest.data(for: request)
///
/// How a request is proven, in this order: the debug token when a `DebugProvider` is given (Simulator, CI);
/// App Attest when the device supports it; a fresh DeviceCheck token otherwise (routes with
/// `fallback: devicecheck`); nothing at all as a last resort (`mode: report` routes still forward it).
///
/// Signed requests of one client go to the gateway one at a time, from challenge to response: a key's
/// counters must reach the gateway in increasing order (`counter_window: 0`, the default), and the
/// Secure Enclave numbers assertions in the order they are made.
public actor AttestClient {
    public nonisolated let gateway: URL
    /// The gateway's `prefix` (`""` unless your backend team set one).
    public nonisolated let prefix: String
    private let service: any AppAttestService
    private let keyStore: any KeyIdStore
    private let deviceCheck: (any DeviceCheckTokenProvider)?
    private let debug: DebugProvider?
    private let session: URLSession
    private let backoff: Backoff

    private var registration: Task<String, Error>?
    private var signing = false
    private var signingQueue: [CheckedContinuation<Void, Never>] = []

    public init(gateway: URL, prefix: String = "", service: any AppAttestService, keyStore: any KeyIdStore = InMemoryKeyIdStore(),
                deviceCheck: (any DeviceCheckTokenProvider)? = nil, debug: DebugProvider? = nil, session: URLSession = .shared,
                backoff: Backoff = Backoff()) {
        self.gateway = gateway
        self.prefix = prefix
        self.service = service
        self.keyStore = keyStore
        self.deviceCheck = deviceCheck
        self.debug = debug
        self.session = session
        self.backoff = backoff
    }

    // MARK: - Public API

    /// The registered key id: the stored one, or a new key generated, attested and registered now.
    /// Concurrent callers share one registration. Call it early (at launch) to take it off the first request.
    @discardableResult
    public func register() async throws -> String {
        if let keyId = keyStore.load() { return keyId }
        if let running = registration { return try await running.value }
        let task = Task { try await registerNewKey() }
        registration = task
        defer { registration = nil }
        return try await task.value
    }

    /// `request` with its proof attached, ready to send unchanged (method, URL and body are what was signed).
    /// Send it yourself only when you must: `data(for:)` also retries what can be retried, and keeps a key's
    /// requests in counter order. `deviceToken` adds a fresh `X-Apple-Device-Token` to signed requests
    /// (routes with `deny_if_bits` or `once_per_device`).
    public func sign(_ request: URLRequest, deviceToken: Bool = false) async throws -> URLRequest {
        let clientData = try RequestClientData(request)
        let proof = proof
        if case .none = proof { throw AttestClientError.unsupported }
        if proof.isAppAttest {
            return try await serially {
                var recovery = Recovery()
                return try await prove(request, clientData: clientData, proof: proof, deviceToken: deviceToken, recovery: &recovery)
            }
        }
        var recovery = Recovery()
        return try await prove(request, clientData: clientData, proof: proof, deviceToken: deviceToken, recovery: &recovery)
    }

    /// What a fresh challenge and a new assertion can fix (`challenge_unknown`: gateways before stateless challenges).
    static let freshChallengeReasons: Set<String> = ["challenge_expired", "challenge_reused", "challenge_invalid", "challenge_wrong_kind",
                                                     "challenge_unknown", "counter_not_increasing"]

    /// Proves, sends and recovers: one retry with a fresh challenge after a challenge reason or
    /// `counter_not_increasing`; a new key after `key_unknown`, `key_revoked` or `DCError.invalidKey`; a
    /// DeviceCheck token added after `device_token_missing` (and a new one after `device_token_reused` or
    /// `device_token_invalid`); back-off on the gateway's own `503`. Each retry is safe for any method: when
    /// the gateway refuses, the upstream never saw the request.
    ///
    /// Answers whatever the upstream answered (any status). Throws `AttestClientError` when the gateway
    /// itself refused, and URLSession's errors as they are.
    public func data(for request: URLRequest, deviceToken: Bool = false) async throws -> (Data, URLResponse) {
        let clientData = try RequestClientData(request)
        let proof = proof
        if proof.isAppAttest {
            return try await serially { try await exchange(request, clientData: clientData, proof: proof, deviceToken: deviceToken) }
        }
        return try await exchange(request, clientData: clientData, proof: proof, deviceToken: deviceToken)
    }

    // MARK: - One request

    private enum Proof {
        case debug(String)
        case appAttest
        case deviceCheck
        case none

        var isAppAttest: Bool { if case .appAttest = self { true } else { false } }
        var isDeviceCheck: Bool { if case .deviceCheck = self { true } else { false } }
    }

    /// What was already tried for one request, so that each recovery happens at most once.
    private struct Recovery {
        var freshChallenge = false
        var newKey = false
        var newDeviceToken = false
        var backoffAttempt = 1
    }

    private var proof: Proof {
        if let debug { return .debug(debug.token) }
        if service.isSupported { return .appAttest }
        if let deviceCheck, deviceCheck.isSupported { return .deviceCheck }
        return .none
    }

    private func exchange(_ request: URLRequest, clientData: RequestClientData, proof: Proof,
                          deviceToken: Bool) async throws -> (Data, URLResponse) {
        var recovery = Recovery()
        var deviceToken = deviceToken
        while true {
            let outgoing = try await prove(request, clientData: clientData, proof: proof, deviceToken: deviceToken, recovery: &recovery)
            let (data, response) = try await send(outgoing)
            guard let rejection = GatewayRejection(response, body: data) else { return (data, response) }
            let signed = proof.isAppAttest
            let tokenSent = deviceToken || proof.isDeviceCheck
            let reason = rejection.reason
            if signed, !recovery.freshChallenge, Self.freshChallengeReasons.contains(reason) {
                recovery.freshChallenge = true
            } else if signed, !recovery.newKey, reason == "key_unknown" || reason == "key_revoked" {
                recovery.newKey = true
                discardKey(outgoing.value(forHTTPHeaderField: "X-App-Attest-Key-Id"))
            } else if !tokenSent, reason == "device_token_missing", deviceCheck?.isSupported == true {
                deviceToken = true
            } else if tokenSent, !recovery.newDeviceToken, reason == "device_token_reused" || reason == "device_token_invalid" {
                recovery.newDeviceToken = true
            } else if rejection.status == 503, recovery.backoffAttempt < backoff.maxAttempts {
                try await backoff.sleep(after: recovery.backoffAttempt)
                recovery.backoffAttempt += 1
            } else if reason == "assertion_missing", case .none = proof {
                throw AttestClientError.unsupported
            } else {
                throw AttestClientError.gateway(rejection)
            }
        }
    }

    /// `request` with its proof: a debug token, App Attest headers over a fresh challenge, and/or a fresh
    /// DeviceCheck token.
    private func prove(_ request: URLRequest, clientData: RequestClientData, proof: Proof, deviceToken: Bool,
                       recovery: inout Recovery) async throws -> URLRequest {
        var proven = request
        switch proof {
        case .debug(let token):
            proven.setValue(token, forHTTPHeaderField: DebugProvider.header)
        case .appAttest:
            while true {
                let keyId = try await register()
                let clientDataJSON = clientData.encoded(challenge: try await assertChallenge(keyId: keyId))
                let assertion: Data
                do {
                    assertion = try await service.generateAssertion(keyId, clientDataHash: SHA256.hash(clientDataJSON))
                } catch AppAttestServiceError.invalidKey where !recovery.newKey {
                    // The stored key is unusable (app reinstalled, device restored): start over with a new one.
                    recovery.newKey = true
                    discardKey(keyId)
                    continue
                } catch {
                    throw AttestClientError.deviceFailure("generateAssertion failed: \(error)")
                }
                proven.setValue(keyId, forHTTPHeaderField: "X-App-Attest-Key-Id")
                proven.setValue(assertion.base64EncodedString(), forHTTPHeaderField: "X-App-Attest-Assertion")
                proven.setValue(clientDataJSON.base64EncodedString(), forHTTPHeaderField: "X-App-Attest-Client-Data")
                break
            }
        case .deviceCheck, .none:
            break
        }
        if deviceToken || proof.isDeviceCheck {
            guard let deviceCheck, deviceCheck.isSupported else { throw AttestClientError.unsupported }
            let token: Data
            do {
                token = try await deviceCheck.generateToken()
            } catch {
                throw AttestClientError.deviceFailure("DeviceCheck generateToken failed: \(error)")
            }
            proven.setValue(token.base64EncodedString(), forHTTPHeaderField: "X-Apple-Device-Token")
        }
        return proven
    }

    /// Forgets the stored key id if it is still `keyId` (a concurrent caller may have replaced it already).
    private func discardKey(_ keyId: String?) {
        if let keyId, keyStore.load() == keyId { keyStore.delete() }
    }

    /// Runs `body` once every earlier signed request of this client has had its answer.
    private func serially<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        if signing {
            await withCheckedContinuation { signingQueue.append($0) }
        } else {
            signing = true
        }
        // Handed straight to the next waiter, never marked free in between, so arrival order is kept.
        defer {
            if signingQueue.isEmpty { signing = false } else { signingQueue.removeFirst().resume() }
        }
        return try await body()
    }

    // MARK: - Registration

    private func registerNewKey() async throws -> String {
        guard service.isSupported else { throw AttestClientError.unsupported }
        var startedOver = false
        while true {
            let keyId: String
            do {
                keyId = try await service.generateKey()
            } catch {
                throw AttestClientError.deviceFailure("generateKey failed: \(error)")
            }
            // The exact bytes received, not trimmed or decoded, are what Apple's nonce covers.
            let challenge = try await challenge(at: endpoint("/attest/challenge"))
            let attestation = try await attest(keyId, clientDataHash: SHA256.hash(challenge))
            var request = URLRequest(url: try endpoint("/attest/verify"))
            request.httpMethod = "POST"
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(("{" + [("key_id", keyId), ("attestation", attestation.base64EncodedString()),
                                            ("challenge", challenge.base64EncodedString())]
                .map { JSONText.string($0.0) + ":" + JSONText.string($0.1) }.joined(separator: ",") + "}").utf8)
            let (data, response) = try await gatewayCall(request)
            if response.statusCode == 200 {
                do {
                    try keyStore.save(keyId)
                } catch {
                    throw AttestClientError.deviceFailure("the key id could not be stored: \(error)")
                }
                return keyId
            }
            guard let rejection = GatewayRejection(response, body: data) else {
                throw AttestClientError.unexpectedResponse(status: response.statusCode)
            }
            // The challenge expired while Apple was slow, or the id is taken: a new key, once. The old key is
            // attested already, so attestKey would refuse it.
            if !startedOver, Self.freshChallengeReasons.union(["key_already_registered"]).contains(rejection.reason) {
                startedOver = true
                continue
            }
            throw AttestClientError.gateway(rejection, registering: true)
        }
    }

    /// Apple's advice on `serverUnavailable`: try again later with the same key and the same clientDataHash.
    private func attest(_ keyId: String, clientDataHash: Data) async throws -> Data {
        var attempt = 1
        while true {
            do {
                return try await service.attestKey(keyId, clientDataHash: clientDataHash)
            } catch AppAttestServiceError.serverUnavailable where attempt < backoff.maxAttempts {
                try await backoff.sleep(after: attempt)
                attempt += 1
            } catch {
                throw AttestClientError.deviceFailure("attestKey failed: \(error)")
            }
        }
    }

    // MARK: - HTTP

    private func assertChallenge(keyId: String) async throws -> String {
        guard let encoded = keyId.addingPercentEncoding(withAllowedCharacters: .alphanumerics) else {
            throw AttestClientError.invalidRequest("the key id cannot be percent-encoded")
        }
        return String(decoding: try await challenge(at: endpoint("/assert/challenge", query: "key_id=" + encoded)), as: UTF8.self)
    }

    /// A one-time challenge: never from a cache.
    private func challenge(at url: URL) async throws -> Data {
        var request = URLRequest(url: url)
        request.cachePolicy = .reloadIgnoringLocalCacheData
        let (data, response) = try await gatewayCall(request)
        guard response.statusCode == 200, !data.isEmpty else {
            guard let rejection = GatewayRejection(response, body: data) else {
                throw AttestClientError.unexpectedResponse(status: response.statusCode)
            }
            throw AttestClientError.gateway(rejection)
        }
        return data
    }

    /// A call to one of the gateway's own endpoints, retried with back-off while the gateway answers 503.
    private func gatewayCall(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        var attempt = 1
        while true {
            let (data, response) = try await send(request)
            if response.statusCode == 503, GatewayRejection(response, body: data) != nil, attempt < backoff.maxAttempts {
                try await backoff.sleep(after: attempt)
                attempt += 1
                continue
            }
            return (data, response)
        }
    }

    private func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse else { throw AttestClientError.unexpectedResponse(status: 0) }
        return (data, http)
    }

    /// `{prefix}{path}` on the gateway's origin.
    private func endpoint(_ path: String, query: String? = nil) throws -> URL {
        guard var components = URLComponents(url: gateway, resolvingAgainstBaseURL: true) else {
            throw AttestClientError.invalidRequest("the gateway URL \(gateway) is not a URL")
        }
        components.percentEncodedPath = prefix + path
        components.percentEncodedQuery = query
        components.fragment = nil
        guard let url = components.url else { throw AttestClientError.invalidRequest("no gateway endpoint for \(path)") }
        return url
    }
}
