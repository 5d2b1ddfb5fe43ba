import RedisClient
import EventLoop
import AttestStore
import AssertionCheck

/// The attested public keys, kept in process: a key never changes after registration, only its counter
/// and revocation do, and those live in Redis. Bounded by two generations: when the young one is full it
/// becomes the old one, so memory stays within `capacity` entries and recently used keys survive (a hit in
/// the old generation is promoted).
public final class KeyCache: Sendable {
    public struct Entry: Sendable {
        /// The key's uncompressed point, checked on the curve when the entry was made. Not an OpenSSL key
        /// object: those cost about a kilobyte each (an EC_POINT of three BIGNUMs), where remaking one per
        /// request costs microseconds.
        public let point: [UInt8]
        /// The configured app's own value, shared by every entry of that app.
        public let appID: AppID
        public let environment: AppAttestEnvironment

        public init(publicKey: P256PublicKey, appID: AppID, environment: AppAttestEnvironment) {
            point = publicKey.point
            self.appID = appID
            self.environment = environment
        }

        /// The key, ready to verify with.
        public func publicKey() throws(VerificationError) -> P256PublicKey { try P256PublicKey(point: point) }
    }

    private struct Generations {
        var young: [[UInt8]: Entry] = [:]
        var old: [[UInt8]: Entry] = [:]
    }

    private let generations = Locked(Generations())
    /// 0 when caching is off (`key_cache_size: 0`).
    private let generationSize: Int

    public init(capacity: Int) {
        generationSize = capacity <= 0 ? 0 : max(1, capacity / 2)
    }

    public func entry(for keyId: [UInt8]) -> Entry? {
        guard generationSize > 0 else { return nil }
        return generations.withLock { state in
            if let entry = state.young[keyId] { return entry }
            guard let entry = state.old[keyId] else { return nil }
            Self.insert(keyId, entry, into: &state, generationSize: generationSize)
            return entry
        }
    }

    public func store(_ entry: Entry, for keyId: [UInt8]) {
        guard generationSize > 0 else { return }
        generations.withLock { Self.insert(keyId, entry, into: &$0, generationSize: generationSize) }
    }

    public var count: Int { generations.withLock { $0.young.count + $0.old.count } }

    private static func insert(_ keyId: [UInt8], _ entry: Entry, into state: inout Generations, generationSize: Int) {
        if state.young.count >= generationSize {
            state.old = state.young
            state.young = [:]
        }
        state.young[keyId] = entry
    }
}
