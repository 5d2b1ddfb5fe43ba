import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One `redis-server` process of a test setup (a Cluster node, a Sentinel-managed server, a sentinel, a TLS
/// server) on 127.0.0.1, logging to a file in its own directory, reachable with `cli`.
public final class RedisNode: @unchecked Sendable {
    public let port: Int
    public let directory: String
    /// What `redis-server` is started with (besides the port, bind, directory and log file).
    private let arguments: [String]
    /// How redis-cli reaches it: host, port, TLS and login options.
    private let connection: [String]
    private let lock = NSLock()
    private var process: Process?

    public var address: String { "127.0.0.1:\(port)" }
    public var logFile: String { "\(directory)/redis-\(port).log" }

    /// `portArgument` is "--port" or "--tls-port"; `cliOptions` are the redis-cli options besides -h and -p.
    init(port: Int, directory: String, arguments: [String], portArgument: String = "--port", cliOptions: [String] = [],
         configFile: String? = nil) {
        self.port = port
        self.configFile = configFile
        self.directory = directory
        self.arguments = [portArgument, String(port)] + (portArgument == "--port" ? [] : ["--port", "0"]) + arguments
        connection = ["-h", "127.0.0.1", "-p", String(port)] + cliOptions
    }

    deinit { kill(signal: SIGKILL) }

    /// Starts it and waits (up to `timeout`) for it to answer; false when it exited, e.g. its port was taken.
    @discardableResult
    public func start(timeout: TimeInterval = 10) throws -> Bool {
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        // Servers of one set-up share a directory: each its own snapshot file, or a restarted one would load the
        // snapshot another wrote when it last synced as a replica (someone else's data, as of then).
        let snapshot = configFile == nil ? ["--dbfilename", "dump-\(port).rdb"] : []
        server.arguments = ["redis-server"] + configFileArgument + ["--bind", "127.0.0.1", "--dir", directory, "--logfile", logFile,
                                                                    "--save", "", "--appendonly", "no"] + snapshot + arguments
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        server.standardInput = FileHandle.nullDevice
        try server.run()
        lock.withLock { process = server }
        let deadline = Date().addingTimeInterval(timeout)
        while server.isRunning, Date() < deadline {
            // Ours, not another test's server that already had the port (ours then exits).
            if (try? info("server"))?["process_id"] == String(server.processIdentifier) { return true }
            usleep(20_000)
        }
        if server.isRunning { throw TestSupportError("redis-server on port \(port) did not answer within \(timeout) s: \(logTail)") }
        lock.withLock { process = nil }
        return false
    }

    /// Sentinels are started from a config file they may rewrite.
    private let configFile: String?
    private var configFileArgument: [String] { configFile.map { [$0] } ?? [] }

    public var isRunning: Bool { lock.withLock { process?.isRunning ?? false } }

    /// SIGKILL: the node dies as in a crash (no goodbye to the Cluster or the sentinels).
    public func crash() { kill(signal: SIGKILL) }

    /// SIGTERM, then SIGKILL after 5 s.
    public func stop() { kill(signal: SIGTERM) }

    private func kill(signal number: Int32) {
        guard let running = lock.withLock({ () -> Process? in defer { process = nil }; return process }) else { return }
        Glibc.kill(running.processIdentifier, number)
        let deadline = Date().addingTimeInterval(5)
        while running.isRunning, Date() < deadline { usleep(10_000) }
        if running.isRunning { Glibc.kill(running.processIdentifier, SIGKILL) }
        running.waitUntilExit()
    }

    /// `redis-cli` against this node; the reply text (raw, one item per line).
    public func cli(_ command: [String], timeout: TimeInterval = 10) throws -> Command.Result {
        try Command.run("redis-cli", connection + ["--no-auth-warning", "--raw"] + command, timeout: timeout)
    }

    /// The reply, failing on a non-zero exit or an error reply.
    public func query(_ command: String...) throws -> String {
        let result = try cli(command)
        let text = result.output.trimmingCharacters(in: .whitespacesAndNewlines)
        guard result.status == 0, !text.hasPrefix("ERR"), !text.hasPrefix("(error)") else {
            throw TestSupportError("\(command.joined(separator: " ")) on \(address): \(text)")
        }
        return text
    }

    /// Waits until `replicas` of this primary's replicas have acknowledged everything it has taken so far,
    /// by replication offset. (WAIT sent by redis-cli would not: it waits only for its own connection's writes,
    /// and a new connection has none, so it returns at once.)
    public func waitForReplicas(_ replicas: Int = 1, timeout: TimeInterval = 5) throws {
        let offset = try info("replication")["master_repl_offset"].flatMap(Int.init)
        guard let offset else { throw TestSupportError("\(address) reports no master_repl_offset") }
        try waitUntil(timeout: timeout, "\(replicas) replica(s) of \(address) to reach offset \(offset)") {
            let acknowledged = try info("replication").filter { $0.key.hasPrefix("slave") && $0.key.dropFirst(5).allSatisfy(\.isNumber) }
                .compactMap { $0.value.split(separator: ",").first { $0.hasPrefix("offset=") }.flatMap { Int($0.dropFirst(7)) } }
            return acknowledged.filter { $0 >= offset }.count >= replicas
        }
    }

    /// `INFO section` as key → value.
    public func info(_ section: String) throws -> [String: String] { try fields("INFO", section) }

    /// `CLUSTER INFO` as key → value.
    public func clusterInfo() throws -> [String: String] { try fields("CLUSTER", "INFO") }

    private func fields(_ command: String...) throws -> [String: String] {
        var fields: [String: String] = [:]
        for line in try cli(command).output.split(whereSeparator: \.isNewline) {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = parts[1].trimmingCharacters(in: .whitespaces) }
        }
        return fields
    }

    public var logTail: String { logTail(lines: 5) }

    /// The last `lines` lines of its log file, for a failure message.
    public func logTail(lines: Int) -> String {
        let text = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(lines).joined(separator: "\n")
    }

    /// Starts a node on a random free port (and, for Cluster nodes, a free bus port at +10000), retrying elsewhere.
    /// Below the kernel's ephemeral range (32768+), whose TIME_WAIT sockets from busy neighbours can block a bind.
    static func launch(directory: String, portRange: Range<Int> = 10_000..<20_000,
                       make: (_ port: Int) throws -> RedisNode) throws -> RedisNode {
        for _ in 0..<20 {
            let node = try make(Int.random(in: portRange))
            if try node.start() { return node }
        }
        throw TestSupportError("no free port for redis-server after 20 tries")
    }
}

/// Polls `condition` every 50 ms until it holds or `timeout` passes.
public func waitUntil(timeout: TimeInterval, _ what: String, _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if (try? condition()) == true { return }
        usleep(50_000)
    }
    throw TestSupportError("timed out after \(timeout) s waiting for \(what)")
}
