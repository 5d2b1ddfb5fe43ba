import EventLoop
import RedisClient
import AssertionCheck
import Foundation

/// What the gateway remembers about one attested key. Times are stored as whole Unix seconds.
public struct KeyRecord: Equatable, Sendable {
    public var keyId: [UInt8]
    public var environment: AppAttestEnvironment
    public var appID: String
    /// DER SubjectPublicKeyInfo of the P-256 key.
    public var publicKeySPKI: [UInt8]
    /// The highest sign counter accepted so far (the attestation's counter until the first assertion).
    public var counter: UInt32
    public var receipt: [UInt8]
    public var createdAt: Date
    public var revoked: Bool
    public var revokedReason: String?
    public var lastUsedAt: Date?
    /// From the last receipt refresh (Apple's risk metric: roughly, keys attested on the device in 30 days).
    public var riskMetric: Int?
    public var receiptRefreshedAt: Date?

    public init(keyId: [UInt8], environment: AppAttestEnvironment, appID: String, publicKeySPKI: [UInt8],
                counter: UInt32, receipt: [UInt8], createdAt: Date, revoked: Bool = false,
                revokedReason: String? = nil, lastUsedAt: Date? = nil) {
        self.keyId = keyId
        self.environment = environment
        self.appID = appID
        self.publicKeySPKI = publicKeySPKI
        self.counter = counter
        self.receipt = receipt
        self.createdAt = createdAt
        self.revoked = revoked
        self.revokedReason = revokedReason
        self.lastUsedAt = lastUsedAt
    }
}

/// The part of a key record an assertion is verified with (what the key cache holds, parsed).
public struct PublicKeyRecord: Equatable, Sendable {
    public let publicKeySPKI: [UInt8]
    public let appID: String
    public let environment: AppAttestEnvironment
}

extension KeyRecord {
    /// The record as the field/value pairs of its Redis hash; absent optionals are absent fields.
    var fields: [[UInt8]] {
        var pairs: [(String, [UInt8])] = [
            ("public_key", publicKeySPKI),
            ("counter", Array(String(counter).utf8)),
            ("app_id", Array(appID.utf8)),
            ("environment", Array(environment.rawValue.utf8)),
            ("receipt", receipt),
            ("created_at", Array(String(Self.seconds(createdAt)).utf8)),
            ("revoked", Array((revoked ? "1" : "0").utf8)),
        ]
        if let revokedReason { pairs.append(("revoked_reason", Array(revokedReason.utf8))) }
        if let lastUsedAt { pairs.append(("last_used_at", Array(String(Self.seconds(lastUsedAt)).utf8))) }
        return pairs.flatMap { [Array($0.0.utf8), $0.1] }
    }

    /// Rebuilds a record from HGETALL's flat field/value list.
    init(keyId: [UInt8], hashFields flat: [RedisReply]) throws(StoreError) {
        let hash = try HashFields(flat)
        guard let environment = AppAttestEnvironment(rawValue: try hash.text("environment")) else {
            throw .unexpectedReply("key record names an unknown environment")
        }
        self.init(keyId: keyId, environment: environment, appID: try hash.text("app_id"),
                  publicKeySPKI: try hash.bytes("public_key"), counter: try hash.number("counter"),
                  receipt: try hash.bytes("receipt"), createdAt: try hash.date("created_at"),
                  revoked: try hash.text("revoked") == "1", revokedReason: try hash.optional("revoked_reason", hash.text),
                  lastUsedAt: try hash.optional("last_used_at", hash.date))
        riskMetric = try hash.optional("risk_metric", hash.number)
        receiptRefreshedAt = try hash.optional("receipt_refreshed_at", hash.date)
    }

    public static func seconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970.rounded(.down)) }
}

/// Typed reads of one Redis hash; a missing or malformed field means someone else wrote the key.
private struct HashFields {
    private var values: [String: [UInt8]] = [:]

    init(_ flat: [RedisReply]) throws(StoreError) {
        for index in stride(from: 0, to: flat.count - 1, by: 2) {
            guard case .string(let name) = flat[index], case .string(let value) = flat[index + 1] else {
                throw .unexpectedReply("key record hash holds a non-string entry")
            }
            values[String(decoding: name, as: UTF8.self)] = value
        }
    }

    func bytes(_ field: String) throws(StoreError) -> [UInt8] {
        guard let value = values[field] else { throw .unexpectedReply("key record lacks field \(field)") }
        return value
    }

    func text(_ field: String) throws(StoreError) -> String {
        String(decoding: try bytes(field), as: UTF8.self)
    }

    func number<N: FixedWidthInteger>(_ field: String) throws(StoreError) -> N {
        guard let value = N(try text(field)) else { throw .unexpectedReply("key record field \(field) is not a number") }
        return value
    }

    func date(_ field: String) throws(StoreError) -> Date {
        let seconds: Int64 = try number(field)
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    func optional<T>(_ field: String, _ read: (String) throws(StoreError) -> T) throws(StoreError) -> T? {
        values[field] == nil ? nil : try read(field)
    }
}
