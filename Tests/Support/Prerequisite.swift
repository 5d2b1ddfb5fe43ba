import Foundation
import XCTest

/// A tool a test needs (promtool, Python's cryptography) that this machine lacks. CI (`CI` set, as CI
/// services do) installs every one of them, so there the test fails; elsewhere it is skipped, and
/// scripts/test.sh counts the skip in its summary.
public enum Prerequisite {
    public static var underCI: Bool {
        guard let value = ProcessInfo.processInfo.environment["CI"] else { return false }
        return !["", "0", "false"].contains(value.lowercased())
    }

    /// The error to throw from the test: a skip, or under CI a failure.
    public static func missing(_ what: String) -> Error {
        underCI ? TestSupportError("\(what) (CI installs it: a missing tool there is a failure)") : XCTSkip(what)
    }
}
