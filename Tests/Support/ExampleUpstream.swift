import Foundation

/// examples/upstream.py, the stand-in API, on a free loopback port.
public final class ExampleUpstream: @unchecked Sendable {
    public let process: ChildProcess
    public let port: Int
    public var url: String { "http://127.0.0.1:\(port)" }

    public init() throws {
        port = TestPaths.freePort()
        process = try ChildProcess(executable: "/usr/bin/env",
                                   arguments: ["python3", TestPaths.repository + "/examples/upstream.py", "--host", "127.0.0.1", "--port", String(port)])
        guard process.waitForLine(timeout: 10, where: { $0.contains("listening on") }) != nil else {
            process.stop()
            throw TestSupportError("example upstream did not start: \(process.lines.joined(separator: "\n"))")
        }
    }

    public func stop() { process.stop() }
}

public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
