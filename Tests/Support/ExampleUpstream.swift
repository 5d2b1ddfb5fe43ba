import Foundation

/// examples/upstream.py, the stand-in API, on a free loopback port (it picks one and prints it).
public final class ExampleUpstream: @unchecked Sendable {
    public let process: ChildProcess
    public let port: Int
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    public init() throws {
        process = try ChildProcess(executable: "/usr/bin/env",
                                   arguments: ["python3", TestPaths.repository + "/examples/upstream.py", "--host", "127.0.0.1", "--port", "0"])
        let prefix = "listening on http://127.0.0.1:"
        guard let line = process.waitForLine(timeout: 10, where: { $0.hasPrefix(prefix) }),
              let port = Int(line.dropFirst(prefix.count)) else {
            process.stop()
            throw TestSupportError("examples/upstream.py did not start: \(process.lines.joined(separator: "\n"))")
        }
        self.port = port
    }

    deinit { stop() }

    public func stop() { process.stop() }
}

public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
