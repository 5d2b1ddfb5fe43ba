import Foundation

/// The real `gateway serve` binary with a config file the test writes, on free loopback ports.
public final class GatewayProcess: @unchecked Sendable {
    public let process: ChildProcess
    public let port: Int
    public let adminPort: Int
    public let configPath: String
    public var baseURL: String { "http://127.0.0.1:\(port)" }
    public var adminURL: String { "http://127.0.0.1:\(adminPort)" }

    /// `config` receives the listen and admin ports and returns the YAML text; `environment` is added to the gateway's.
    /// `ports` picks them (free ones; a test of the retry gives a taken one first); `arguments` are added to `serve`'s.
    public init(directory: String, environment: [String: String]? = nil, arguments: [String] = [],
                ports: () -> (Int, Int) = { (TestPaths.freePort(), TestPaths.freePort()) },
                config: (_ port: Int, _ adminPort: Int) -> String) throws {
        configPath = directory + "/gateway.yaml"
        for attempt in 1... {
            let (port, adminPort) = ports()
            try config(port, adminPort).write(toFile: configPath, atomically: true, encoding: .utf8)
            let process = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: ["serve", "--config", configPath] + arguments,
                                       environment: environment)
            if process.waitForLine(timeout: 15, where: { $0.contains("\"event\":\"listening\"") }) != nil {
                (self.port, self.adminPort, self.process) = (port, adminPort, process)
                return
            }
            let output = process.lines.joined(separator: "\n")
            process.stop()
            // A free port can be taken by another process (tests run beside other suites) before the gateway binds it.
            // libuv says "address already in use" (lower case): matched whatever the case.
            guard attempt < 3, output.lowercased().contains("address already in use") else {
                throw TestSupportError("gateway did not start:\n\(output)")
            }
        }
        fatalError("unreachable")
    }

    deinit { stop() }

    public func stop() { process.stop() }

    /// The JSON objects the gateway logged so far.
    public var events: [[String: Any]] {
        process.lines.compactMap { line in
            guard let data = line.data(using: .utf8) else { return nil }
            return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        }
    }

    /// Waits for a logged object that satisfies `predicate`.
    public func waitForEvent(timeout: TimeInterval = 5, where predicate: ([String: Any]) -> Bool) -> [String: Any]? {
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            if let event = events.first(where: predicate) { return event }
            usleep(20_000)
        } while Date() < deadline
        return nil
    }

    /// Rewrites the config file and sends SIGHUP.
    public func reload(_ yaml: String) throws {
        try yaml.write(toFile: configPath, atomically: true, encoding: .utf8)
        process.signal(SIGHUP)
    }
}
