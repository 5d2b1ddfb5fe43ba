import Foundation

/// `apple:` — the team's server key for Apple's DeviceCheck and App Attest receipt APIs.
/// Optional; routes that use DeviceCheck or the risk metric require it.
public struct AppleConfig: Sendable, Equatable {
    public let teamID: String
    public let keyID: String
    /// The `.p8` file (PKCS#8 PEM); relative paths are taken from the config file's folder.
    public let privateKeyPath: String
    public let deviceCheckURL: String
    /// nil: each key's receipts go to Apple's host for its environment (receipts only work there).
    public let attestDataURL: String?
    public let timeoutMs: Int
    /// How often a key's receipt is exchanged for a fresh one (and a fresh risk metric).
    public let receiptRefreshSeconds: Int
    /// Receipt exchanges running at once.
    public let receiptRefreshConcurrency: Int

    static func read(_ section: ConfigMapping?, baseDirectory: String) -> AppleConfig? {
        guard let section else { return nil }
        defer { section.finish() }
        let teamID = readID(section, "team_id")
        let keyID = readID(section, "key_id")
        let keyPath = section.required("private_key_path")?.string().map { path in
            path.hasPrefix("/") ? path : (baseDirectory as NSString).appendingPathComponent(path)
        }
        let deviceCheckURL = readURL(section, "devicecheck_url", default: "https://api.devicecheck.apple.com")
        let attestDataURL = section.optional("attest_data_url") == nil ? nil : readURL(section, "attest_data_url", default: "")
        let timeoutMs = section.int("timeout_ms", default: 3000, in: 100...60_000)
        let refresh = section.int("receipt_refresh_seconds", default: 86_400, in: 60...2_592_000)
        let concurrency = section.int("receipt_refresh_concurrency", default: 2, in: 1...32)
        // The key file is read when the gateway starts (it may be provisioned after the config is checked).
        guard let teamID, let keyID, let keyPath else { return nil }
        return AppleConfig(teamID: teamID, keyID: keyID, privateKeyPath: keyPath, deviceCheckURL: deviceCheckURL,
                           attestDataURL: attestDataURL, timeoutMs: timeoutMs, receiptRefreshSeconds: refresh,
                           receiptRefreshConcurrency: concurrency)
    }

    /// Apple's team ids and key ids are 10 characters of A-Z and 0-9.
    private static func readID(_ section: ConfigMapping, _ key: String) -> String? {
        guard let value = section.required(key), let text = value.string() else { return nil }
        guard text.utf8.count == 10, text.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) }) else {
            value.invalid("expected 10 characters A-Z or 0-9 (as Apple shows it), got \"\(text)\"")
            return nil
        }
        return text
    }

    private static func readURL(_ section: ConfigMapping, _ key: String, default fallback: String) -> String {
        guard let value = section.optional(key), let url = value.string() else { return fallback }
        guard url.hasPrefix("https://") || url.hasPrefix("http://") else {
            value.invalid("expected an http:// or https:// URL, got \"\(url)\"")
            return fallback
        }
        return url.hasSuffix("/") ? String(url.dropLast()) : url
    }
}

/// What an `assert` route does with Apple's DeviceCheck bits and the receipt risk metric.
public struct DeviceCheckPolicy: Sendable, Equatable {
    public enum Bit: String, CaseIterable, Sendable { case bit0, bit1 }
    public enum Unreachable: String, CaseIterable, Sendable { case closed, open }
    public enum RiskAction: String, CaseIterable, Sendable { case report, deny }

    /// `fallback: devicecheck`: a request without an assertion may pass on a valid `X-Apple-Device-Token`.
    public var fallback = false
    /// `deny_if_bits: {bit1: true}`: refuse devices whose bits say so.
    public var denyIfBits: [Bit: Bool] = [:]
    /// `once_per_device: bit0`: refuse when the bit is set; set it after a 2xx from the upstream.
    public var oncePerDevice: Bit?
    /// `apple_unreachable: closed|open`: what DeviceCheck checks do when Apple cannot be asked.
    public var unreachable: Unreachable = .closed
    /// `max_risk_metric: N` with `risk_action: report|deny` (Apple calls the metric a signal, not a verdict).
    public var maxRiskMetric: Int?
    public var riskAction: RiskAction = .report

    public init() {}

    public var usesApple: Bool { fallback || !denyIfBits.isEmpty || oncePerDevice != nil || maxRiskMetric != nil }
}
