import AssertionCheck
import Foundation
import Synchronization

/// Apple's authenticator extensions as an iOS 27 device appends them, as one CBOR map after the
/// authenticator data (without setting the ED flag, like Apple's 2026 sample).
public struct SimulatedExtensions: Sendable, Equatable {
    public var bundleVersion: String
    /// `apple_validation_category_01`, 4 bytes.
    public var validationCategory: [UInt8]

    /// The values of Apple's 2026 documentation sample.
    public init(bundleVersion: String = "1", validationCategory: [UInt8] = [0x01, 0x00, 0x00, 0x00]) {
        self.bundleVersion = bundleVersion
        self.validationCategory = validationCategory
    }

    var cbor: CBORItem {
        .map([(.text("apple_bundle_version_01"), .text(bundleVersion)),
              (.text("apple_validation_category_01"), .bytes(validationCategory))])
    }
}

/// A fake iPhone holding one App Attest key: it attests the key through a `TestCA` and signs
/// assertions with a counter, producing objects byte-compatible with Apple's.
public final class SimulatedDevice: @unchecked Sendable {
    /// What the simulator puts where Apple puts a PKCS#7 receipt (verifiers store it, never parse it).
    public static let placeholderReceipt = Array("simulated-app-attest-receipt".utf8)
    /// AT set on attestations and, like real devices, on assertions too.
    static let flags = AuthenticatorData.flagAttestedCredentialData

    public let ca: TestCA
    public let appID: AppID
    public let environment: AppAttestEnvironment
    /// Appended to every authData / authenticatorData when set (iOS 27 style).
    public let extensions: SimulatedExtensions?
    /// SHA256 of the uncompressed public point, as `DCAppAttestService.generateKey` returns it.
    public let keyId: [UInt8]
    public let publicKey: P256PublicKey
    let key: SimKey
    // The only mutable state; assertions from many threads each get their own counter value.
    private let lastCounter = Mutex<UInt32>(0)

    /// A device with a new P-256 key.
    public init(ca: TestCA, appID: AppID, environment: AppAttestEnvironment = .development,
                extensions: SimulatedExtensions? = nil) throws(SimulatorError) {
        self.ca = ca
        self.appID = appID
        self.environment = environment
        self.extensions = extensions
        key = try SimKey(curve: .p256)
        keyId = SHA256.hash(key.publicPoint)
        do {
            publicKey = try P256PublicKey(bytes: key.publicPoint)
        } catch {
            throw .cryptoFailure("generated key is not a P-256 point: \(error)")
        }
    }

    /// Standard padded base64, as apps send the key id.
    public var keyIdBase64: String { Base64.encode(keyId) }
    /// DER SubjectPublicKeyInfo of the device key.
    public var publicKeySPKI: [UInt8] { publicKey.spki }
    /// The counter of the last `assert(clientData:faults:)` (0 before any).
    public var counter: UInt32 { lastCounter.withLock { $0 } }

    /// Attests with clientDataHash = SHA256(challenge), what Apple's guide tells apps to do.
    public func attest(challenge: [UInt8], faults: Set<AttestationFault> = []) throws(SimulatorError) -> [UInt8] {
        try attest(clientDataHash: SHA256.hash(challenge), faults: faults)
    }

    /// Signs the next counter value (the stored counter goes up by one first).
    public func assert(clientData: [UInt8], faults: Set<AssertionFault> = []) throws(SimulatorError) -> [UInt8] {
        try assert(clientDataHash: SHA256.hash(clientData), faults: faults)
    }

    /// `generateAssertion(keyId, clientDataHash:)`: signs the next counter value over a hash the app made.
    public func assert(clientDataHash: [UInt8], faults: Set<AssertionFault> = []) throws(SimulatorError) -> [UInt8] {
        let next = lastCounter.withLock { (value: inout UInt32) -> UInt32? in
            guard value < UInt32.max else { return nil }
            value += 1
            return value
        }
        guard let next else { throw .counterExhausted }
        return try assert(clientDataHash: clientDataHash, counter: next, faults: faults)
    }

    /// Signs with an explicit counter and leaves the device's counter alone (replays, reordering, benchmarks).
    public func assert(clientData: [UInt8], counter: UInt32, faults: Set<AssertionFault> = []) throws(SimulatorError) -> [UInt8] {
        try assert(clientDataHash: SHA256.hash(clientData), counter: counter, faults: faults)
    }

    private func assert(clientDataHash: [UInt8], counter: UInt32, faults: Set<AssertionFault>) throws(SimulatorError) -> [UInt8] {
        var authenticatorData = rpIdHash(wrong: faults.contains(.wrongAppID)) + [SimulatedDevice.flags]
            + bigEndian(UInt64(counter), bytes: 4)
        if let extensions { authenticatorData += extensions.cbor.encoded }
        if faults.contains(.trailingBytesAfterAuthenticatorData) { authenticatorData += SimulatedDevice.notCBORMap }
        // Apple signs the nonce with ECDSA-SHA256, so the ECDSA digest is SHA256(nonce).
        let nonce = SHA256.hash(authenticatorData, clientDataHash)
        let signer = faults.contains(.signedByOtherKey) ? try SimKey(curve: .p256) : key
        var signature = try signer.signature(over: nonce)
        if faults.contains(.corruptedSignature) { signature[signature.count - 1] ^= 0x01 }

        let object: CBORItem
        if faults.contains(.notAMap) {
            object = .array([.bytes(signature), .bytes(authenticatorData)])
        } else if faults.contains(.missingSignature) {
            object = .map([(.text("authenticatorData"), .bytes(authenticatorData))])
        } else {
            object = .map([(.text("signature"), .bytes(signature)), (.text("authenticatorData"), .bytes(authenticatorData))])
        }
        return object.encoded
    }

    /// The client data a gateway app signs for one HTTP request: compact JSON with `challenge`, `method`,
    /// `path`, `bodySHA256` (standard base64 of SHA-256 of the exact body) and `query` only when non-nil.
    public static func requestClientData(challenge: String, method: String, path: String, query: String?,
                                         body: [UInt8]) -> [UInt8] {
        var fields = [("challenge", challenge), ("method", method), ("path", path),
                      ("bodySHA256", Base64.encode(SHA256.hash(body)))]
        if let query { fields.append(("query", query)) }
        return Array(JSONText.object(fields).utf8)
    }

    /// SHA256 of the device's App ID, or of a sibling App ID the verifier must reject.
    func rpIdHash(wrong: Bool) -> [UInt8] {
        wrong ? AppID(teamID: appID.teamID, bundleID: appID.bundleID + ".other").rpIdHash : appID.rpIdHash
    }

    /// Trailing bytes that are not a CBOR map (0xDE starts a reserved CBOR head).
    static let notCBORMap: [UInt8] = [0xDE, 0xAD, 0xBE, 0xEF]
}
