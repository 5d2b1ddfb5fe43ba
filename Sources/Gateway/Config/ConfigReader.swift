/// Collects issues while a configuration is read.
final class IssueLog {
    private(set) var issues: [ConfigIssue] = []
    /// Every key path looked up, present or not: the keys the reader knows (docs tests compare them).
    private(set) var keysRead: Set<String> = []
    /// Values that came from `${NAME}` (secrets, often): messages show `${NAME}` instead, longest first.
    private var hidden: [ConfigEnvironment.Expansion] = []

    func report(_ reason: ConfigIssue.Reason, _ path: String, _ message: String, line: Int?) {
        let shown = hidden.reduce(message) { $0.replacing($1.value, with: "${\($1.name)}") }
        issues.append(ConfigIssue(reason, path: path, message: shown, line: line))
    }

    /// Values shorter than 4 characters are left in messages: hiding "0" would garble every range.
    func hide(_ expansions: [ConfigEnvironment.Expansion]) {
        hidden = (hidden + expansions.filter { $0.value.count >= 4 }).sorted { $0.value.count > $1.value.count }
    }

    func read(_ path: String) { keysRead.insert(path) }
}

/// A YAML node read as configuration. Each accessor reports what is wrong and returns nil,
/// so reading continues and every problem is listed.
struct ConfigValue {
    let node: YAMLNode
    let path: String
    let log: IssueLog

    func invalid(_ message: String, _ reason: ConfigIssue.Reason = .invalidValue) {
        log.report(reason, path, message, line: node.line)
    }

    /// Any non-null scalar's text (plain or quoted).
    func string() -> String? {
        guard case .scalar(let text, let isPlain) = node.content, !(isPlain && Self.nullWords.contains(text)) else {
            return wrongType("a string")
        }
        return text
    }

    func int(in range: ClosedRange<Int>) -> Int? {
        guard case .scalar(let text, true) = node.content, let value = Self.decimal(text) else {
            return wrongType("an integer")
        }
        guard range.contains(value) else {
            invalid("expected an integer in \(range.lowerBound)...\(range.upperBound), got \(text)")
            return nil
        }
        return value
    }

    /// YAML's plain `true` / `false` (quoted text is not a boolean).
    func bool() -> Bool? {
        guard case .scalar(let text, true) = node.content, text == "true" || text == "false" else {
            return wrongType("true or false")
        }
        return text == "true"
    }

    func choice<Choice: CaseIterable & RawRepresentable<String>>(_: Choice.Type) -> Choice? {
        guard let text = string() else { return nil }
        guard let value = Choice(rawValue: text) else {
            let options = Choice.allCases.map(\.rawValue).joined(separator: ", ")
            invalid("expected one of \(options), got \"\(text)\"")
            return nil
        }
        return value
    }

    func list() -> [ConfigValue]? {
        guard case .sequence(let items) = node.content else { return wrongType("a list") }
        return items.enumerated().map { ConfigValue(node: $1, path: "\(path)[\($0)]", log: log) }
    }

    func mapping() -> ConfigMapping? {
        guard case .mapping(let entries) = node.content else { return wrongType("a mapping") }
        return ConfigMapping(entries: entries, path: path, line: node.line, log: log)
    }

    private func wrongType<T>(_ expected: String) -> T? {
        invalid("expected \(expected), got \(found)", .wrongType)
        return nil
    }

    private var found: String {
        switch node.content {
        case .scalar(let text, let isPlain) where isPlain && Self.nullWords.contains(text): return "null"
        case .scalar(let text, let isPlain): return isPlain ? "\"\(text)\"" : "quoted text \"\(text)\""
        case .sequence: return "a list"
        case .mapping: return "a mapping"
        }
    }

    private static let nullWords: Set<String> = ["", "~", "null", "Null", "NULL"]

    private static func decimal(_ text: String) -> Int? {
        let digits = text.hasPrefix("-") ? text.dropFirst() : Substring(text)
        guard !digits.isEmpty, digits.count <= 18, digits.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int(text)
    }
}

/// A mapping read key by key; `finish()` reports every key nobody asked for, since a misspelt key must not
/// quietly fall back to a default.
final class ConfigMapping {
    let path: String
    let line: Int
    let log: IssueLog
    private let entries: [YAMLNode.Entry]
    private var consumed: Set<String> = []

    init(entries: [YAMLNode.Entry], path: String, line: Int, log: IssueLog) {
        self.entries = entries
        self.path = path
        self.line = line
        self.log = log
    }

    var keys: [String] { entries.map(\.key) }

    func optional(_ key: String) -> ConfigValue? {
        consumed.insert(key)
        log.read(childPath(key))
        guard let entry = entries.first(where: { $0.key == key }) else { return nil }
        return ConfigValue(node: entry.value, path: childPath(key), log: log)
    }

    func required(_ key: String) -> ConfigValue? {
        guard let value = optional(key) else {
            log.report(.missingKey, childPath(key), "required key is missing", line: line)
            return nil
        }
        return value
    }

    /// A nested mapping; absent (or broken, which is reported) reads as empty so its defaults apply.
    func section(_ key: String) -> ConfigMapping {
        optional(key)?.mapping() ?? ConfigMapping(entries: [], path: childPath(key), line: line, log: log)
    }

    func string(_ key: String, default fallback: String) -> String {
        optional(key).map { $0.string() ?? fallback } ?? fallback
    }

    func int(_ key: String, default fallback: Int, in range: ClosedRange<Int>) -> Int {
        optional(key).map { $0.int(in: range) ?? fallback } ?? fallback
    }

    func choice<Choice: CaseIterable & RawRepresentable<String>>(_ key: String, default fallback: Choice) -> Choice {
        optional(key).map { $0.choice(Choice.self) ?? fallback } ?? fallback
    }

    func finish() {
        let known = consumed
        for entry in entries where !known.contains(entry.key) {
            let hint = known.sorted().min { editDistance($0, entry.key) < editDistance($1, entry.key) }
                .flatMap { editDistance($0, entry.key) <= 2 ? "; did you mean \"\($0)\"?" : nil } ?? ""
            log.report(.unknownKey, childPath(entry.key), "unknown key\(hint)", line: entry.line)
        }
    }

    func childPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }
}

/// Levenshtein distance, for "did you mean" hints on short keys.
private func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    var previous = Array(0...b.count)
    for (i, left) in a.enumerated() {
        var current = [i + 1]
        for (j, right) in b.enumerated() {
            current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (left == right ? 0 : 1)))
        }
        previous = current
    }
    return previous[b.count]
}
