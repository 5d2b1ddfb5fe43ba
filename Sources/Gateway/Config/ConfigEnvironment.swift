/// `${NAME}` in configuration values: the value of environment variable NAME, so Kubernetes Secrets and
/// systemd credentials reach the file without templating it. Expanded after parsing, so a value can never
/// add YAML structure; mapping keys are never expanded. `$${` stands for a literal `${`; any other `$` is
/// kept as it is. An unset variable is an error naming the key path and line (an empty one is a value).
enum ConfigEnvironment {
    struct Expansion {
        let name: String
        let value: String
    }

    /// The tree with every scalar expanded, and what was substituted (to keep the values out of messages).
    static func expand(_ node: YAMLNode, path: String = "", environment: [String: String], log: IssueLog) -> (YAMLNode, [Expansion]) {
        var expansions: [Expansion] = []
        let expanded = expand(node, path: path, environment: environment, log: log, into: &expansions)
        return (expanded, expansions)
    }

    private static func expand(_ node: YAMLNode, path: String, environment: [String: String], log: IssueLog,
                               into expansions: inout [Expansion]) -> YAMLNode {
        let content: YAMLNode.Content
        switch node.content {
        case .scalar(let text, let isPlain):
            guard text.contains("$") else { return node }
            content = .scalar(expandText(text, path: path, line: node.line, environment: environment, log: log,
                                         into: &expansions), isPlain: isPlain)
        case .sequence(let items):
            content = .sequence(items.enumerated().map { index, item in
                expand(item, path: "\(path)[\(index)]", environment: environment, log: log, into: &expansions)
            })
        case .mapping(let entries):
            content = .mapping(entries.map { entry in
                let child = expand(entry.value, path: path.isEmpty ? entry.key : "\(path).\(entry.key)",
                                   environment: environment, log: log, into: &expansions)
                return YAMLNode.Entry(key: entry.key, line: entry.line, value: child)
            })
        }
        return YAMLNode(content: content, line: node.line, column: node.column)
    }

    private static func expandText(_ text: String, path: String, line: Int, environment: [String: String], log: IssueLog,
                                   into expansions: inout [Expansion]) -> String {
        var result = ""
        var rest = Substring(text)
        while let dollar = rest.firstIndex(of: "$") {
            result += rest[..<dollar]
            let after = rest[rest.index(after: dollar)...]
            if after.hasPrefix("${") {
                result += "${"
                rest = after.dropFirst(2)
            } else if after.hasPrefix("{") {
                guard let close = after.firstIndex(of: "}"), isName(after[after.index(after: after.startIndex)..<close]) else {
                    log.report(.invalidValue, path, "malformed ${…}: write ${NAME} with NAME of A-Z a-z 0-9 _ "
                               + "(not starting with a digit), or $${ for a literal ${", line: line)
                    return text
                }
                let name = String(after[after.index(after: after.startIndex)..<close])
                guard let value = environment[name] else {
                    log.report(.undefinedVariable, path, "environment variable \(name) is not set (${\(name)})", line: line)
                    return text
                }
                expansions.append(Expansion(name: name, value: value))
                result += value
                rest = after[after.index(after: close)...]
            } else {
                result += "$"
                rest = after
            }
        }
        return result + rest
    }

    private static func isName(_ text: Substring) -> Bool {
        guard let first = text.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return text.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_") }
    }
}
