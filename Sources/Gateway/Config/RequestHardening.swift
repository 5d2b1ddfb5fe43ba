/// How strictly requests are read before routing and forwarding (`server:` keys). The defaults refuse
/// what upstream frameworks are known to read differently from the gateway.
public struct RequestHardening: Sendable, Equatable {
    /// `server.allow_path_parameters`: false answers a path with ";" (raw or %3B) `400 bad_path`. Servlet
    /// containers (Jetty, Tomcat) strip `;params` from segments, so `/v1/ai;x/generate` would be routed
    /// here as one path and dispatched there as `/v1/ai/generate`.
    public var allowPathParameters = false
    /// `server.forward_underscore_headers`: false drops request headers whose name contains "_" (what
    /// nginx does by default): CGI/WSGI servers map "_" and "-" to the same variable, so `X_Attest_Status`
    /// would arrive as the gateway's own `X-Attest-Status`. Names that fold to `X-Attest-*` or
    /// `X-App-Attest-*` are dropped even when this is true.
    public var forwardUnderscoreHeaders = false
    /// `server.case_insensitive_routes`: the default of every route's `case_insensitive`.
    public var caseInsensitiveRoutes = false
    /// `server.allow_trailing_dot_or_space`: false answers a path with a segment ending in "." or " " (raw
    /// `%20` or decoded) `400 bad_path`. Windows and IIS drop them, so `/deny./x` would be routed here by
    /// the catch-all and served there as `/deny/x`.
    public var allowTrailingDotOrSpace = false

    public init() {}

    static func read(_ section: ConfigMapping) -> RequestHardening {
        var hardening = RequestHardening()
        hardening.allowPathParameters = section.optional("allow_path_parameters")?.bool() ?? false
        hardening.forwardUnderscoreHeaders = section.optional("forward_underscore_headers")?.bool() ?? false
        hardening.caseInsensitiveRoutes = section.optional("case_insensitive_routes")?.bool() ?? false
        hardening.allowTrailingDotOrSpace = section.optional("allow_trailing_dot_or_space")?.bool() ?? false
        return hardening
    }
}

extension RequestHardening {
    /// The decoded path a request is routed by, or nil for `400 bad_path` (see `PathDecoding`).
    func routablePath(_ rawPath: String) -> String? {
        guard let path = PathDecoding.decode(rawPath) else { return nil }
        if !allowPathParameters, PathDecoding.hasPathParameters(path) { return nil }
        if !allowTrailingDotOrSpace, PathDecoding.hasSegmentEndingInDotOrSpace(path) { return nil }
        return path
    }
}

extension PathDecoding {
    /// A decoded path with a segment ending in "." or " " (`/deny./x`, `/deny%20/x`, `/file.`): what
    /// Windows file systems and IIS drop. `.` and `..` segments never get here (`decode` refuses them).
    static func hasSegmentEndingInDotOrSpace(_ decodedPath: String) -> Bool {
        // A native string's bytes in place: walking String.UTF8View byte by byte cost every request ~400 instructions.
        decodedPath.utf8.withContiguousStorageIfAvailable(hasSegmentEndingInDotOrSpace) ?? hasSegmentEndingInDotOrSpace(decodedPath.utf8)
    }

    private static func hasSegmentEndingInDotOrSpace(_ bytes: some Collection<UInt8>) -> Bool {
        var previous: UInt8 = UInt8(ascii: "/")
        for byte in bytes {
            if byte == UInt8(ascii: "/"), previous == UInt8(ascii: ".") || previous == UInt8(ascii: " ") { return true }
            previous = byte
        }
        return previous == UInt8(ascii: ".") || previous == UInt8(ascii: " ")
    }

    /// A decoded path with ";" (sent raw or as %3B): path parameters to servlet containers.
    static func hasPathParameters(_ decodedPath: String) -> Bool {
        decodedPath.utf8.withContiguousStorageIfAvailable { $0.contains(UInt8(ascii: ";")) } ?? decodedPath.utf8.contains(UInt8(ascii: ";"))
    }
}
