extension GatewayConfig {
    /// Every key path the reader looks up while reading `text` (present or not), with list indices as `[]`
    /// and upstream names as `NAME`: what docs/configuration.md and docs/operations.md must describe.
    static func keyPaths(yaml text: String) throws -> Set<String> {
        let log = IssueLog()
        guard let top = ConfigValue(node: try YAMLDocument.parse(text), path: "", log: log).mapping() else { return [] }
        _ = read(top, baseDirectory: ".")
        return Set(log.keysRead.map { path in
            var normalized = path.replacing(/\[\d+\]/, with: "[]")
            if normalized.hasPrefix("upstreams.") {
                normalized = normalized.replacing(/^upstreams\.[^.]+/, with: "upstreams.NAME")
            }
            return normalized
        })
    }
}
