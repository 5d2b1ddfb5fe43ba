import CYAML

/// A parsed YAML node with its position, for messages that point into the file.
public struct YAMLNode: Sendable, Equatable {
    public enum Content: Sendable, Equatable {
        /// `isPlain` is false for quoted and block scalars: `"8080"` is text, `8080` may be a number.
        case scalar(String, isPlain: Bool)
        case sequence([YAMLNode])
        /// Entries in file order; keys are unique.
        case mapping([Entry])
    }

    public struct Entry: Sendable, Equatable {
        public let key: String
        /// The key's line (1-based).
        public let line: Int
        public let value: YAMLNode
    }

    public let content: Content
    /// 1-based.
    public let line: Int
    /// 1-based.
    public let column: Int
}

/// Why a YAML text was refused.
public struct YAMLError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Reason: String, Sendable {
        case syntax = "yaml_syntax"
        case duplicateKey = "duplicate_key"
        /// Anchors, aliases and explicit tags: none is needed for configuration, and aliases invite
        /// billion-laughs expansion.
        case unsupportedFeature = "unsupported_yaml_feature"
        case complexKey = "complex_key"
        case tooDeep = "nesting_too_deep"
        case notOneDocument = "not_one_document"
    }

    public let reason: Reason
    /// Key path of the offending node ("routes[1].policy"); empty at the top.
    public let path: String
    public let message: String
    public let line: Int

    public var reasonCode: String { reason.rawValue }
    public var description: String { "\(path.isEmpty ? "" : "\(path): ")\(message) (line \(line))" }
}

/// Turns YAML text into a `YAMLNode` tree. The only user of CYAML.
public enum YAMLDocument {
    /// Parses exactly one document whose collections nest at most `maxDepth` deep.
    public static func parse(_ text: String, maxDepth: Int = 32) throws(YAMLError) -> YAMLNode {
        let events = YAMLEventStream(text)
        return try TreeBuilder(events: events, maxDepth: maxDepth).document()
    }
}

/// One libyaml event, copied out of C memory.
private struct YAMLEvent {
    enum Kind {
        case streamStart, streamEnd, documentStart, documentEnd
        case scalar(String, isPlain: Bool)
        case sequenceStart, sequenceEnd, mappingStart, mappingEnd
        case alias
    }

    let kind: Kind
    let line: Int
    let column: Int
    let hasAnchorOrTag: Bool
}

/// Owns a libyaml parser and the input bytes it reads from.
private final class YAMLEventStream {
    private let parser = UnsafeMutablePointer<yaml_parser_t>.allocate(capacity: 1)
    private let input: UnsafeMutableBufferPointer<UInt8>
    private let initialized: Bool

    init(_ text: String) {
        input = .allocate(capacity: max(text.utf8.count, 1))
        _ = input.initialize(from: text.utf8)
        initialized = yaml_parser_initialize(parser) == 1
        if initialized { yaml_parser_set_input_string(parser, input.baseAddress, text.utf8.count) }
    }

    deinit {
        if initialized { yaml_parser_delete(parser) }
        parser.deallocate()
        input.deallocate()
    }

    func next(path: String) throws(YAMLError) -> YAMLEvent {
        guard initialized else {
            throw YAMLError(reason: .syntax, path: path, message: "YAML parser could not start", line: 0)
        }
        var event = yaml_event_t()
        guard yaml_parser_parse(parser, &event) == 1 else { throw parserError(path: path) }
        defer { yaml_event_delete(&event) }
        return YAMLEvent(kind: kind(of: event), line: Int(event.start_mark.line) + 1,
                         column: Int(event.start_mark.column) + 1, hasAnchorOrTag: hasAnchorOrTag(event))
    }

    private func kind(of event: yaml_event_t) -> YAMLEvent.Kind {
        switch event.type {
        case YAML_STREAM_START_EVENT: return .streamStart
        case YAML_DOCUMENT_START_EVENT: return .documentStart
        case YAML_DOCUMENT_END_EVENT: return .documentEnd
        case YAML_SEQUENCE_START_EVENT: return .sequenceStart
        case YAML_SEQUENCE_END_EVENT: return .sequenceEnd
        case YAML_MAPPING_START_EVENT: return .mappingStart
        case YAML_MAPPING_END_EVENT: return .mappingEnd
        case YAML_ALIAS_EVENT: return .alias
        case YAML_SCALAR_EVENT:
            let scalar = event.data.scalar
            let bytes = UnsafeBufferPointer(start: scalar.value, count: scalar.length)
            return .scalar(String(decoding: bytes, as: UTF8.self), isPlain: scalar.style == YAML_PLAIN_SCALAR_STYLE)
        default: return .streamEnd
        }
    }

    private func hasAnchorOrTag(_ event: yaml_event_t) -> Bool {
        switch event.type {
        case YAML_SCALAR_EVENT: return event.data.scalar.anchor != nil || event.data.scalar.tag != nil
        case YAML_SEQUENCE_START_EVENT:
            return event.data.sequence_start.anchor != nil || event.data.sequence_start.tag != nil
        case YAML_MAPPING_START_EVENT:
            return event.data.mapping_start.anchor != nil || event.data.mapping_start.tag != nil
        default: return false
        }
    }

    private func parserError(path: String) -> YAMLError {
        let problem = parser.pointee.problem.map { String(cString: $0) } ?? "malformed YAML"
        let context = parser.pointee.context.map { " \(String(cString: $0))" } ?? ""
        return YAMLError(reason: .syntax, path: path, message: problem + context,
                         line: Int(parser.pointee.problem_mark.line) + 1)
    }
}

/// Assembles events into nodes, tracking the key path for messages.
private struct TreeBuilder {
    let events: YAMLEventStream
    let maxDepth: Int

    func document() throws(YAMLError) -> YAMLNode {
        _ = try events.next(path: "")  // stream start
        let start = try events.next(path: "")
        guard case .documentStart = start.kind else {
            throw YAMLError(reason: .notOneDocument, path: "", message: "the file holds no YAML document", line: start.line)
        }
        let root = try node(try events.next(path: ""), path: "", depth: 0)
        _ = try events.next(path: "")  // document end
        let after = try events.next(path: "")
        guard case .streamEnd = after.kind else {
            throw YAMLError(reason: .notOneDocument, path: "", message: "only one YAML document is allowed",
                            line: after.line)
        }
        return root
    }

    private func node(_ event: YAMLEvent, path: String, depth: Int) throws(YAMLError) -> YAMLNode {
        if event.hasAnchorOrTag {
            throw YAMLError(reason: .unsupportedFeature, path: path, message: "anchors and tags are not supported",
                            line: event.line)
        }
        switch event.kind {
        case .scalar(let text, let isPlain):
            return YAMLNode(content: .scalar(text, isPlain: isPlain), line: event.line, column: event.column)
        case .sequenceStart:
            try checkDepth(depth, event, path)
            return YAMLNode(content: .sequence(try sequenceItems(path: path, depth: depth)),
                            line: event.line, column: event.column)
        case .mappingStart:
            try checkDepth(depth, event, path)
            return YAMLNode(content: .mapping(try mappingEntries(path: path, depth: depth)),
                            line: event.line, column: event.column)
        case .alias:
            throw YAMLError(reason: .unsupportedFeature, path: path, message: "aliases are not supported", line: event.line)
        default:
            throw YAMLError(reason: .syntax, path: path, message: "unexpected YAML structure", line: event.line)
        }
    }

    private func checkDepth(_ depth: Int, _ event: YAMLEvent, _ path: String) throws(YAMLError) {
        guard depth < maxDepth else {
            throw YAMLError(reason: .tooDeep, path: path, message: "nested deeper than \(maxDepth) levels",
                            line: event.line)
        }
    }

    private func sequenceItems(path: String, depth: Int) throws(YAMLError) -> [YAMLNode] {
        var items: [YAMLNode] = []
        while true {
            let itemPath = "\(path)[\(items.count)]"
            let event = try events.next(path: itemPath)
            if case .sequenceEnd = event.kind { return items }
            items.append(try node(event, path: itemPath, depth: depth + 1))
        }
    }

    private func mappingEntries(path: String, depth: Int) throws(YAMLError) -> [YAMLNode.Entry] {
        var entries: [YAMLNode.Entry] = []
        while true {
            let keyEvent = try events.next(path: path)
            if case .mappingEnd = keyEvent.kind { return entries }
            guard case .scalar(let key, _) = keyEvent.kind, !keyEvent.hasAnchorOrTag else {
                throw YAMLError(reason: .complexKey, path: path, message: "mapping keys must be plain text",
                                line: keyEvent.line)
            }
            let keyPath = path.isEmpty ? key : "\(path).\(key)"
            if let first = entries.first(where: { $0.key == key }) {
                throw YAMLError(reason: .duplicateKey, path: keyPath,
                                message: "duplicate key (first defined on line \(first.line))", line: keyEvent.line)
            }
            let value = try node(try events.next(path: keyPath), path: keyPath, depth: depth + 1)
            entries.append(YAMLNode.Entry(key: key, line: keyEvent.line, value: value))
        }
    }
}
