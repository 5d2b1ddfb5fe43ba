import EventLoop
import AssertionCheck
import RedisClient

/// The Redis key layout. Everything about one App Attest key shares the hash tag `{<key id>}`, so
/// each script touches a single Redis Cluster slot:
///
///     <prefix>:{<key id>}:<environment>:key   hash: the key record (`KeyRecord.fields`)
///     <prefix>:{<key id>}:<environment>:win   sorted set: counters accepted below the highest (window > 0)
///     <prefix>:{<key id>}:ch:<challenge id>   string, TTL: a challenge this key spent in an assertion
///     <prefix>:{<key id>}:claim:<route>       string, TTL: a `once_per_device` request of the key in flight
///     <prefix>:{<key id>}:rate:<route>        integer, TTL: the key's accepted assertions in the current `rate_limit` window
///     <prefix>:ch:{<challenge id>}            string, TTL: a challenge spent by a registration
///     <prefix>:challenge-secret                string: the challenge HMAC secret, when no file gives one
///     <prefix>:dt:{<SHA-256 of device token>}  string, TTL: a DeviceCheck token already used once
///     <prefix>:receipt-refresh                 sorted set: "<environment>:<key id>" by next refresh time
///
/// The environment is part of the record's name, so development and production keys never share a
/// record, but it sits outside the hash tag: a lookup by key id alone reads both environments in one
/// script on one slot. Key ids appear base64url-encoded (no padding).
struct StoreKeys: Sendable {
    static let maxKeyIdBytes = 64
    static let maxChallengeBytes = 256

    let prefix: String
    private let prefixBytes: [UInt8]

    init(prefix: String) throws(StoreError) {
        let allowed = prefix.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "{") && $0 != UInt8(ascii: "}") }
        guard !prefix.isEmpty, prefix.utf8.count <= 64, allowed else {
            throw .invalidArgument("key prefix must be 1-64 printable ASCII characters without braces or spaces")
        }
        self.prefix = prefix
        prefixBytes = Array(prefix.utf8)
    }

    /// Key ids and challenges come from clients: anything outside these bounds cannot have been stored.
    static func isPlausible(keyId: [UInt8]) -> Bool { (1...maxKeyIdBytes).contains(keyId.count) }
    static func isPlausible(challenge: String) -> Bool { (1...maxChallengeBytes).contains(challenge.utf8.count) }

    /// The names of one App Attest key's slot, all starting `<prefix>:{<key id>}:`. That start is made once
    /// for the several names of one script: made per name (a base64 encoding and a string interpolation
    /// each) it cost ~5,000 instructions a name on the assert route.
    struct Slot {
        /// `<prefix>:{<key id>}:`. Its hash tag is every name's: as a command's key it places the command on
        /// the slot's Cluster node.
        let start: [UInt8]

        fileprivate init(_ prefix: [UInt8], keyId: [UInt8]) {
            // One buffer sized once, the encoding copied from its UTF-8 storage (appends of string views,
            // and an append to an empty array that adopts the prefix's buffer, cost ~450 more).
            var encoded = Base64.encodeURLSafe(keyId)
            var start = prefix
            start.reserveCapacity(prefix.count + encoded.utf8.count + 4)
            start.append(UInt8(ascii: ":"))
            start.append(UInt8(ascii: "{"))
            encoded.withUTF8 { start.append(contentsOf: $0) }
            start.append(UInt8(ascii: "}"))
            start.append(UInt8(ascii: ":"))
            self.start = start
        }

        /// What follows the start in one name, in two parts: joined only where the name is written.
        struct Suffix {
            let first: String
            let second: String

            static func record(_ environment: AppAttestEnvironment) -> Suffix { Suffix(first: environment.rawValue, second: ":key") }
            static func window(_ environment: AppAttestEnvironment) -> Suffix { Suffix(first: environment.rawValue, second: ":win") }
            /// An assertion's spent challenge, in the slot of its key (one script, one Cluster slot).
            static func spentChallenge(_ id: String) -> Suffix { Suffix(first: "ch:", second: id) }
            static func claim(route: String) -> Suffix { Suffix(first: "claim:", second: route) }
            static func rate(route: String) -> Suffix { Suffix(first: "rate:", second: route) }
        }

        func record(_ environment: AppAttestEnvironment) -> [UInt8] { name(.record(environment)) }
        func window(_ environment: AppAttestEnvironment) -> [UInt8] { name(.window(environment)) }
        func spentChallenge(_ id: String) -> [UInt8] { name(.spentChallenge(id)) }
        func claim(route: String) -> [UInt8] { name(.claim(route: route)) }
        func rate(route: String) -> [UInt8] { name(.rate(route: route)) }

        /// The name as the next argument of a command, written there directly.
        func append(_ suffix: Suffix, to arguments: inout RedisArguments) {
            arguments.append(start, suffix.first, suffix.second)
        }

        private func name(_ suffix: Suffix) -> [UInt8] {
            var name = start
            name.reserveCapacity(start.count + suffix.first.utf8.count + suffix.second.utf8.count)
            name += suffix.first.utf8
            name += suffix.second.utf8
            return name
        }
    }

    func slot(_ keyId: [UInt8]) -> Slot { Slot(prefixBytes, keyId: keyId) }

    /// Where a spent challenge is recorded: an assertion's in the slot of its key (one script, one Cluster
    /// slot), a registration's under its own tag.
    func spentChallenge(_ id: String, keyId: [UInt8]?) -> [UInt8] {
        guard let keyId else { return Array("\(prefix):ch:{\(id)}".utf8) }
        return slot(keyId).spentChallenge(id)
    }

    var challengeSecret: [UInt8] { Array("\(prefix):challenge-secret".utf8) }

    func record(keyId: [UInt8], environment: AppAttestEnvironment) -> [UInt8] { slot(keyId).record(environment) }

    func window(keyId: [UInt8], environment: AppAttestEnvironment) -> [UInt8] { slot(keyId).window(environment) }

    /// The records to look at: the given environment's, or every environment's when it is not known.
    func records(keyId: [UInt8], environment: AppAttestEnvironment?) -> [[UInt8]] {
        let slot = slot(keyId)
        return (environment.map { [$0] } ?? AppAttestEnvironment.allCases).map(slot.record)
    }

    func claim(keyId: [UInt8], route: String) -> [UInt8] { slot(keyId).claim(route: route) }

    func rate(keyId: [UInt8], route: String) -> [UInt8] { slot(keyId).rate(route: route) }

    func usedDeviceToken(_ token: [UInt8]) -> [UInt8] {
        Array("\(prefix):dt:{\(Bytes.hex(SHA256.hash(token)))}".utf8)
    }

    var receiptSchedule: [UInt8] { Array("\(prefix):receipt-refresh".utf8) }

    static func scheduleMember(keyId: [UInt8], environment: AppAttestEnvironment) -> [UInt8] {
        Array("\(environment.rawValue):\(Base64.encodeURLSafe(keyId))".utf8)
    }

    static func parseScheduleMember(_ member: [UInt8]) -> (keyId: [UInt8], environment: AppAttestEnvironment)? {
        let text = String(decoding: member, as: UTF8.self)
        guard let colon = text.firstIndex(of: ":"), let environment = AppAttestEnvironment(rawValue: String(text[..<colon])),
              let keyId = Base64.decode(text[text.index(after: colon)...]) else { return nil }
        return (keyId, environment)
    }
}
