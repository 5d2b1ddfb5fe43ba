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

    public init() {}

    static func read(_ section: ConfigMapping) -> RequestHardening {
        var hardening = RequestHardening()
        hardening.allowPathParameters = section.optional("allow_path_parameters")?.bool() ?? false
        hardening.forwardUnderscoreHeaders = section.optional("forward_underscore_headers")?.bool() ?? false
        hardening.caseInsensitiveRoutes = section.optional("case_insensitive_routes")?.bool() ?? false
        return hardening
    }
}

extension RequestHardening {
    /// The decoded path a request is routed by, or nil for `400 bad_path` (see `PathDecoding`).
    func routablePath(_ rawPath: String) -> String? {
        guard let path = PathDecoding.decode(rawPath) else { return nil }
        if !allowPathParameters, PathDecoding.hasPathParameters(path) { return nil }
        return path
    }
}

extension PathDecoding {
    /// A decoded path with ";" (sent raw or as %3B): path parameters to servlet containers.
    static func hasPathParameters(_ decodedPath: String) -> Bool {
        decodedPath.utf8.contains(UInt8(ascii: ";"))
    }
}
