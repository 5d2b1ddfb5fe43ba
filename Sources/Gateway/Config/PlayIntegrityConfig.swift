import AssertionCheck
import Foundation
import GoogleServices

/// `play_integrity:` — Android apps prove themselves with a Play Integrity verdict, exchanged at
/// `{prefix}/play-integrity/token` for a gateway token (so it needs `app_attest.token`). Classic tokens are
/// decrypted locally with the two Play Console keys; other (standard) tokens go to Google's API with the
/// service account. At least one of the two ways must be configured.
public struct PlayIntegrityConfig: Sendable {
    public let packageNames: [String]
    /// SHA-256 digests (32 bytes) of the allowed signing certificates; empty = not checked.
    public let certificateDigests: [[UInt8]]
    public let decryptionKeyFile: String?
    public let verificationKeyFile: String?
    /// Both Console keys, when both files are configured: classic tokens are then decrypted here.
    public let localKeys: IntegrityKeys?
    public let serviceAccountFile: String?
    /// Loaded from `serviceAccountFile`: tokens that are not decrypted here go to Google with it.
    public let serviceAccount: GoogleServiceAccount?
    public let apiURL: String
    public let maxTokenAgeSeconds: Int
    public let requireAppRecognized: Bool
    public let requireDevice: [String]
    public let requireLicensed: Bool

    public static let defaultAPIURL = PlayIntegrityAPI.defaultURL
    /// A key file holds one base64 line.
    static let maxKeyFileBytes = 4096

    /// The verdict rules, with the token section's clock skew for timestamps from the future.
    public func policy(clockSkewSeconds: Int) -> IntegrityPolicy {
        IntegrityPolicy(packageNames: packageNames, certificateDigests: certificateDigests, maxTokenAgeSeconds: maxTokenAgeSeconds,
                        clockSkewSeconds: clockSkewSeconds, requireAppRecognized: requireAppRecognized, requireDevice: requireDevice,
                        requireLicensed: requireLicensed)
    }

    static func read(_ value: ConfigValue?, baseDirectory: String) -> PlayIntegrityConfig? {
        guard let value, let section = value.mapping() else { return nil }
        defer { section.finish() }
        let packages = readPackages(section.required("package_names"))
        let digests = section.optional("certificate_sha256").map(readDigests) ?? []
        let console = readConsoleKeys(section, baseDirectory: baseDirectory)
        let serviceAccountValue = section.optional("service_account_file")
        let serviceAccountPath = serviceAccountValue.flatMap { readPath($0, baseDirectory: baseDirectory) }
        var serviceAccount: GoogleServiceAccount?
        if let serviceAccountPath {
            do {
                serviceAccount = try GoogleServiceAccount.load(path: serviceAccountPath)
            } catch {
                serviceAccountValue?.invalid(error.description)
            }
        }
        let apiURL = section.string("api_url", default: defaultAPIURL)
        if let urlValue = section.optional("api_url") {
            do {
                _ = try ServiceURL.parse(apiURL, schemes: ["http", "https"])
            } catch {
                urlValue.invalid(error.message)
            }
        }
        if !console.configured, serviceAccountValue == nil {
            section.log.report(.missingKey, section.childPath("decryption_key_file"),
                               "configure decryption_key_file and verification_key_file (classic tokens), service_account_file (any token), or both",
                               line: section.line)
        }
        let age = section.int("max_token_age_seconds", default: 300, in: 1...86_400)
        let recognized = section.optional("require_app_recognized").map { $0.bool() ?? true } ?? true
        let device = section.optional("require_device").flatMap(readLabels) ?? ["MEETS_DEVICE_INTEGRITY"]
        let licensed = section.optional("require_licensed").map { $0.bool() ?? false } ?? false
        return PlayIntegrityConfig(packageNames: packages, certificateDigests: digests, decryptionKeyFile: console.decryptionFile,
                                   verificationKeyFile: console.verificationFile, localKeys: console.keys, serviceAccountFile: serviceAccountPath,
                                   serviceAccount: serviceAccount,
                                   apiURL: apiURL, maxTokenAgeSeconds: age, requireAppRecognized: recognized, requireDevice: device,
                                   requireLicensed: licensed)
    }

    /// `decryption_key_file` and `verification_key_file`: both or neither, each holding what the Console gives.
    private static func readConsoleKeys(_ section: ConfigMapping, baseDirectory: String)
        -> (keys: IntegrityKeys?, decryptionFile: String?, verificationFile: String?, configured: Bool) {
        let decryptionValue = section.optional("decryption_key_file")
        let verificationValue = section.optional("verification_key_file")
        if (decryptionValue == nil) != (verificationValue == nil) {
            (decryptionValue ?? verificationValue)?.invalid("decryption_key_file and verification_key_file go together (both Play Console keys)")
        }
        let decryption = decryptionValue.flatMap { readKeyFile($0, baseDirectory: baseDirectory) }
        let verification = verificationValue.flatMap { readKeyFile($0, baseDirectory: baseDirectory) }
        if let decryption, decryption.bytes.count != AES256.keyBytes {
            decryptionValue?.invalid("must hold base64 of a 32-byte AES key (the Play Console's decryption key), got \(decryption.bytes.count) bytes")
        }
        let publicKey = verification.flatMap { try? P256PublicKey(bytes: $0.bytes) }
        if verification != nil, publicKey == nil {
            verificationValue?.invalid("must hold base64 of a DER SubjectPublicKeyInfo of an EC P-256 key (the Play Console's verification key)")
        }
        let keys = decryption.flatMap { aes in publicKey.flatMap { try? IntegrityKeys(decryptionKey: aes.bytes, verificationKey: $0) } }
        return (keys, decryption?.path, verification?.path, decryptionValue != nil)
    }

    /// Android application ids: two or more dot-separated segments of letters, digits and `_`, each starting with a letter.
    private static func readPackages(_ value: ConfigValue?) -> [String] {
        guard let value, let items = value.list() else { return [] }
        if items.isEmpty { value.invalid("at least one package name is required") }
        var packages: [String] = []
        for item in items {
            guard let text = item.string() else { continue }
            let segments = text.split(separator: ".", omittingEmptySubsequences: false)
            let valid = segments.count >= 2 && segments.allSatisfy { segment in
                segment.first.map { $0.isASCII && $0.isLetter } == true
                    && segment.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
            }
            if !valid {
                item.invalid("expected an Android package name like com.example.app, got \"\(text.prefix(128))\"")
            } else if packages.contains(text) {
                item.invalid("\(text) is listed twice")
            } else {
                packages.append(text)
            }
        }
        return packages
    }

    /// base64url of SHA-256 as Play reports it (padding optional), or 64 hex digits (colons allowed) as the Console shows it.
    private static func readDigests(_ value: ConfigValue) -> [[UInt8]] {
        guard let items = value.list() else { return [] }
        return items.compactMap { item in
            guard let text = item.string() else { return nil }
            let hex = text.replacing(":", with: "")
            if hex.count == 64, hex.allSatisfy(\.isHexDigit) {
                return stride(from: 0, to: 64, by: 2).map { offset in
                    let start = hex.index(hex.startIndex, offsetBy: offset)
                    return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
                }
            }
            guard let bytes = Base64.decode(text), bytes.count == 32 else {
                item.invalid("expected a SHA-256 digest: base64url as in Play's certificateSha256Digest, or 64 hex digits")
                return nil
            }
            return bytes
        }
    }

    private static func readLabels(_ value: ConfigValue) -> [String]? {
        guard let items = value.list() else { return nil }
        if items.isEmpty { value.invalid("must list at least one of \(IntegrityPolicy.deviceLabels.joined(separator: ", "))") }
        var labels: [String] = []
        for item in items {
            guard let text = item.string() else { continue }
            if !IntegrityPolicy.deviceLabels.contains(text) {
                item.invalid("expected one of \(IntegrityPolicy.deviceLabels.joined(separator: ", ")), got \"\(text.prefix(64))\"")
            } else if labels.contains(text) {
                item.invalid("\(text) is listed twice")
            } else {
                labels.append(text)
            }
        }
        return labels.isEmpty ? nil : labels
    }

    private static func readPath(_ value: ConfigValue, baseDirectory: String) -> String? {
        guard let text = value.string() else { return nil }
        let path = text.hasPrefix("/") ? text : "\(baseDirectory)/\(text)"
        guard FileManager.default.isReadableFile(atPath: path) else {
            value.invalid("cannot read \(path)")
            return nil
        }
        return path
    }

    /// The base64 content of a key file (whitespace around it ignored). The key is never quoted in a message.
    private static func readKeyFile(_ value: ConfigValue, baseDirectory: String) -> (path: String, bytes: [UInt8])? {
        guard let path = readPath(value, baseDirectory: baseDirectory) else { return nil }
        guard let data = FileManager.default.contents(atPath: path), data.count <= maxKeyFileBytes else {
            value.invalid("\(path) is not a small key file (at most \(maxKeyFileBytes) bytes)")
            return nil
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let bytes = Base64.decode(text) else {
            value.invalid("\(path) does not hold base64 text")
            return nil
        }
        return (path, bytes)
    }
}
