/// The outcome of routing one request.
public enum RouteMatch: Sendable, Equatable {
    case route(RouteConfig)
    /// The path belongs to this route but the method does not: answer 405 with `Allow`. Never retried
    /// against a shorter prefix, which could carry a weaker policy.
    case methodNotAllowed(RouteConfig, allowed: [String])
    case notFound
}

/// Picks the route for a decoded path: an exact `path` first, else the longest `path_prefix`.
/// Paths compare byte for byte (UTF-8), not by Unicode canonical equivalence, so the route chosen is the
/// one for the exact bytes the upstream will receive.
public struct Router: Sendable {
    private let exact: [[UInt8]: RouteConfig]
    /// Longest first.
    private let prefixes: [(prefix: [UInt8], route: RouteConfig)]

    /// With several routes for the same path (which `GatewayConfig` refuses) the first wins.
    public init(routes: [RouteConfig]) {
        var exact: [[UInt8]: RouteConfig] = [:]
        var prefixes: [(prefix: [UInt8], route: RouteConfig)] = []
        for route in routes {
            switch route.match {
            case .exact(let path): exact[Array(path.utf8)] = exact[Array(path.utf8)] ?? route
            case .prefix(let prefix): prefixes.append((Array(prefix.utf8), route))
            }
        }
        self.exact = exact
        // Stable order keeps the first of equal prefixes in front.
        self.prefixes = prefixes.enumerated()
            .sorted { ($0.element.prefix.count, -$0.offset) > ($1.element.prefix.count, -$1.offset) }
            .map(\.element)
    }

    /// `path` is the percent-decoded path (see `PathDecoding`).
    public func match(method: String, path: String) -> RouteMatch {
        let bytes = Array(path.utf8)
        guard let route = exact[bytes] ?? prefixes.first(where: { bytes.starts(with: $0.prefix) })?.route else {
            return .notFound
        }
        guard let methods = route.methods else { return .route(route) }
        return methods.contains(method) ? .route(route) : .methodNotAllowed(route, allowed: methods)
    }
}
