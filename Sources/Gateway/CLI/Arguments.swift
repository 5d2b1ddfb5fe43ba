import Foundation

/// A usage error: printed with the command's usage, exit code 2.
public struct UsageError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Runs one subcommand's body with the exit codes every command shares: a usage error prints the usage and
/// exits 2; any other error is printed (after `hint`, if given) and exits 1.
public enum CommandRunner {
    public static func run(_ name: String, usage: String, hint: String? = nil, _ body: () throws -> Int32) -> Int32 {
        do {
            return try body()
        } catch let error as UsageError {
            FileHandle.standardError.write(Data("gateway \(name): \(error)\n\(usage)\n".utf8))
            return 2
        } catch {
            FileHandle.standardError.write(Data("gateway \(name): \(error)\n\(hint.map { $0 + "\n" } ?? "")".utf8))
            return 1
        }
    }
}

/// `--name value` / `--name=value` options, repeatable ones, boolean flags and positionals.
public struct Arguments {
    private var options: [String: [String]] = [:]
    public private(set) var positionals: [String] = []
    private var flags: Set<String> = []
    private var consumed: Set<String> = []

    /// `flagNames` are the options that take no value.
    public init(_ arguments: [String], flagNames: Set<String> = []) throws(UsageError) {
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--") else {
                positionals.append(argument)
                continue
            }
            var name = String(argument.dropFirst(2))
            if let equals = name.firstIndex(of: "=") {
                options[String(name[..<equals]), default: []].append(String(name[name.index(after: equals)...]))
                continue
            }
            if flagNames.contains(name) {
                flags.insert(name)
                continue
            }
            guard index < arguments.count else { throw UsageError("--\(name) needs a value") }
            name = String(name)
            options[name, default: []].append(arguments[index])
            index += 1
        }
    }

    public mutating func flag(_ name: String) -> Bool {
        consumed.insert(name)
        return flags.contains(name)
    }

    public mutating func optional(_ name: String) throws(UsageError) -> String? {
        consumed.insert(name)
        let values = options[name] ?? []
        guard values.count <= 1 else { throw UsageError("--\(name) given more than once") }
        return values.first
    }

    public mutating func required(_ name: String) throws(UsageError) -> String {
        guard let value = try optional(name) else { throw UsageError("--\(name) is required") }
        return value
    }

    public mutating func all(_ name: String) -> [String] {
        consumed.insert(name)
        return options[name] ?? []
    }

    public mutating func integer(_ name: String, default value: Int) throws(UsageError) -> Int {
        guard let text = try optional(name) else { return value }
        guard let number = Int(text) else { throw UsageError("--\(name) must be an integer, got \"\(text)\"") }
        return number
    }

    /// Fails on options nobody asked for: a typo must not be silently ignored.
    public func rejectUnknown() throws(UsageError) {
        let unknown = Set(options.keys).union(flags).subtracting(consumed)
        if let name = unknown.sorted().first { throw UsageError("unknown option --\(name)") }
    }
}
