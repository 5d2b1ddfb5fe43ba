import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation

/// What a challenge is for. The kind is part of the MAC'd bytes, so an attestation challenge is never
/// taken for an assertion challenge or the other way round.
enum ChallengeKind: UInt8, Sendable {
    case attest = 1
    case assert = 2
    /// Echoed as a Play Integrity request's `nonce` (classic) or `requestHash` (standard).
    case playIntegrity = 3
}

/// Self-authenticating challenges: issuing one writes nothing anywhere. A challenge is
///
///     base64url(version ‖ kind ‖ expiry ‖ nonce ‖ HMAC-SHA256(secret, domain ‖ version ‖ kind ‖ expiry ‖ nonce [‖ key id]))
///
/// with version 1, kind 1 (attest), 2 (assert) or 3 (Play Integrity), bit 0x80 of the kind byte set when it was issued for one
/// key id (`/assert/challenge?key_id=`, the key id then enters the MAC), expiry in Unix seconds (4 bytes,
/// big-endian) and 16 random bytes: 54 bytes, 72 ASCII characters. Single use is enforced where it is
/// spent (`AttestStore.commitAssertion`, `spendChallenge`), which remembers the nonce until the expiry.
struct ChallengeCodec: Sendable {
    static let version: UInt8 = 1
    static let boundFlag: UInt8 = 0x80
    static let nonceBytes = 16
    static let macBytes = 32
    static let headerBytes = 2 + 4 + nonceBytes
    static let encodedLength = 72
    /// Added to a spent challenge's record so a gateway whose clock is a little behind still finds it.
    static let clockSkewMs = 5_000
    /// What every MAC'd message starts with (`ChallengeSecrets` hashes it once per key).
    static let domain = Array("app-attest-gateway challenge".utf8)

    /// The first signs; every one verifies (the second is the previous secret during a rotation).
    let secrets: ChallengeSecrets

    func issue(_ kind: ChallengeKind, keyId: [UInt8]? = nil, ttlSeconds: Int, now: Date = Date()) -> String {
        let expiry = UInt32(clamping: Int64(now.timeIntervalSince1970.rounded(.down)) + Int64(ttlSeconds))
        var bytes = [Self.version, kind.rawValue | (keyId == nil ? 0 : Self.boundFlag)]
        bytes += (0..<4).reversed().map { UInt8(truncatingIfNeeded: expiry >> ($0 * 8)) }
        bytes += SecureRandom.bytes(Self.nonceBytes)
        bytes += secrets.signing.mac(bytes[...], keyId ?? [])
        return Base64.encodeURLSafe(bytes)
    }

    /// Whether `text` claims to be issued for one key id (then `check` needs that key id); false for
    /// anything that is not a challenge at all.
    static func isBound(_ text: String) -> Bool {
        isBound(ArraySlice(text.utf8))
    }

    /// The same over the challenge's bytes (as client data carries it).
    static func isBound(_ text: ArraySlice<UInt8>) -> Bool {
        guard let bytes = decode(text) else { return false }
        return bytes[1] & boundFlag != 0
    }

    /// Checks the MAC (with `keyId` when the challenge was issued for one), then the kind, then the expiry,
    /// and answers what the store needs to spend it.
    func check(_ text: String, kind: ChallengeKind, keyId: [UInt8]?, now: Date = Date()) throws(GatewayError) -> ChallengeUse {
        try check(ArraySlice(text.utf8), kind: kind, keyId: keyId, now: now)
    }

    /// The same over the challenge's bytes (as client data carries it).
    func check(_ text: ArraySlice<UInt8>, kind: ChallengeKind, keyId: [UInt8]?, now: Date = Date()) throws(GatewayError) -> ChallengeUse {
        guard let bytes = Self.decode(text) else { throw .challengeInvalid }
        let bound = bytes[1] & Self.boundFlag != 0
        guard !bound || keyId != nil else { throw .challengeInvalid }
        let signed = bytes[..<Self.headerBytes], boundTo = bound ? keyId ?? [] : []
        let mac = bytes[Self.headerBytes...]
        // Each secret's MAC compared in constant time (`matches`), as values: no array per MAC.
        var valid = false
        for secret in secrets.all where !valid { valid = secret.digest(signed, boundTo[...]).matches(mac) }
        guard valid else { throw .challengeInvalid }
        guard bytes[1] & ~Self.boundFlag == kind.rawValue else { throw .challengeWrongKind }
        let expiry = Int64(bytes[2]) << 24 | Int64(bytes[3]) << 16 | Int64(bytes[4]) << 8 | Int64(bytes[5])
        let remainingMs = expiry * 1000 - Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        guard remainingMs > 0 else { throw .challengeExpired }
        return ChallengeUse(id: Base64.encodeURLSafe(bytes[6..<Self.headerBytes]),
                            ttlMs: Int(min(remainingMs + Int64(Self.clockSkewMs), Int64(ChallengeUse.maxTTLMs))))
    }

    /// The 54 bytes of a well-formed challenge of this version, or nil. Clients that treat the challenge as
    /// bytes and put base64 of them in their client data (96 characters) are understood too.
    private static func decode(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        if text.count == 96, let inner = Base64.decode(utf8: text), inner.count == encodedLength {
            return decode(inner[...])
        }
        guard text.count == encodedLength, let bytes = Base64.decode(utf8: text),
              bytes.count == headerBytes + macBytes, bytes[0] == version else { return nil }
        return ChallengeKind(rawValue: bytes[1] & ~boundFlag) == nil ? nil : bytes
    }
}

/// The HMAC keys challenges are made with. Never printed: `description` and the mirror are redacted.
/// A class: every assert request copies the codec out of `ChallengeAuthority`, and as a struct its hash
/// states (~240 bytes and an array) were copied and destroyed each time.
final class ChallengeSecrets: Sendable, CustomStringConvertible, CustomReflectable {
    static let minimumBytes = 32

    let signing: HMACSHA256
    /// `signing` first, then the previous secret, if any.
    let all: [HMACSHA256]

    /// `secrets[0]` signs; `secrets[1]`, when given, is still accepted.
    init(_ secrets: [[UInt8]]) {
        let keys = secrets.map { HMACSHA256(key: $0, messagePrefix: ChallengeCodec.domain) }
        signing = keys[0]
        all = keys
    }

    var description: String { "ChallengeSecrets(<redacted>)" }
    var customMirror: Mirror { Mirror(self, children: []) }
}

/// Where a runtime's challenge secrets come from: `app_attest.challenge_secret_file`, or the secret all
/// gateways on the same Redis share, generated by whichever asks first (read once per process, and again
/// only when the runtime is rebuilt for another Redis).
final class ChallengeAuthority: Sendable {
    private let store: AttestStore
    private let fromFile: Bool
    private let loaded: Locked<ChallengeCodec?>

    init(configured: ChallengeSecrets?, store: AttestStore, previous: ChallengeAuthority?) {
        self.store = store
        fromFile = configured != nil
        if let configured {
            loaded = Locked(ChallengeCodec(secrets: configured))
        } else if let previous, !previous.fromFile, previous.store === store {
            // A secret read from the same Redis stays valid: no reason to ask again.
            loaded = Locked(previous.loaded.withLock { $0 })
        } else {
            loaded = Locked(nil)
        }
    }

    /// The codec, asking Redis for the shared secret the first time (a failure is retried on the next call).
    nonisolated(nonsending) func codec() async throws(GatewayError) -> ChallengeCodec {
        if let codec = loaded.withLock({ $0 }) { return codec }
        do {
            return install(try await store.sharedChallengeSecret(candidate: Self.candidate()))
        } catch {
            throw GatewayError(error)
        }
    }

    /// The same for a thread that may block (registration).
    func codecBlocking() throws(GatewayError) -> ChallengeCodec {
        if let codec = loaded.withLock({ $0 }) { return codec }
        do {
            return install(try store.sharedChallengeSecret(candidate: Self.candidate()))
        } catch {
            throw GatewayError(error)
        }
    }

    private static func candidate() -> [UInt8] { Array(Base64.encode(SecureRandom.bytes(32)).utf8) }

    private func install(_ secret: [UInt8]) -> ChallengeCodec {
        let codec = ChallengeCodec(secrets: ChallengeSecrets([secret]))
        loaded.withLock { $0 = codec }
        return codec
    }
}
