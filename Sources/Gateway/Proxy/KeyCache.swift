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
        /// The key as OpenSSL verifies with it, its point checked on the curve once, when the entry was made.
        /// Remaking it from the 65 bytes cost about 14,000 instructions a request; keeping it costs about
        /// 300 bytes a key (an EC_POINT of three 4-word BIGNUMs). An EC_KEY or EVP_PKEY per key would save
        /// only ~3,000 more and cost ~2 KiB each (each holds a copy of the curve group).
        public let publicKey: P256PublicKey
        /// The configured app's own value, shared by every entry of that app.
        public let appID: AppID
        public let environment: AppAttestEnvironment

        public init(publicKey: P256PublicKey, appID: AppID, environment: AppAttestEnvironment) {
            self.publicKey = publicKey
            self.appID = appID
            self.environment = environment
        }
    }

    /// A key id as a dictionary key, hashed as one run of bytes: an array's own hash feeds the hasher a
    /// byte at a time (~800 instructions a lookup for a 32-byte id).
    private struct KeyID: Hashable {
        let bytes: [UInt8]

        func hash(into hasher: inout Hasher) {
            bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    private struct Generations {
        var young: [KeyID: Entry] = [:]
        var old: [KeyID: Entry] = [:]
    }

    private let generations = Locked(Generations())
    /// 0 when caching is off (`key_cache_size: 0`).
    private let generationSize: Int

    public init(capacity: Int) {
        generationSize = capacity <= 0 ? 0 : max(1, capacity / 2)
    }

    public func entry(for keyId: [UInt8]) -> Entry? {
        guard generationSize > 0 else { return nil }
        let keyId = KeyID(bytes: keyId)
        return generations.withLock { state in
            if let entry = state.young[keyId] { return entry }
            guard let entry = state.old[keyId] else { return nil }
            Self.insert(keyId, entry, into: &state, generationSize: generationSize)
            return entry
        }
    }

    public func store(_ entry: Entry, for keyId: [UInt8]) {
        guard generationSize > 0 else { return }
        generations.withLock { Self.insert(KeyID(bytes: keyId), entry, into: &$0, generationSize: generationSize) }
    }

    public var count: Int { generations.withLock { $0.young.count + $0.old.count } }

    private static func insert(_ keyId: KeyID, _ entry: Entry, into state: inout Generations, generationSize: Int) {
        if state.young.count >= generationSize {
            state.old = state.young
            state.young = [:]
        }
        state.young[keyId] = entry
    }
}
