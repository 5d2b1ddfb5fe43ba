import AssertionCheck
import Foundation

/// What Apple's attestationData endpoint answered.
public enum ReceiptRefresh: Sendable, Equatable {
    /// HTTP 200: a new receipt (DER PKCS#7, type RECEIPT, with the risk metric); verify it with
    /// `ReceiptVerifier` and keep it for the next exchange.
    case refreshed([UInt8])
    /// HTTP 304: asked before the current receipt's "not before" time; keep using the one you have.
    case tooEarly
    /// HTTP 404: Apple has no data for this key any more (no exchange for a long time).
    case noData
}

/// App Attest's receipt exchange: trade the stored receipt for a new one carrying a fresh risk metric.
/// Thread-safe; calls block the calling thread (timeouts and retries per `AppleServiceOptions`).
public final class ReceiptRefreshClient: Sendable {
    private let transport: AppleTransport

    /// `baseURL`: `AppleServiceBase.appAttestData(environment)`, or a test server.
    public init(baseURL: String, jwt: AppleJWT, options: AppleServiceOptions = AppleServiceOptions()) throws(AppleServiceError) {
        transport = try AppleTransport(baseURL: baseURL, jwt: jwt, options: options)
    }

    /// `receipt`: the DER receipt from the attestation, or the last one this endpoint returned.
    public func exchange(receipt: [UInt8]) throws(AppleServiceError) -> ReceiptRefresh {
        guard !receipt.isEmpty, receipt.count <= ReceiptVerifier.maxReceiptBytes else {
            throw .rejectedToken("the receipt is \(receipt.count) bytes, expected 1 to \(ReceiptVerifier.maxReceiptBytes); not sent")
        }
        return try transport.post(.attestationData, body: Array(Base64.encode(receipt).utf8), contentType: nil,
                                  authorization: .bare) { (status, reply) throws(AppleServiceError) in
            switch status {
            case 200:
                let text = String(decoding: reply, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                guard let receipt = Base64.decode(text), !receipt.isEmpty else {
                    throw .badResponse("attestationData answered 200 without a base64 receipt: \(AppleTransport.excerpt(reply))")
                }
                return .refreshed(receipt)
            case 304: return .tooEarly
            case 404: return .noData
            default: throw .badResponse("HTTP \(status) from attestationData: \(AppleTransport.excerpt(reply))")
            }
        }
    }
}
