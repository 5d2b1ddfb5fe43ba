import Gateway
import XCTest

final class RouterTests: XCTestCase {
    private let api = RouteConfig(match: .prefix("/v1/ai/"), methods: ["POST"], upstream: "api", policy: .assert, index: 0)
    private let v1 = RouteConfig(match: .prefix("/v1/"), upstream: "api", policy: .pass, index: 1)
    private let exact = RouteConfig(match: .exact("/v1/ai/health"), methods: ["GET"], upstream: "api", policy: .pass, index: 2)
    private let root = RouteConfig(match: .prefix("/"), upstream: "api", policy: .pass, index: 3)

    func testLongestPrefixWinsWhateverTheOrder() {
        for routes in [[api, v1, root], [root, v1, api]] {
            let router = Router(routes: routes)
            XCTAssertEqual(router.match(method: "POST", path: "/v1/ai/chat"), .route(api))
            XCTAssertEqual(router.match(method: "GET", path: "/v1/other"), .route(v1))
            XCTAssertEqual(router.match(method: "GET", path: "/v1"), .route(v1), "a prefix ending in / covers the path without it")
            XCTAssertEqual(router.match(method: "GET", path: "/v1x"), .route(root), "a prefix matches only its full bytes")
            XCTAssertEqual(router.match(method: "DELETE", path: "/elsewhere"), .route(root))
        }
    }

    func testExactPathBeatsAnyPrefix() {
        let router = Router(routes: [api, exact, root])
        XCTAssertEqual(router.match(method: "GET", path: "/v1/ai/health"), .route(exact))
        XCTAssertEqual(router.match(method: "POST", path: "/v1/ai/health/more"), .route(api), "exact means exact")
    }

    /// The attack run's near misses: `POST /v1/chat/` reached the upstream unverified past an exact assert
    /// route, `/internal` got past a deny on `/internal/`. Both now take the stricter route.
    func testNearMissSpellingsTakeTheRouteTheyMissedNotTheCatchAll() {
        let chat = RouteConfig(match: .exact("/v1/chat"), upstream: "api", policy: .assert, index: 0)
        let slashed = RouteConfig(match: .exact("/v1/upload/"), upstream: "api", policy: .assert, index: 1)
        let folded = RouteConfig(match: .exact("/v1/Folded"), upstream: "api", policy: .assert, caseInsensitive: true, index: 2)
        let internalOnly = RouteConfig(match: .prefix("/internal/"), upstream: nil, policy: .deny, index: 3)
        let chatSlash = RouteConfig(match: .exact("/v1/own/"), upstream: "api", policy: .pass, index: 4)
        let own = RouteConfig(match: .exact("/v1/own"), upstream: "api", policy: .assert, index: 5)
        let router = Router(routes: [chat, slashed, folded, internalOnly, chatSlash, own, root])
        XCTAssertEqual(router.match(method: "POST", path: "/v1/chat/"), .route(chat))
        XCTAssertEqual(router.match(method: "POST", path: "/v1/upload"), .route(slashed))
        XCTAssertEqual(router.match(method: "POST", path: "/V1/FOLDED/"), .route(folded))
        XCTAssertEqual(router.match(method: "GET", path: "/internal"), .route(internalOnly))
        XCTAssertEqual(router.match(method: "GET", path: "/internal/x"), .route(internalOnly))
        XCTAssertEqual(router.match(method: "GET", path: "/v1/own/"), .route(chatSlash), "a twin with its own exact route keeps it")
        XCTAssertEqual(router.match(method: "GET", path: "/v1/chat/x"), .route(root), "exact still means one path (and its twin)")
        XCTAssertEqual(router.match(method: "GET", path: "/internalx"), .route(root))
        XCTAssertEqual(router.match(method: "GET", path: "/"), .route(root))
        // A prefix written for the twin itself is more specific than the exact route it is a twin of.
        let chatPrefix = RouteConfig(match: .prefix("/v1/chat/"), upstream: nil, policy: .deny, index: 7)
        let both = Router(routes: [chat, chatPrefix, root])
        XCTAssertEqual(both.match(method: "POST", path: "/v1/chat/"), .route(chatPrefix))
        XCTAssertEqual(both.match(method: "POST", path: "/v1/chat"), .route(chat))
        let denyA = RouteConfig(match: .prefix("/a/"), upstream: nil, policy: .deny, index: 1)
        let sameLength = Router(routes: [RouteConfig(match: .exact("/a/"), upstream: "api", policy: .pass, index: 0), denyA, root])
        XCTAssertEqual(sameLength.match(method: "GET", path: "/a"), .route(denyA), "a tie goes to the stricter route")
    }

    func testWrongMethodIsRefusedAndNeverFallsThroughToAShorterPrefix() {
        let router = Router(routes: [api, v1, exact, root])
        XCTAssertEqual(router.match(method: "GET", path: "/v1/ai/chat"), .methodNotAllowed(api, allowed: ["POST"]))
        XCTAssertEqual(router.match(method: "post", path: "/v1/ai/chat"), .methodNotAllowed(api, allowed: ["POST"]),
                       "methods are case-sensitive")
        XCTAssertEqual(router.match(method: "POST", path: "/v1/ai/health"), .methodNotAllowed(exact, allowed: ["GET"]))
    }

    func testNothingMatchesWithoutACatchAll() {
        let router = Router(routes: [api, exact])
        XCTAssertEqual(router.match(method: "POST", path: "/v2/ai/chat"), .notFound)
        XCTAssertEqual(router.match(method: "POST", path: "/"), .notFound)
        XCTAssertEqual(Router(routes: []).match(method: "GET", path: "/"), .notFound)
    }

    func testPathsCompareAsBytesNotAsCanonicallyEquivalentText() {
        let composed = RouteConfig(match: .exact("/caf\u{E9}"), upstream: "api", policy: .deny, index: 0)
        let router = Router(routes: [composed, api, root])
        XCTAssertEqual(router.match(method: "GET", path: "/caf\u{E9}"), .route(composed))
        XCTAssertEqual(router.match(method: "GET", path: "/cafe\u{301}"), .route(root), "different bytes, different route")
        // A combining mark after the prefix's final "/" fuses with it into one Character; bytes still match.
        XCTAssertEqual(router.match(method: "POST", path: "/v1/ai/\u{301}x"), .route(api))
    }

    func testFirstOfDuplicateRoutesWins() {
        let twin = RouteConfig(match: .prefix("/v1/ai/"), upstream: "other", policy: .pass, index: 9)
        XCTAssertEqual(Router(routes: [api, twin]).match(method: "POST", path: "/v1/ai/x"), .route(api))
    }
}
