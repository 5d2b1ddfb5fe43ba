/// One thing wrong with a configuration, located by key path and line.
public struct ConfigIssue: Sendable, Equatable, CustomStringConvertible {
    public enum Reason: String, Sendable, CaseIterable {
        case unreadableFile = "unreadable_file"
        case invalidYAML = "invalid_yaml"
        case duplicateKey = "duplicate_key"
        case unknownKey = "unknown_key"
        case missingKey = "missing_key"
        case wrongType = "wrong_type"
        case invalidValue = "invalid_value"
        case duplicateRoute = "duplicate_route"
        case undefinedUpstream = "undefined_upstream"
        /// `${NAME}` names an environment variable that is not set.
        case undefinedVariable = "undefined_variable"
    }

    public let reason: Reason
    /// "routes[1].policy"; empty for the file as a whole.
    public let path: String
    public let message: String
    public let line: Int?

    public init(_ reason: Reason, path: String, message: String, line: Int?) {
        self.reason = reason
        self.path = path
        self.message = message
        self.line = line
    }

    public var reasonCode: String { reason.rawValue }

    /// `routes[1].policy: expected one of assert, pass, deny, got "asert" (line 14)`
    public var description: String {
        (path.isEmpty ? "" : "\(path): ") + message + (line.map { " (line \($0))" } ?? "")
    }
}

/// Every problem found in a configuration: reading goes on past the first so one edit can fix them all.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public let issues: [ConfigIssue]

    public init(issues: [ConfigIssue]) { self.issues = issues }

    public var reasonCode: String { "invalid_config" }
    public var description: String { issues.map(\.description).joined(separator: "\n") }
}
