import AssertionCheck
import Foundation

/// The two bits Apple keeps per device and developer team.
public struct TwoBits: Sendable, Equatable {
    public let bit0: Bool
    public let bit1: Bool
    /// "YYYY-MM" of the last update; nil when the bits were never set.
    public let lastUpdate: String?

    public init(bit0: Bool, bit1: Bool, lastUpdate: String?) {
        self.bit0 = bit0
        self.bit1 = bit1
        self.lastUpdate = lastUpdate
    }
}

/// DeviceCheck's server API: validate a device token, query and update its two bits.
/// Thread-safe; calls block the calling thread (timeouts and retries per `AppleServiceOptions`).
public final class DeviceCheckClient: Sendable {
    /// Real device tokens are 2–3 KB of base64.
    public static let maxDeviceTokenBytes = 16 * 1024
    /// Apple's answer to a query for a device whose bits were never set (HTTP 200, plain text).
    static let bitsNeverSet = "Failed to find bit state"

    private let transport: AppleTransport

    /// `baseURL`: `AppleServiceBase.deviceCheck(environment)`, or a test server.
    public init(baseURL: String, jwt: AppleJWT, options: AppleServiceOptions = AppleServiceOptions()) throws(AppleServiceError) {
        transport = try AppleTransport(baseURL: baseURL, jwt: jwt, options: options)
    }

    /// Returns when Apple accepts the token as one from a genuine device running the app.
    public func validate(deviceToken: String) throws(AppleServiceError) {
        try post(.validateDeviceToken, deviceToken: deviceToken, bits: nil) { (_: [UInt8]) in }
    }

    public func query(deviceToken: String) throws(AppleServiceError) -> TwoBits {
        try post(.queryTwoBits, deviceToken: deviceToken, bits: nil, decode: Self.twoBits)
    }

    public func update(deviceToken: String, bit0: Bool, bit1: Bool) throws(AppleServiceError) {
        try post(.updateTwoBits, deviceToken: deviceToken, bits: (bit0, bit1)) { (_: [UInt8]) in }
    }

    // The same three calls from an event loop: no thread waits for Apple.

    public func validate(deviceToken: String) async throws(AppleServiceError) {
        try await post(.validateDeviceToken, deviceToken: deviceToken, bits: nil) { (_: [UInt8]) in }
    }

    public func query(deviceToken: String) async throws(AppleServiceError) -> TwoBits {
        try await post(.queryTwoBits, deviceToken: deviceToken, bits: nil, decode: Self.twoBits)
    }

    public func update(deviceToken: String, bit0: Bool, bit1: Bool) async throws(AppleServiceError) {
        try await post(.updateTwoBits, deviceToken: deviceToken, bits: (bit0, bit1)) { (_: [UInt8]) in }
    }

    private func post<Value>(_ endpoint: AppleEndpoint, deviceToken: String, bits: (Bool, Bool)?,
                              decode: @escaping ([UInt8]) throws(AppleServiceError) -> Value) async throws(AppleServiceError) -> Value {
        let body = try Self.payload(deviceToken: deviceToken, bits: bits)
        return try await transport.post(endpoint, body: body, contentType: "application/json", authorization: .bearer) {
            (status, reply) throws(AppleServiceError) in
            guard status == 200 else { throw .badResponse("HTTP \(status) from \(endpoint.rawValue): \(AppleTransport.excerpt(reply))") }
            return try decode(reply)
        }
    }

    /// One transaction id and timestamp per call, kept across its retries (it is one transaction).
    private static func payload(deviceToken: String, bits: (Bool, Bool)?) throws(AppleServiceError) -> [UInt8] {
        guard !deviceToken.isEmpty, deviceToken.utf8.count <= Self.maxDeviceTokenBytes, Base64.decode(deviceToken) != nil else {
            throw .rejectedToken("the device token is not base64 of at most \(Self.maxDeviceTokenBytes) bytes; not sent")
        }
        let payload = DeviceCheckPayload(
            deviceToken: deviceToken, transactionID: UUID().uuidString,
            timestamp: Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)), bit0: bits?.0, bit1: bits?.1)
        guard let body = try? JSONEncoder().encode(payload) else { throw .invalidConfiguration("cannot encode the request") }
        return Array(body)
    }

    private func post<Value>(_ endpoint: AppleEndpoint, deviceToken: String, bits: (Bool, Bool)?,
                              decode: ([UInt8]) throws(AppleServiceError) -> Value) throws(AppleServiceError) -> Value {
        let body = try Self.payload(deviceToken: deviceToken, bits: bits)
        return try transport.post(endpoint, body: body, contentType: "application/json", authorization: .bearer) {
            (status, reply) throws(AppleServiceError) in
            guard status == 200 else { throw .badResponse("HTTP \(status) from \(endpoint.rawValue): \(AppleTransport.excerpt(reply))") }
            return try decode(reply)
        }
    }

    private static func twoBits(_ body: [UInt8]) throws(AppleServiceError) -> TwoBits {
        let text = String(decoding: body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if text == bitsNeverSet { return TwoBits(bit0: false, bit1: false, lastUpdate: nil) }
        guard let state = try? JSONDecoder().decode(BitState.self, from: Data(body)) else {
            throw .badResponse("query_two_bits answered neither bit state JSON nor \"\(bitsNeverSet)\": \(AppleTransport.excerpt(body))")
        }
        return TwoBits(bit0: state.bit0, bit1: state.bit1, lastUpdate: state.lastUpdateTime)
    }
}

/// The JSON body of all three DeviceCheck calls; the bits only in updates.
private struct DeviceCheckPayload: Encodable {
    let deviceToken: String
    let transactionID: String
    /// Milliseconds since 1970.
    let timestamp: Int64
    let bit0: Bool?
    let bit1: Bool?

    enum CodingKeys: String, CodingKey {
        case deviceToken = "device_token"
        case transactionID = "transaction_id"
        case timestamp, bit0, bit1
    }
}

private struct BitState: Decodable {
    let bit0: Bool
    let bit1: Bool
    let lastUpdateTime: String?

    enum CodingKeys: String, CodingKey {
        case bit0, bit1
        case lastUpdateTime = "last_update_time"
    }
}
