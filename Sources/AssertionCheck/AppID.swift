/// "<team id>.<bundle id>", the relying-party id of App Attest; authData carries its SHA-256.
public struct AppID: Hashable, Sendable, CustomStringConvertible {
    public let teamID: String
    public let bundleID: String
    public let rpIdHash: [UInt8]

    public init(teamID: String, bundleID: String) {
        self.teamID = teamID
        self.bundleID = bundleID
        self.rpIdHash = SHA256.hash(Array("\(teamID).\(bundleID)".utf8))
    }

    /// Parses "TEAMID1234.com.example.app": the team id is everything before the first dot.
    public init?(_ text: String) {
        guard let dot = text.firstIndex(of: "."), dot != text.startIndex, text.index(after: dot) != text.endIndex else {
            return nil
        }
        self.init(teamID: String(text[..<dot]), bundleID: String(text[text.index(after: dot)...]))
    }

    public var description: String { "\(teamID).\(bundleID)" }

    /// The configured App ID whose hash is `rpIdHash`, compared in constant time.
    static func matching(_ rpIdHash: ArraySlice<UInt8>, in apps: [AppID]) -> AppID? {
        var found: AppID?
        for app in apps where Bytes.constantTimeEqual(app.rpIdHash[...], rpIdHash) { found = found ?? app }
        return found
    }
}

/// Where the key was attested: Apple's sandbox (`appattestdevelop`) or production.
public enum AppAttestEnvironment: String, CaseIterable, Sendable {
    case development
    case production

    /// The aaguid Apple writes into authData for each environment.
    public var aaguid: [UInt8] {
        switch self {
        case .development: return Array("appattestdevelop".utf8)
        case .production: return Array("appattest".utf8) + [UInt8](repeating: 0, count: 7)
        }
    }

    init?(aaguid: [UInt8]) {
        guard let match = AppAttestEnvironment.allCases.first(where: { $0.aaguid == aaguid }) else { return nil }
        self = match
    }
}
