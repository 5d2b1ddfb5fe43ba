import Foundation

/// The fields of a Play Integrity verdict (`tokenPayloadExternal`) the gateway judges, read from its JSON.
/// Classic and standard verdicts have the same shape; a classic one carries `nonce`, a standard one
/// `requestHash`. Google writes int64 fields as JSON strings; numbers are accepted too.
public struct IntegrityVerdict: Sendable, Equatable {
    public let requestPackageName: String
    public let nonce: String?
    public let requestHash: String?
    public let timestampMillis: Int64
    public let appRecognitionVerdict: String?
    public let packageName: String?
    /// base64url as Play writes them; decoded when judged.
    public let certificateDigests: [String]
    public let versionCode: Int64?
    public let deviceRecognitionVerdict: [String]
    public let appLicensingVerdict: String?

    public init(json: [UInt8]) throws(IntegrityError) {
        guard let root = IntegrityToken.jsonObject(json) else { throw IntegrityError(.payloadInvalid, "the verdict is not a JSON object") }
        guard let request = root["requestDetails"] as? [String: Any], let package = request["requestPackageName"] as? String,
              let timestamp = Self.int64(request["timestampMillis"]) else {
            throw IntegrityError(.payloadInvalid, "requestDetails must have requestPackageName and timestampMillis")
        }
        let app = try Self.object(root, "appIntegrity")
        let device = try Self.object(root, "deviceIntegrity")
        let account = try Self.object(root, "accountDetails")
        requestPackageName = package
        nonce = try Self.string(request, "nonce")
        requestHash = try Self.string(request, "requestHash")
        timestampMillis = timestamp
        appRecognitionVerdict = try Self.string(app, "appRecognitionVerdict")
        packageName = try Self.string(app, "packageName")
        guard let digests = app["certificateSha256Digest"].map({ $0 as? [String] }) ?? [] else {
            throw IntegrityError(.payloadInvalid, "appIntegrity.certificateSha256Digest must be a list of strings")
        }
        certificateDigests = digests
        versionCode = app["versionCode"].flatMap(Self.int64)
        guard let labels = device["deviceRecognitionVerdict"].map({ $0 as? [String] }) ?? [] else {
            throw IntegrityError(.payloadInvalid, "deviceIntegrity.deviceRecognitionVerdict must be a list of strings")
        }
        deviceRecognitionVerdict = labels
        appLicensingVerdict = try Self.string(account, "appLicensingVerdict")
    }

    /// An absent section reads as empty (Play leaves out what it did not evaluate); a present one must be an object.
    private static func object(_ root: [String: Any], _ key: String) throws(IntegrityError) -> [String: Any] {
        guard let value = root[key] else { return [:] }
        guard let object = value as? [String: Any] else { throw IntegrityError(.payloadInvalid, "\(key) is not an object") }
        return object
    }

    private static func string(_ object: [String: Any], _ key: String) throws(IntegrityError) -> String? {
        guard let value = object[key] else { return nil }
        guard let text = value as? String else { throw IntegrityError(.payloadInvalid, "\(key) is not a string") }
        return text
    }

    /// A decimal string (proto3 JSON's int64) or a whole JSON number.
    private static func int64(_ value: Any?) -> Int64? {
        if let text = value as? String {
            guard !text.isEmpty, text.count <= 18, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            return Int64(text)
        }
        guard let number = value as? NSNumber else { return nil }
        let whole = number.int64Value
        return Double(whole) == number.doubleValue ? whole : nil
    }
}

/// What a verdict must show (`play_integrity:`), and the checks, in the order the reasons are reported.
public struct IntegrityPolicy: Sendable, Equatable {
    /// How the challenge comes back: classic requests echo it as `nonce`, standard ones as `requestHash`.
    public enum Binding: Sendable {
        case nonce
        case requestHash
    }

    public static let deviceLabels = ["MEETS_STRONG_INTEGRITY", "MEETS_DEVICE_INTEGRITY", "MEETS_BASIC_INTEGRITY", "MEETS_VIRTUAL_INTEGRITY"]

    public let packageNames: [String]
    /// Decoded SHA-256 digests (32 bytes each); empty = the signing certificate is not checked.
    public let certificateDigests: [[UInt8]]
    public let maxTokenAgeSeconds: Int
    /// How far ahead of this clock a verdict's timestamp may be.
    public let clockSkewSeconds: Int
    public let requireAppRecognized: Bool
    /// Any one of these labels suffices.
    public let requireDevice: [String]
    public let requireLicensed: Bool

    public init(packageNames: [String], certificateDigests: [[UInt8]], maxTokenAgeSeconds: Int, clockSkewSeconds: Int,
                requireAppRecognized: Bool, requireDevice: [String], requireLicensed: Bool) {
        self.packageNames = packageNames
        self.certificateDigests = certificateDigests
        self.maxTokenAgeSeconds = maxTokenAgeSeconds
        self.clockSkewSeconds = clockSkewSeconds
        self.requireAppRecognized = requireAppRecognized
        self.requireDevice = requireDevice
        self.requireLicensed = requireLicensed
    }

    /// Throws the first check the verdict fails: binding, package, age, app, certificate, device, licence.
    public func judge(_ verdict: IntegrityVerdict, challenge: String, binding: Binding, now: Date) throws(IntegrityError) {
        let echoed = binding == .nonce ? verdict.nonce : verdict.requestHash
        guard let echoed, Bytes.constantTimeEqual(Array(echoed.utf8), Array(challenge.utf8)) else {
            let field = binding == .nonce ? "requestDetails.nonce" : "requestDetails.requestHash"
            throw IntegrityError(.nonceMismatch, "\(field) is not the challenge sent with the token")
        }
        guard packageNames.contains(verdict.requestPackageName) else {
            throw IntegrityError(.packageNotAllowed, "requestPackageName \(Self.quoted(verdict.requestPackageName)) is not in package_names")
        }
        if let package = verdict.packageName, !packageNames.contains(package) {
            throw IntegrityError(.packageNotAllowed, "appIntegrity.packageName \(Self.quoted(package)) is not in package_names")
        }
        let nowMs = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        guard verdict.timestampMillis <= nowMs + Int64(clockSkewSeconds) * 1000 else {
            throw IntegrityError(.tokenFromFuture, "timestampMillis is \(verdict.timestampMillis - nowMs) ms ahead of the gateway's clock")
        }
        guard nowMs - verdict.timestampMillis <= Int64(maxTokenAgeSeconds) * 1000 else {
            throw IntegrityError(.tokenTooOld, "the verdict is \((nowMs - verdict.timestampMillis) / 1000) s old (max_token_age_seconds \(maxTokenAgeSeconds))")
        }
        if requireAppRecognized, verdict.appRecognitionVerdict != "PLAY_RECOGNIZED" {
            throw IntegrityError(.appNotRecognized, "appRecognitionVerdict is \(verdict.appRecognitionVerdict.map(Self.quoted) ?? "absent"), not PLAY_RECOGNIZED")
        }
        if !certificateDigests.isEmpty {
            let presented = verdict.certificateDigests.compactMap { Base64.decode($0) }
            guard presented.contains(where: certificateDigests.contains) else {
                throw IntegrityError(.certificateNotAllowed, "no certificateSha256Digest of the verdict is in certificate_sha256")
            }
        }
        guard verdict.deviceRecognitionVerdict.contains(where: requireDevice.contains) else {
            throw IntegrityError(.deviceNotTrusted, "deviceRecognitionVerdict \(verdict.deviceRecognitionVerdict) has none of \(requireDevice)")
        }
        if requireLicensed, verdict.appLicensingVerdict != "LICENSED" {
            throw IntegrityError(.unlicensed, "appLicensingVerdict is \(verdict.appLicensingVerdict.map(Self.quoted) ?? "absent"), not LICENSED")
        }
    }

    /// Verdict text in a message, bounded (it came from outside).
    private static func quoted(_ text: String) -> String { "\"\(text.prefix(128))\"" }
}
