import EventLoop
import RedisClient
import AssertionCheck
import Foundation

/// State for Apple's server APIs: used DeviceCheck tokens and the receipt-refresh schedule.
extension AttestStore {
    /// True the first time this device token is presented within `ttlSeconds` (a token is single-use here,
    /// so a captured one cannot be replayed on a fallback route).
    public func consumeDeviceToken(_ token: [UInt8], ttlSeconds: Int) throws(StoreError) -> Bool {
        try transport.perform(consumeOperation(token, ttlSeconds: ttlSeconds))
    }

    public func consumeDeviceToken(_ token: [UInt8], ttlSeconds: Int) async throws(StoreError) -> Bool {
        try await transport.perform(consumeOperation(token, ttlSeconds: ttlSeconds))
    }

    private func consumeOperation(_ token: [UInt8], ttlSeconds: Int) -> Prepared<Bool> {
        let command = [Array("SET".utf8), keys.usedDeviceToken(token)] + ["1", "NX", "EX", String(ttlSeconds)].map { Array($0.utf8) }
        return .send(.keyed(command)) { (reply) throws(StoreError) -> Bool in try Self.setIfAbsent(reply, "SET of a used device token") }
    }

    /// SET … NX: true when it set the key, false when the key was there.
    private static func setIfAbsent(_ reply: RedisReply, _ context: String) throws(StoreError) -> Bool {
        switch reply {
        case .status("OK"): return true
        case .null: return false
        default: throw reply.storeError(context: context)
        }
    }

    /// Marks a `once_per_device` request of this key on this route as in flight until `releaseClaim` or `ttlMs`
    /// (the lease outlives a gateway that dies mid-request); false while another one is.
    public func claimInFlight(keyId: [UInt8], route: String, ttlMs: Int) throws(StoreError) -> Bool {
        try transport.perform(claimOperation(keyId: keyId, route: route, ttlMs: ttlMs))
    }

    public func claimInFlight(keyId: [UInt8], route: String, ttlMs: Int) async throws(StoreError) -> Bool {
        try await transport.perform(claimOperation(keyId: keyId, route: route, ttlMs: ttlMs))
    }

    private func claimOperation(keyId: [UInt8], route: String, ttlMs: Int) -> Prepared<Bool> {
        let command = [Array("SET".utf8), keys.claim(keyId: keyId, route: route)] + ["1", "NX", "PX", String(ttlMs)].map { Array($0.utf8) }
        return .send(.keyed(command)) { (reply) throws(StoreError) -> Bool in try Self.setIfAbsent(reply, "SET of an in-flight claim") }
    }

    public func releaseClaim(keyId: [UInt8], route: String) throws(StoreError) {
        _ = try transport.sendBlocking(.keyed([Array("DEL".utf8), keys.claim(keyId: keyId, route: route)]))
    }

    public func releaseClaim(keyId: [UInt8], route: String) async throws(StoreError) {
        _ = try await transport.send(.keyed([Array("DEL".utf8), keys.claim(keyId: keyId, route: route)]))
    }

    /// Puts the key on the receipt-refresh schedule (or moves it) for `at`.
    public func scheduleReceiptRefresh(keyId: [UInt8], environment: AppAttestEnvironment, at: Date) throws(StoreError) {
        let command = [Array("ZADD".utf8), keys.receiptSchedule, Array(String(KeyRecord.seconds(at)).utf8),
                       StoreKeys.scheduleMember(keyId: keyId, environment: environment)]
        let reply = try transport.sendBlocking(.keyed(command))
        guard case .integer = reply else { throw reply.storeError(context: "ZADD to the receipt schedule") }
    }

    public func unscheduleReceiptRefresh(keyId: [UInt8], environment: AppAttestEnvironment) throws(StoreError) {
        let command = [Array("ZREM".utf8), keys.receiptSchedule, StoreKeys.scheduleMember(keyId: keyId, environment: environment)]
        _ = try transport.sendBlocking(.keyed(command))
    }

    /// Up to `limit` keys whose refresh is due at `now`, each leased to this caller until `leaseUntil`
    /// (keys another gateway claimed first are skipped).
    public func claimDueReceipts(now: Date, leaseUntil: Date, limit: Int) throws(StoreError) -> [(keyId: [UInt8], environment: AppAttestEnvironment)] {
        let range = [Array("ZRANGEBYSCORE".utf8), keys.receiptSchedule] + ["-inf", String(KeyRecord.seconds(now)), "LIMIT", "0", String(limit)].map { Array($0.utf8) }
        let reply = try transport.sendBlocking(.keyed(range))
        guard case .array(let members) = reply else { throw reply.storeError(context: "ZRANGEBYSCORE of the receipt schedule") }
        var claimed: [(keyId: [UInt8], environment: AppAttestEnvironment)] = []
        for case .string(let member) in members {
            let arguments = [member, Array(String(KeyRecord.seconds(now)).utf8), Array(String(KeyRecord.seconds(leaseUntil)).utf8)]
            let won = try transport.sendBlocking(.script(scripts.claimReceiptRefresh, keys: [keys.receiptSchedule], arguments: arguments))
            guard try Self.integer(won, from: scripts.claimReceiptRefresh) == 1 else { continue }
            if let entry = StoreKeys.parseScheduleMember(member) { claimed.append(entry) }
        }
        return claimed
    }

    /// Stores a refreshed receipt and what it said; false when the key no longer exists.
    public func storeReceipt(keyId: [UInt8], environment: AppAttestEnvironment, receipt: [UInt8], riskMetric: Int?,
                             at now: Date) throws(StoreError) -> Bool {
        let arguments = [receipt, Array((riskMetric.map(String.init) ?? "").utf8), Array(String(KeyRecord.seconds(now)).utf8)]
        let reply = try transport.sendBlocking(.script(scripts.storeReceipt, keys: [keys.record(keyId: keyId, environment: environment)],
                                                       arguments: arguments))
        return try Self.integer(reply, from: scripts.storeReceipt) == 1
    }
}
