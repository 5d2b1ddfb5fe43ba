import RedisClient
import EventLoop
import AttestStore
import HTTPServer
import AssertionCheck
import Upstream
import Foundation

/// The checks of an `assert` route, cheapest first: headers, base64, client data and its binding to
/// this request, the challenge's MAC and expiry, the public key (named by `X-App-Attest-Key-Id`, or
/// recovered from the signature when the header is absent), the signature, then one atomic Redis commit
/// (key live, challenge spent, counter advanced).
struct AssertGate {
    let store: AttestStore
    let keyCache: KeyCache
    let metrics: Metrics
    let apps: [AppID]
    let environments: [AppAttestEnvironment]
    let challenges: ChallengeAuthority

    struct Passed {
        let keyId: [UInt8]
        /// The upstream sees one spelling of the key id whatever base64 flavour the client used: standard, padded.
        let keyIdBase64: String
        let counter: UInt32
        /// The receipt risk metric stored for the key, once a receipt refresh brought one.
        let riskMetric: Int?
        /// The key's App ID and environment, as registered (what a minted token names).
        let appID: AppID
        let environment: AppAttestEnvironment
    }

    /// `request` carries the head only; `body` is read once the header-only checks have passed.
    nonisolated(nonsending) func check(_ request: HTTPRequest, body: BodySource, decodedPath: String, route: RouteConfig,
               record: RequestRecord) async throws(GatewayError) -> Passed {
        let verifyStart = DispatchTime.now().uptimeNanoseconds
        let headers = SignedHeaders(request)
        // When present the header is authoritative: no recovery.
        let named = try keyIdHeader(headers)
        if let named { record.keyId = named.text }
        let namedKeyId = named?.keyId
        let assertion = try headers.decoded(route.clientData == .body ? [.legacyAssertion, .assertion] : [.assertion])
        let clientDataBytes: [UInt8]
        let challenge: ArraySlice<UInt8>?
        var claimedBodyHash: [UInt8]?
        switch route.clientData {
        case .json:
            clientDataBytes = try headers.decoded([.clientData])
            let clientData: ClientData
            do {
                clientData = try ClientData.parse(clientDataBytes)
                // Method, path and query now; the body's hash once the signature has verified.
                try RequestBinding.check(clientData, against: BoundRequest(method: request.method, path: decodedPath,
                                                                             query: request.query, bodySHA256: clientData.bodySHA256))
            } catch {
                throw .verification(error)
            }
            challenge = clientData.challengeBytes
            claimedBodyHash = clientData.bodySHA256
        case .body:
            // Compatibility mode: the app signed the body itself; replay protection is the counter alone.
            clientDataBytes = try await body.read()
            challenge = nil
        }
        // A challenge issued for one key id is checked once that key id is known (after recovery);
        // any other is checked before the public-key work.
        var use: ChallengeUse?
        let codec = challenge == nil ? nil : try await challenges.codec()
        let deferred = challenge.map { namedKeyId == nil && ChallengeCodec.isBound($0) } ?? false
        if let challenge, let codec, !deferred { use = try codec.check(challenge, kind: .assert, keyId: namedKeyId) }
        let (keyId, keyIdText, key) = if let named {
            (named.keyId, named.text, try await publicKey(for: named.keyId))
        } else {
            try await recoveredKey(assertion: assertion, clientData: clientDataBytes, record: record)
        }
        if deferred, let challenge, let codec { use = try codec.check(challenge, kind: .assert, keyId: keyId) }
        // Apps and environments removed from the config stop working at once, not only for new keys.
        guard apps.contains(key.appID) else {
            throw .verification(VerificationError(.appIdMismatch, "the key belongs to \(key.appID), which is no longer configured"))
        }
        guard environments.contains(key.environment) else {
            throw .verification(VerificationError(.environmentMismatch, "the key was attested in \(key.environment.rawValue), which is no longer accepted"))
        }
        let verified: VerifiedAssertion
        do {
            verified = try AssertionVerifier.verify(assertion: assertion, clientData: clientDataBytes, publicKey: key.publicKey,
                                                    appID: key.appID, previousCounter: nil)
        } catch {
            throw .verification(error)
        }
        record.counter = verified.counter
        if let claimedBodyHash {
            let bytes = try await body.read()
            guard SHA256.digest(bytes[...]).matches(claimedBodyHash[...]) else {
                throw .verification(VerificationError(.bodyHashMismatch, "SHA-256 of the request body differs from client data bodySHA256"))
            }
        }
        record.verifyMs = RequestRecord.milliseconds(since: verifyStart)

        let storeStart = DispatchTime.now().uptimeNanoseconds
        defer { record.storeMs = RequestRecord.milliseconds(since: storeStart) }
        let riskMetric = try await commit(keyId: keyId, environment: key.environment, challenge: use, counter: verified.counter,
                                    route: route)
        return Passed(keyId: keyId, keyIdBase64: keyIdText, counter: verified.counter, riskMetric: riskMetric, appID: key.appID, environment: key.environment)
    }

    /// Answers the key's stored risk metric.
    nonisolated(nonsending) private func commit(keyId: [UInt8], environment: AppAttestEnvironment, challenge: ChallengeUse?, counter: UInt32,
                        route: RouteConfig) async throws(GatewayError) -> Int? {
        let outcome: CommitOutcome
        do {
            outcome = try await store.commitAssertion(keyId: keyId, environment: environment, challenge: challenge, counter: counter,
                                                window: route.counterWindow, rateLimit: route.rateLimit, route: route.name)
        } catch {
            throw GatewayError(error)
        }
        switch outcome {
        case .accepted(_, let riskMetric): return riskMetric
        case .rejected(let rejection): throw GatewayError(rejection)
        case .rateLimited(let milliseconds): throw .rateLimited(retryAfterSeconds: max(1, (milliseconds + 999) / 1000))
        }
    }

    /// The key's public half, parsed once per process; Redis is asked only on a cache miss.
    nonisolated(nonsending) private func publicKey(for keyId: [UInt8]) async throws(GatewayError) -> KeyCache.Entry {
        if let entry = cachedKey(keyId) { return entry }
        guard let entry = try await loadKey(keyId) else { throw .keyUnknown }
        return entry
    }

    /// The registered key among those that could have made the signature: the key cache first (every
    /// candidate), then Redis (one round trip per candidate, at most two). A signature no key could have
    /// made is `signature_invalid`; one whose keys are all unregistered, `no_matching_key`.
    nonisolated(nonsending) private func recoveredKey(assertion: [UInt8], clientData: [UInt8], record: RequestRecord) async throws(GatewayError) -> ([UInt8], String, KeyCache.Entry) {
        let candidates: [RecoveredKey]
        do {
            candidates = try AssertionVerifier.candidateKeys(assertion: assertion, clientData: clientData)
        } catch {
            throw .verification(error)
        }
        guard !candidates.isEmpty else {
            throw .verification(VerificationError(.signatureInvalid, "no public key can have made this signature"))
        }
        var found: ([UInt8], KeyCache.Entry)?
        if let hit = candidates.lazy.compactMap({ candidate in self.cachedKey(candidate.keyId, count: false).map { (candidate.keyId, $0) } }).first {
            countCache(hit: true)
            found = hit
        } else {
            countCache(hit: false)
            for candidate in candidates where found == nil {
                if let entry = try await loadKey(candidate.keyId) { found = (candidate.keyId, entry) }
            }
        }
        metrics.increment("gateway_key_recoveries_total", ["result": found == nil ? "unknown" : "registered"], help: MetricHelp.keyRecoveries)
        guard let found else { throw .noMatchingKey }
        let text = Base64.encode(found.0)
        record.keyId = text
        return (found.0, text, found.1)
    }

    private func cachedKey(_ keyId: [UInt8], count: Bool = true) -> KeyCache.Entry? {
        let entry = keyCache.entry(for: keyId)
        if count { countCache(hit: entry != nil) }
        return entry
    }

    /// The two series named once: rendering the labels and finding the series per lookup cost ~6,000
    /// instructions a request.
    private static let cacheHits = Metrics.Series("gateway_key_cache_total", ["result": "hit"], help: MetricHelp.keyCache)
    private static let cacheMisses = Metrics.Series("gateway_key_cache_total", ["result": "miss"], help: MetricHelp.keyCache)

    private func countCache(hit: Bool) {
        metrics.record { $0.count(hit ? Self.cacheHits : Self.cacheMisses) }
    }

    /// Reads the key from Redis and caches it; nil when it is not registered.
    nonisolated(nonsending) private func loadKey(_ keyId: [UInt8]) async throws(GatewayError) -> KeyCache.Entry? {
        let record: PublicKeyRecord?
        do {
            record = try await store.loadPublicKey(keyId: keyId)
        } catch {
            throw GatewayError(error)
        }
        guard let record else { return nil }
        guard let stored = AppID(record.appID) else { throw .storeError("stored app id \(record.appID) is not TEAMID.bundle.id") }
        let appID = apps.first { $0 == stored } ?? stored
        let entry: KeyCache.Entry
        do {
            entry = KeyCache.Entry(publicKey: try P256PublicKey(bytes: record.publicKeySPKI), appID: appID, environment: record.environment)
        } catch {
            throw .storeError("stored public key does not parse: \(error.message)")
        }
        keyCache.store(entry, for: keyId)
        return entry
    }

    /// `X-App-Attest-Key-Id`, decoded, and its one spelling (standard base64, padded); nil when the request does
    /// not send it (or sends it once, empty).
    private func keyIdHeader(_ headers: SignedHeaders) throws(GatewayError) -> (keyId: [UInt8], text: String)? {
        let found = headers[.keyId]
        if found.count == 0 || (found.count == 1 && found.first?.isEmpty == true) { return nil }
        let text = try headers.value(.keyId)
        guard let keyId = Base64.decode(text), keyId.count == 32 else {
            throw .badHeader("X-App-Attest-Key-Id is not base64 of a 32-byte key id")
        }
        // Logged whole and in one spelling, so `gateway keys revoke` takes it from the log as is. 44
        // characters that decode to 32 bytes are that spelling unless they use the URL-safe alphabet (the
        // decoder refuses other padding and non-zero trailing bits), so the usual header is kept as sent.
        // Over the contiguous bytes: the UTF-8 view's own iteration cost ~60 instructions a character.
        let urlSafe = { (byte: UInt8) in byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_") }
        let standard = text.utf8.count == 44 && !(text.utf8.withContiguousStorageIfAvailable { $0.contains(where: urlSafe) } ?? true)
        return (keyId, standard ? text : Base64.encode(keyId))
    }
}

/// The App Attest headers of one request: each one's first value and how many times it appears, found in
/// one pass over the fields by their `KnownHeader` codes (a pass, and an array, per lookup cost ~6,000
/// instructions a request; comparing names ~2,500).
private struct SignedHeaders {
    enum Name {
        case keyId, assertion, legacyAssertion, clientData

        var text: String {
            switch self {
            case .keyId: "X-App-Attest-Key-Id"
            case .assertion: "X-App-Attest-Assertion"
            case .legacyAssertion: "X-App-Assertion"
            case .clientData: "X-App-Attest-Client-Data"
            }
        }
    }

    struct Found {
        var first: String?
        var count = 0

        mutating func note(_ value: String) {
            if count == 0 { first = value }
            count += 1
        }
    }

    private var keyId = Found(), assertion = Found(), legacyAssertion = Found(), clientData = Found()

    init(_ request: HTTPRequest) {
        for field in request.headers {
            switch field.known {
            case .xAppAttestKeyId: keyId.note(field.value)
            case .xAppAttestAssertion: assertion.note(field.value)
            case .xAppAssertion: legacyAssertion.note(field.value)
            case .xAppAttestClientData: clientData.note(field.value)
            default: continue
            }
        }
    }

    subscript(name: Name) -> Found {
        switch name {
        case .keyId: keyId
        case .assertion: assertion
        case .legacyAssertion: legacyAssertion
        case .clientData: clientData
        }
    }

    /// The header's one value, which must not be empty.
    func value(_ name: Name) throws(GatewayError) -> String {
        let found = self[name]
        guard let value = found.first, !value.isEmpty else { throw .assertionMissing("\(name.text) header is missing") }
        guard found.count == 1 else { throw .badHeader("\(name.text) appears more than once") }
        return value
    }

    /// The first of `names` present, base64-decoded.
    func decoded(_ names: [Name]) throws(GatewayError) -> [UInt8] {
        guard let name = names.first(where: { self[$0].count > 0 }) else {
            throw .assertionMissing("\(names[0].text) header is missing")
        }
        guard let bytes = Base64.decode(try value(name)) else { throw .badHeader("\(name.text) is not base64") }
        return bytes
    }
}
