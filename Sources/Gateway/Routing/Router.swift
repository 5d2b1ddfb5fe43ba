/// The outcome of routing one request.
public enum RouteMatch: Sendable, Equatable {
    case route(RouteConfig)
    /// The path belongs to this route but the method does not: answer 405 with `Allow`. Never retried
    /// against a shorter prefix, which could carry a weaker policy.
    case methodNotAllowed(RouteConfig, allowed: [String])
    case notFound
}

/// A configured route as the router holds it: a lookup hands out this reference instead of copying the
/// route's many references out and destroying them again (~500 instructions a request).
final class RouteEntry: Sendable {
    let config: RouteConfig
    /// How logs and metrics name the route (`RouteConfig.name`), made once.
    let name: String
    /// The route's upstream, found once (nil for `deny` routes): not hashed again for every request.
    let upstream: UpstreamBinding?

    init(_ config: RouteConfig, upstream: UpstreamBinding?) { (self.config, name, self.upstream) = (config, config.name, upstream) }
}

/// `Router.lookup`'s outcome: `RouteMatch` with the router's own entries.
enum RouteLookup {
    case route(RouteEntry)
    case methodNotAllowed(RouteEntry, allowed: [String])
    case notFound
}

/// Picks the route for a decoded path: an exact `path` first, else the longest `path_prefix`.
/// Near misses take the safe reading, since frameworks route them to the same handler: an exact path also
/// covers its trailing-slash twin (`/v1/chat` and `/v1/chat/`), unless the twin has an exact route of its
/// own or a prefix as specific (`nearest`), and a prefix ending in "/" also covers the path without it
/// (`/internal/` covers `/internal`).
/// Paths compare byte for byte (UTF-8), not by Unicode canonical equivalence, so the route chosen is the
/// one for the exact bytes the upstream will receive. Routes with `case_insensitive` compare folded paths
/// (see `fold`); a case-sensitive exact route beats a case-insensitive one.
public struct Router: Sendable {
    /// The routes as configured; the tables below hold indices into it.
    private let routes: [RouteEntry]
    private let exact: [[UInt8]: Int]
    /// Case-insensitive exact routes, by folded path.
    private let exactFolded: [[UInt8]: Int]
    /// Longest first; `folded` prefixes are compared with the folded path.
    private let prefixes: [(prefix: [UInt8], folded: Bool, route: Int)]
    private let folds: Bool
    /// The lengths of the exact paths (folded or not): a twin of another length is not built to be looked up
    /// (an array and a hash per proxied request).
    private let exactLengths: Set<Int>

    /// With several routes for the same path (which `GatewayConfig` refuses) the first wins.
    public init(routes: [RouteConfig]) { self.init(routes: routes, upstreams: [:]) }

    /// `upstreams`: the bindings the entries hand out with their routes.
    init(routes: [RouteConfig], upstreams: [String: UpstreamBinding]) {
        var exact: [[UInt8]: Int] = [:]
        var exactFolded: [[UInt8]: Int] = [:]
        var prefixes: [(prefix: [UInt8], folded: Bool, route: Int)] = []
        for (index, route) in routes.enumerated() {
            switch route.match {
            case .exact(let path) where route.caseInsensitive:
                let key = Array(Router.fold(path).utf8)
                exactFolded[key] = exactFolded[key] ?? index
            case .exact(let path): exact[Array(path.utf8)] = exact[Array(path.utf8)] ?? index
            case .prefix(let prefix):
                prefixes.append((Array((route.caseInsensitive ? Router.fold(prefix) : prefix).utf8), route.caseInsensitive, index))
            }
        }
        self.routes = routes.map { RouteEntry($0, upstream: $0.upstream.flatMap { upstreams[$0] }) }
        self.exact = exact
        self.exactFolded = exactFolded
        // Stable order keeps the first of equal prefixes in front.
        self.prefixes = prefixes.enumerated()
            .sorted { ($0.element.prefix.count, -$0.offset) > ($1.element.prefix.count, -$1.offset) }
            .map(\.element)
        folds = routes.contains { $0.caseInsensitive }
        exactLengths = Set(exact.keys.map(\.count) + exactFolded.keys.map(\.count))
    }

    /// `path` is the percent-decoded path (see `PathDecoding`).
    public func match(method: String, path: String) -> RouteMatch {
        switch lookup(method: method, path: path) {
        case .route(let entry): .route(entry.config)
        case .methodNotAllowed(let entry, let allowed): .methodNotAllowed(entry.config, allowed: allowed)
        case .notFound: .notFound
        }
    }

    /// `match`, answering with the router's entry (nothing copied).
    func lookup(method: String, path: String) -> RouteLookup {
        let found: Int?
        if exactLengths.isEmpty, !folds {
            // Prefixes only, none folded (the usual configuration): the path's bytes in place, not copied.
            found = path.utf8.withContiguousStorageIfAvailable(longestPrefix) ?? longestPrefix(Array(path.utf8))
        } else {
            let bytes = Array(path.utf8)
            let folded = folds ? Array(Router.fold(path).utf8) : bytes
            found = (exact.isEmpty ? nil : exact[bytes]) ?? (folds ? exactFolded[folded] : nil) ?? nearest(bytes, folded)
        }
        guard let index = found else { return .notFound }
        let entry = routes[index]
        guard let methods = entry.config.methods else { return .route(entry) }
        return methods.contains(method) ? .route(entry) : .methodNotAllowed(entry, allowed: methods)
    }

    /// The route of the longest prefix covering `path`, when no prefix is folded.
    private func longestPrefix(_ path: some Collection<UInt8>) -> Int? {
        prefixes.first { Router.covers($0.prefix, path) }?.route
    }

    /// The trailing-slash twin's exact route or the longest prefix, whichever is longer (the more specific):
    /// `/v1/chat/` goes to an exact `/v1/chat` rather than the catch-all, but to a `/v1/chat/` prefix of its
    /// own. At equal length the stricter route wins.
    private func nearest(_ bytes: [UInt8], _ folded: [UInt8]) -> Int? {
        let prefix = prefixes.firstIndex { Router.covers($0.prefix, $0.folded ? folded : bytes) }
        let prefixRoute = prefix.map { prefixes[$0].route }
        guard !exactLengths.isEmpty else { return prefixRoute }
        let twin = Router.twin(bytes, lengths: exactLengths), foldedTwin = folds ? Router.twin(folded, lengths: exactLengths) : nil
        guard let twin, let twinRoute = exact[twin] ?? foldedTwin.flatMap({ exactFolded[$0] }) else { return prefixRoute }
        guard let prefix, let prefixRoute else { return twinRoute }
        let prefixLength = prefixes[prefix].prefix.count
        guard prefixLength >= twin.count else { return twinRoute }
        if prefixLength > twin.count { return prefixRoute }
        return routes[prefixRoute].config.policy.strength >= routes[twinRoute].config.policy.strength ? prefixRoute : twinRoute
    }

    /// The path with a trailing "/" added or taken off ("/" itself has none); nil too when no exact path has
    /// the twin's length.
    private static func twin(_ path: [UInt8], lengths: Set<Int>) -> [UInt8]? {
        guard path.count > 1, lengths.contains(path.last == UInt8(ascii: "/") ? path.count - 1 : path.count + 1) else { return nil }
        return path.last == UInt8(ascii: "/") ? Array(path.dropLast()) : path + [UInt8(ascii: "/")]
    }

    /// A prefix covers the paths starting with it and, when it ends in "/", the path without that "/".
    private static func covers(_ prefix: [UInt8], _ path: some Collection<UInt8>) -> Bool {
        path.starts(with: prefix)
            || (prefix.count > 1 && prefix.last == UInt8(ascii: "/") && path.count == prefix.count - 1 && prefix.starts(with: path))
    }

    /// Case folding as case-insensitive frameworks compare: upper case, then lower case, so that the
    /// characters .NET's ordinal-ignore-case maps onto ASCII letters (`ſ` → S, `ı` → I, the Kelvin sign → k)
    /// fold with them. Folding more than a framework does only widens a route, never narrows it.
    static func fold(_ path: String) -> String {
        path.uppercased().lowercased()
    }
}
