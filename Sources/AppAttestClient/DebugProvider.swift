import Foundation

/// A shared secret that stands in for App Attest where it cannot run: the Simulator and CI (like Firebase
/// App Check's debug provider). The gateway accepts it only if its `app_attest.debug_tokens` lists the
/// secret's SHA-256, and only on routes that do not say `allow_debug: false`; the upstream sees
/// `X-Attest-Status: debug`. Ship it in debug builds only: anyone holding the secret passes.
public struct DebugProvider: Sendable {
    /// The request header that carries the secret.
    public static let header = "X-App-Attest-Debug-Token"
    /// The environment variable `fromEnvironment()` reads (set it in the Xcode scheme or the CI job).
    public static let environmentVariable = "APP_ATTEST_DEBUG_TOKEN"

    public let token: String

    public init(token: String) { self.token = token }

    /// The token in the build's environment, or nil when the variable is unset or empty.
    public static func fromEnvironment(_ variable: String = environmentVariable,
                                       environment: [String: String] = ProcessInfo.processInfo.environment) -> DebugProvider? {
        guard let token = environment[variable]?.trimmingCharacters(in: .whitespacesAndNewlines), !token.isEmpty else { return nil }
        return DebugProvider(token: token)
    }

    /// The line for the gateway's `debug_tokens` list: `sha256` is the hex SHA-256 of the token.
    public var sha256Hex: String { SHA256.hash(Data(token.utf8)).map { String(format: "%02x", $0) }.joined() }
}
