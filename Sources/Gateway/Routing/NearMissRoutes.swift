/// `check-config`'s warnings about near misses: spellings of an `assert` or `deny` route's path that some
/// upstream frameworks serve as that path (a trailing slash, other letter case, a trailing dot, `%2E` or
/// `%2F`) but that the gateway would route to a weaker route. Each spelling is judged as a request's path
/// is: decoded and checked (a refused one is safe), then routed.
extension GatewayConfig {
    public var nearMissWarnings: [String] {
        let router = Router(routes: routes)
        var warnings: [String] = []
        for route in routes where route.policy.strength > RoutePolicy.pass.strength {
            for spelling in NearMiss.spellings(of: route.match, caseInsensitive: route.caseInsensitive) {
                guard let decoded = hardening.routablePath(spelling) else { continue }
                let weaker: RouteConfig
                switch router.match(method: route.methods?.first ?? "GET", path: decoded) {
                case .route(let other), .methodNotAllowed(let other, _): weaker = other
                case .notFound: continue
                }
                guard weaker.policy.strength < route.policy.strength else { continue }
                warnings.append("routes[\(route.index)] (\(route.policy.rawValue) \(route.name)): \(spelling) would reach "
                                + "routes[\(weaker.index)] (\(weaker.policy.rawValue) \(weaker.name)); if the upstream serves it as "
                                + "the route's path, add a route for it (or case_insensitive: true for letter case)")
            }
        }
        return warnings
    }
}

private enum NearMiss {
    /// For an exact path its near spellings; for a prefix, near spellings of its last segment with a path below.
    static func spellings(of match: RouteConfig.Match, caseInsensitive: Bool) -> [String] {
        let path: String, below: String
        switch match {
        case .exact(let exact): (path, below) = (exact, "")
        case .prefix(let prefix): (path, below) = (prefix, prefix.hasSuffix("/") ? "/x" : "")
        }
        let base = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
        guard base.count > 1 else { return [] }
        var stems = [base + ".", base + "%2E", base + "%2e", base + "%20"]
        if !caseInsensitive { stems += [base.uppercased(), base.lowercased()] }
        if let slash = base.lastIndex(of: "/"), slash != base.startIndex {
            stems.append(base[..<slash] + "%2F" + base[base.index(after: slash)...])
        }
        var spellings = stems.map { $0 + below }
        spellings += below.isEmpty ? [base, base + "/"] : [base]
        return spellings.filter { $0 != path }
    }
}

extension RoutePolicy {
    /// How much a route checks: deny refuses all, assert proves the app, pass forwards as is.
    var strength: Int {
        switch self {
        case .deny: 3
        case .assert: 2
        case .pass: 1
        }
    }
}
