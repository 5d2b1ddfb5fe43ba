import RedisClient
import AttestStore
import AssertionCheck
import Dispatch
import EventLoop
import Foundation
import HTTPServer
import Upstream

/// `gateway serve --config FILE`: the proxy on `listen`, the admin endpoints on `admin_listen`.
/// SIGHUP reloads the file (a bad file keeps the running config); SIGTERM/SIGINT stop accepting,
/// drain in-flight requests and exit 0.
public enum ServeCommand {
    public static let usage = "usage: gateway serve --config gateway.yaml [--drain-seconds N] [--trust-anchor PEM (tests and demos only)]"

    public static func run(_ arguments: [String]) -> Int32 {
        let path: String
        let drainSeconds: Int
        let anchorOverride: (anchor: TrustAnchor, file: String)?
        do {
            var options = try Arguments(arguments)
            path = try options.required("config")
            drainSeconds = try options.integer("drain-seconds", default: 30)
            if let file = try options.optional("trust-anchor") {
                do { anchorOverride = (try TrustAnchor(pemFile: file), file) } catch { throw UsageError("--trust-anchor: \(error.message)") }
            } else {
                anchorOverride = nil
            }
            try options.rejectUnknown()
        } catch {
            FileHandle.standardError.write(Data("gateway serve: \(error)\n\(usage)\n".utf8))
            return 2
        }
        let log = EventLog(buffered: true)
        defer { log.close() }
        let loader = ConfigLoader(path: path, anchorOverride: anchorOverride)
        let config: GatewayConfig
        do {
            config = try loader.load()
        } catch {
            log.event(.error, "config_invalid", ["reason": error.reasonCode, "path": path, "errors": error.issues.map(\.description)])
            return 1
        }
        log.setLevel(config.log.level)
        do {
            let server = try Server(config: config, loader: loader, log: log)
            return server.runUntilStopped(drainSeconds: drainSeconds)
        } catch {
            log.event(.error, "startup_failed", ["message": "\(error)"])
            return 1
        }
    }
}

/// Reads the config file, applying `--trust-anchor` each time (start and every reload).
struct ConfigLoader: Sendable {
    let path: String
    let anchorOverride: (anchor: TrustAnchor, file: String)?

    func load() throws(ConfigError) -> GatewayConfig {
        let config = try GatewayConfig.load(path: path)
        guard let anchorOverride else { return config }
        return config.trusting(anchorOverride.anchor, file: anchorOverride.file)
    }
}

/// The running gateway: both listeners, the handler, and the signal sources that drive reload and stop.
final class Server: @unchecked Sendable {
    private let loader: ConfigLoader
    private let log: EventLog
    private let metrics = Metrics()
    private let handler: ProxyHandler
    private let loops: [EventLoop]
    private let blocking: BlockingPool
    private let proxyServer: HTTPServer
    /// glibc keeps freed memory in its arenas; a burst of large requests would otherwise hold RSS at its peak.
    private let trimTimer: Unchecked<LoopTimer>
    private let adminServer: HTTPServer
    private let admin: AdminHandler
    private let refresher: ReceiptRefresher
    private let stopped = DispatchSemaphore(value: 0)
    private var signalSources: [DispatchSourceSignal] = []
    private let signalQueue = DispatchQueue(label: "gateway.signals")

    init(config: GatewayConfig, loader: ConfigLoader, log: EventLog) throws {
        self.loader = loader
        self.log = log
        Server.announce(config, log: log)
        let files = Server.raiseFileLimit(to: config.server.connectionLimit + 1024)
        if files < config.server.connectionLimit + 1024 {
            log.event(.warn, "file_limit_below_connection_limit", [
                "file_limit": files, "connection_limit": config.server.connectionLimit,
                "message": "the open-file limit cannot hold server.connection_limit connections plus upstream and Redis sockets: raise LimitNOFILE / ulimit -n",
            ])
        }
        loops = try (0..<config.server.workers).map { index throws(LoopError) in try EventLoop(name: "loop-\(index)") }
        loops.forEach { $0.start() }
        // upstreams.*.max_idle_connections, shared out between the loops (each loop's curl keeps its own).
        let idle = config.upstreams.reduce(0) { $0 + $1.maxIdleConnections }
        let perLoop = max(1, (idle + config.server.workers - 1) / config.server.workers)
        LoopMulti.idleConnectionsPerLoop.withLock { $0 = perLoop }
        let first = loops[0]
        trimTimer = first.sync {
            let timer = LoopTimer(first) { releaseFreedMemory() }
            timer.start(milliseconds: 30_000, repeatMs: 30_000)
            return Unchecked(timer)
        }
        // Only key registration still blocks (attestation checks and its Redis writes): a few threads do.
        blocking = BlockingPool(threads: 4, name: "blocking")
        handler = ProxyHandler(runtime: try GatewayRuntime.build(config, log: log, metrics: metrics), metrics: metrics, log: log,
                               blocking: blocking)
        proxyServer = try HTTPServer(address: config.listen.description, limits: config.listenerLimits, handler: handler, loops: loops,
                                     tls: config.tls?.listenerTLS)
        admin = AdminHandler(proxy: handler, listener: proxyServer)
        adminServer = try HTTPServer(address: config.adminListen.description,
                                     limits: ServerLimits(workers: 1, connectionLimit: 64, maxBodyBytes: 0), handler: admin, loops: [loops[0]])
        let proxy = handler
        refresher = ReceiptRefresher(runtime: { proxy.runtime }, log: log, metrics: metrics)
        refresher.start()
        if let failure = handler.runtime.store.pingFailure() {
            // The cause (refused connection, wrong password, unknown database) is what the operator needs.
            log.event(.warn, "store_unreachable", ["redis": config.redis.redacted, "reason": failure.reasonCode,
                                                   "message": "Redis cannot be used (\(failure.message)): assert routes will fail with 503 until it can"])
        }
        log.event(.info, "listening", ["listen": "\(config.listen.host):\(proxyServer.port)", "admin_listen": "\(config.adminListen.host):\(adminServer.port)",
                                       "tls": config.tls != nil, "routes": config.routes.count, "config": loader.path])
    }

    /// Warns loudly about a trust anchor that is not Apple's: such a gateway accepts simulated devices.
    static func announce(_ config: GatewayConfig, log: EventLog) {
        if let warning = config.debugTokenWarning { log.event(.warn, "debug_tokens_in_production", ["message": warning]) }
        guard !config.appAttest.trustAnchor.isApple else { return }
        log.event(.warn, "trust_anchor_not_apple", [
            "trust_anchor": config.appAttest.trustAnchorFile ?? "?",
            "message": "WARNING: attestations are verified against a trust anchor that is NOT Apple's App Attestation root. "
                + "Any device this CA signs is accepted. Use this for tests and demos only, never in production.",
        ])
    }

    func runUntilStopped(drainSeconds: Int) -> Int32 {
        for number in [SIGHUP, SIGTERM, SIGINT] { signal(number, SIG_IGN) }
        signal(SIGPIPE, SIG_IGN)
        listen(SIGHUP) { [self] in reload() }
        listen(SIGTERM) { [self] in stopped.signal() }
        listen(SIGINT) { [self] in stopped.signal() }
        stopped.wait()
        drain(seconds: drainSeconds)
        return 0
    }

    private func listen(_ number: Int32, _ action: @escaping @Sendable () -> Void) {
        let source = DispatchSource.makeSignalSource(signal: number, queue: signalQueue)
        source.setEventHandler(handler: action)
        source.resume()
        signalSources.append(source)
    }

    /// Builds the new runtime completely before swapping it in; any error keeps the old one.
    private func reload() {
        do {
            let config = try loader.load()
            let running = handler.runtime.config
            let fixedAtStart = [("listen", config.listen != running.listen), ("admin_listen", config.adminListen != running.adminListen),
                                ("server", config.server.withoutBodyLimit != running.server.withoutBodyLimit),
                                // The certificates reload; turning TLS on or off changes what the port speaks.
                                ("server.tls", (config.tls == nil) != (running.tls == nil)),
                                ("app_attest.key_cache_size", config.appAttest.keyCacheSize != running.appAttest.keyCacheSize)]
            let ignored = fixedAtStart.filter(\.1).map(\.0)
            if !ignored.isEmpty {
                log.event(.warn, "restart_needed", ["keys": ignored, "message": "these settings change only on restart; the rest was reloaded"])
            }
            Server.announce(config, log: log)
            handler.replace(try GatewayRuntime.build(config, previous: handler.runtime, log: log, metrics: metrics))
            // New handshakes get the certificates just read; open connections keep theirs.
            if let tls = config.tls, running.tls != nil { proxyServer.replaceTLS(tls.listenerTLS) }
            log.setLevel(config.log.level)
            log.event(.info, "config_reloaded", ["config": loader.path, "routes": config.routes.count])
        } catch let error as ConfigError {
            log.event(.error, "config_reload_failed", ["reason": error.reasonCode, "errors": error.issues.map(\.description),
                                                       "message": "kept the running configuration"])
        } catch {
            log.event(.error, "config_reload_failed", ["reason": "invalid_config", "message": "\(error); kept the running configuration"])
        }
    }

    /// Stops accepting, closes idle keep-alive connections, lets in-flight requests finish (their responses
    /// carry `Connection: close`) up to the deadline, then closes what is left.
    private func drain(seconds: Int) {
        log.event(.info, "draining", ["in_flight": proxyServer.inFlightRequests, "timeout_seconds": seconds])
        admin.draining.store(true, ordering: .relaxed)
        proxyServer.drain()
        let deadline = Date().addingTimeInterval(Double(seconds))
        while proxyServer.inFlightRequests > 0, Date() < deadline { usleep(20_000) }
        let abandoned = proxyServer.inFlightRequests
        proxyServer.closeAll()
        adminServer.closeAll()
        refresher.stop()
        loops.forEach { $0.stop() }
        blocking.shutdown()
        log.event(.info, "stopped", ["abandoned_requests": abandoned])
    }

    /// Each connection is a descriptor: the soft limit is raised towards the hard one so that
    /// `connection_limit` is reachable.
    /// Answers the soft limit in force afterwards.
    static func raiseFileLimit(to wanted: Int) -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        if limit.rlim_cur < rlim_t(wanted) {
            limit.rlim_cur = min(limit.rlim_max, rlim_t(wanted))
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return Int(clamping: limit.rlim_cur)
    }
}

extension ServerLimits {
    /// The listener settings fixed at start-up (the body limit is applied per request, so it reloads).
    var withoutBodyLimit: ServerLimits {
        var limits = self
        limits.maxBodyBytes = 0
        return limits
    }
}
