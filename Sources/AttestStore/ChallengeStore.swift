import EventLoop
import AssertionCheck

/// A verified challenge being spent (see `ChallengeCodec`): Redis keeps it only while it could still be used.
public struct ChallengeUse: Sendable, Equatable {
    /// The challenge's random part, base64url.
    public let id: String
    /// The challenge's remaining lifetime: how long the record of its use is kept.
    public let ttlMs: Int

    public init(id: String, ttlMs: Int) {
        self.id = id
        self.ttlMs = ttlMs
    }

    public static let maxTTLMs = 86_400_000

    private static func isIdByte(_ byte: UInt8) -> Bool {
        byte > 0x20 && byte < 0x7F && byte != UInt8(ascii: "{") && byte != UInt8(ascii: "}")
    }

    func validate() throws(StoreError) {
        // Over the contiguous bytes: the UTF-8 view's own iteration cost ~850 instructions an assertion.
        let printable = id.utf8.withContiguousStorageIfAvailable { $0.allSatisfy(Self.isIdByte) } ?? id.utf8.allSatisfy(Self.isIdByte)
        guard (1...64).contains(id.utf8.count), printable else {
            throw .invalidArgument("challenge id must be 1-64 printable ASCII characters without braces")
        }
        guard (1...Self.maxTTLMs).contains(ttlMs) else { throw .invalidArgument("challenge TTL must be 1-\(Self.maxTTLMs) ms, got \(ttlMs)") }
    }
}

extension AttestStore {
    /// Records the use of a challenge that is not part of an assertion commit (registration): true the
    /// first time, false when it was used before.
    public func spendChallenge(_ challenge: ChallengeUse) throws(StoreError) -> Bool {
        try transport.perform(spendOperation(challenge))
    }

    public func spendChallenge(_ challenge: ChallengeUse) async throws(StoreError) -> Bool {
        try await transport.perform(spendOperation(challenge))
    }

    private func spendOperation(_ challenge: ChallengeUse) throws(StoreError) -> Prepared<Bool> {
        try challenge.validate()
        let script = scripts.spendChallenge
        return .send(.script(script, keys: [keys.spentChallenge(challenge.id, keyId: nil)], arguments: [Array(String(challenge.ttlMs).utf8)])) {
            (reply) throws(StoreError) -> Bool in try Self.integer(reply, from: script) == 1
        }
    }

    /// The challenge HMAC secret every gateway on this Redis shares: `candidate` if none was stored yet
    /// (SET NX: the first gateway to ask decides), otherwise the stored one.
    public func sharedChallengeSecret(candidate: [UInt8]) throws(StoreError) -> [UInt8] {
        try transport.perform(secretOperation(candidate: candidate))
    }

    public func sharedChallengeSecret(candidate: [UInt8]) async throws(StoreError) -> [UInt8] {
        try await transport.perform(secretOperation(candidate: candidate))
    }

    private func secretOperation(candidate: [UInt8]) -> Prepared<[UInt8]> {
        .send(.script(scripts.challengeSecret, keys: [keys.challengeSecret], arguments: [candidate])) { (reply) throws(StoreError) -> [UInt8] in
            switch reply {
            case .string(let secret) where secret.count >= 32: return secret
            case .string: throw .unexpectedReply("the challenge secret stored in Redis is shorter than 32 bytes")
            default: throw reply.storeError(context: "script challenge_secret")
            }
        }
    }
}
