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
/// one for the exact bytes the upstream will receive. Routes with `case_insensitive` compare folded paths
/// (see `fold`); a case-sensitive exact route beats a case-insensitive one.
public struct Router: Sendable {
    private let exact: [[UInt8]: RouteConfig]
    /// Case-insensitive exact routes, by folded path.
    private let exactFolded: [[UInt8]: RouteConfig]
    /// Longest first; `folded` prefixes are compared with the folded path.
    private let prefixes: [(prefix: [UInt8], folded: Bool, route: RouteConfig)]
    private let folds: Bool

    /// With several routes for the same path (which `GatewayConfig` refuses) the first wins.
    public init(routes: [RouteConfig]) {
        var exact: [[UInt8]: RouteConfig] = [:]
        var exactFolded: [[UInt8]: RouteConfig] = [:]
        var prefixes: [(prefix: [UInt8], folded: Bool, route: RouteConfig)] = []
        for route in routes {
            switch route.match {
            case .exact(let path) where route.caseInsensitive:
                let key = Array(Router.fold(path).utf8)
                exactFolded[key] = exactFolded[key] ?? route
            case .exact(let path): exact[Array(path.utf8)] = exact[Array(path.utf8)] ?? route
            case .prefix(let prefix):
                prefixes.append((Array((route.caseInsensitive ? Router.fold(prefix) : prefix).utf8), route.caseInsensitive, route))
            }
        }
        self.exact = exact
        self.exactFolded = exactFolded
        // Stable order keeps the first of equal prefixes in front.
        self.prefixes = prefixes.enumerated()
            .sorted { ($0.element.prefix.count, -$0.offset) > ($1.element.prefix.count, -$1.offset) }
            .map(\.element)
        folds = routes.contains { $0.caseInsensitive }
    }

    /// `path` is the percent-decoded path (see `PathDecoding`).
    public func match(method: String, path: String) -> RouteMatch {
        let bytes = Array(path.utf8)
        let folded = folds ? Array(Router.fold(path).utf8) : bytes
        let found = exact[bytes] ?? (folds ? exactFolded[folded] : nil)
            ?? prefixes.first(where: { ($0.folded ? folded : bytes).starts(with: $0.prefix) })?.route
        guard let route = found else { return .notFound }
        guard let methods = route.methods else { return .route(route) }
        return methods.contains(method) ? .route(route) : .methodNotAllowed(route, allowed: methods)
    }

    /// Case folding as case-insensitive frameworks compare: upper case, then lower case, so that the
    /// characters .NET's ordinal-ignore-case maps onto ASCII letters (`ſ` → S, `ı` → I, the Kelvin sign → k)
    /// fold with them. Folding more than a framework does only widens a route, never narrows it.
    static func fold(_ path: String) -> String {
        path.uppercased().lowercased()
    }
}
