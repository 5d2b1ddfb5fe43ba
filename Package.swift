// swift-tools-version:6.0
import PackageDescription

/// A Debian -dev package exposed to Swift as a system-library target (module.modulemap + shim.h).
func systemLibrary(_ name: String, pkgConfig: String, apt: String) -> Target {
    .systemLibrary(name: name, pkgConfig: pkgConfig, providers: [.apt([apt])])
}

let package = Package(
    name: "AppAttestGateway",
    // For the AppAttestClient product; the gateway itself is built on Linux.
    platforms: [.iOS(.v15), .macOS(.v12)],
    products: [
        .executable(name: "gateway", targets: ["GatewayCLI"]),
        // `make demo`: the app's side of the story, played through AppAttestClient by a simulated iPhone.
        .executable(name: "app-demo", targets: ["AppDemo"]),
        .library(name: "AssertionCheck", targets: ["AssertionCheck"]),
        // What an iOS app adds: App Attest key lifecycle, signed requests, DeviceCheck fallback, debug tokens.
        .library(name: "AppAttestClient", targets: ["AppAttestClient"]),
    ],
    targets: [
        systemLibrary("COpenSSL", pkgConfig: "openssl", apt: "libssl-dev"),
        // libssl (and libcrypto) for TLS; only the TLS target imports it.
        systemLibrary("CTLS", pkgConfig: "openssl", apt: "libssl-dev"),
        systemLibrary("CCBOR", pkgConfig: "libcbor", apt: "libcbor-dev"),
        systemLibrary("CCurl", pkgConfig: "libcurl", apt: "libcurl4-openssl-dev"),
        systemLibrary("CLibUV", pkgConfig: "libuv", apt: "libuv1-dev"),
        .systemLibrary(name: "CHTTPParser", providers: [.apt(["libhttp-parser-dev"])]),
        systemLibrary("CYAML", pkgConfig: "yaml-0.1", apt: "libyaml-dev"),
        // HTTP/2 framing, HPACK and flow control for the listener; only HTTPServer's HTTP2Session imports it.
        systemLibrary("CNGHTTP2", pkgConfig: "libnghttp2", apt: "libnghttp2-dev"),
        // No library: a header whose macro carries the git commit of a release build (gateway_build_info).
        .systemLibrary(name: "CBuildInfo"),

        // Pure verification: attestation, assertion, client-data binding. No I/O, no clock.
        .target(name: "AssertionCheck", dependencies: ["COpenSSL", "CCBOR"]),
        // A fake iPhone and test CA minting Apple-format objects (tests, demo, bench only).
        .target(name: "DeviceSimulator", dependencies: ["AssertionCheck", "COpenSSL"]),
        // Event-loop threads (libuv) that are Swift task executors, and a bounded pool for blocking work.
        .target(name: "EventLoop", dependencies: ["CLibUV"]),
        // TLS over the loops' sockets through memory BIOs, either side: Redis connections (client) and the listener
        // (server: certificates by SNI, ALPN, OCSP staples, reloadable contexts).
        .target(name: "TLS", dependencies: ["CTLS", "EventLoop"]),
        // Redis from the event loops: RESP over the loop's own sockets (TCP or TLS), pipelined, every command bounded
        // in time; one server, a Cluster (slot map, MOVED/ASK) or a Sentinel-managed primary.
        .target(name: "RedisClient", dependencies: ["EventLoop", "TLS"]),
        // The attestation state in Redis: keys, counters, spent challenges, device marks; its Lua scripts.
        .target(name: "AttestStore", dependencies: ["AssertionCheck", "EventLoop", "RedisClient"]),
        // Transport to the protected API: on the event loops, an own HTTP/1.1 client for http:// (its own strict
        // scanner frames the responses) and curl's multi handle for https://; curl alone off the loops.
        .target(name: "Upstream", dependencies: ["CCurl", "EventLoop"]),
        // Inbound HTTP/1.1 and HTTP/2 on the event loops, in clear or over TLS: strict head check, libhttp-parser framing,
        // nghttp2 for HTTP/2, back-pressure, timeouts.
        .target(name: "HTTPServer", dependencies: ["CHTTPParser", "CNGHTTP2", "EventLoop", "TLS", "Upstream"]),
        // Apple's server APIs: the ES256 JWT, DeviceCheck two bits, App Attest receipt refresh.
        .target(name: "AppleServices", dependencies: ["AssertionCheck", "Upstream"]),
        // Google's server APIs: the service account's RS256 JWT-bearer access token, Play Integrity's decodeIntegrityToken.
        .target(name: "GoogleServices", dependencies: ["AssertionCheck", "EventLoop", "Upstream"]),
        // The proxy: config, HTTP server, routing, policies, Redis store, ops, CLI commands.
        .target(name: "Gateway", dependencies: [
            "AssertionCheck", "AppleServices", "AttestStore", "EventLoop", "GoogleServices", "HTTPServer", "RedisClient", "TLS", "Upstream", "CYAML",
            "CBuildInfo",
        ]),
        // The command line: serve and the operator commands from Gateway; demo and bench preparation (simulated
        // devices) live here only, so the server library never links the simulator.
        .executableTarget(name: "GatewayCLI", dependencies: ["Gateway", "AssertionCheck", "DeviceSimulator", "EventLoop", "HTTPServer", "RedisClient",
                                                            "Upstream"]),
        // The iOS client: Foundation only (no server module, no OpenSSL), so it builds for iOS and is tested here.
        .target(name: "AppAttestClient"),
        // The client's AppAttestService played by DeviceSimulator (tests and demo only, never an app).
        .target(name: "SimulatedAppAttest", dependencies: ["AppAttestClient", "AssertionCheck", "DeviceSimulator"]),
        .executableTarget(name: "AppDemo", dependencies: ["AppAttestClient", "SimulatedAppAttest", "DeviceSimulator", "Gateway"]),

        // Test plumbing shared by the test targets: child processes, the example upstream, a Redis of their own.
        .target(name: "TestSupport", dependencies: ["AssertionCheck", "EventLoop", "Upstream"], path: "Tests/Support"),
        .testTarget(name: "AssertionCheckTests", dependencies: ["AssertionCheck", "DeviceSimulator", "TestSupport"]),
        .testTarget(name: "RedisClientTests", dependencies: ["RedisClient", "EventLoop", "TLS", "TestSupport"]),
        .testTarget(name: "UpstreamTests", dependencies: ["Upstream", "EventLoop", "TestSupport", "CHTTPParser"]),
        .testTarget(name: "GatewayTests", dependencies: ["Gateway", "AssertionCheck", "AttestStore", "DeviceSimulator", "EventLoop", "HTTPServer", "TLS",
                                                   "RedisClient", "TestSupport"]),
        .testTarget(name: "AppleServicesTests", dependencies: ["AppleServices", "AssertionCheck", "TestSupport", "Upstream"]),
        .testTarget(name: "GoogleServicesTests", dependencies: ["GoogleServices", "AssertionCheck", "TestSupport", "Upstream"]),
        .testTarget(name: "AppAttestClientTests", dependencies: [
            "AppAttestClient", "SimulatedAppAttest", "AssertionCheck", "DeviceSimulator", "TestSupport",
        ]),
        .testTarget(name: "EndToEndTests", dependencies: ["AssertionCheck", "DeviceSimulator", "Upstream", "TestSupport"]),
    ]
)
