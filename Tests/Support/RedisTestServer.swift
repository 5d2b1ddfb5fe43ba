import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A throwaway `redis-server` on 127.0.0.1 for one test: a free port, no persistence, its own temp dir.
/// The test stops it (`stop()`, or when the object goes away); it can also be restarted on the same
/// port, or frozen with SIGSTOP to play a server that accepts connections but never answers.
public final class RedisTestServer {
    public let port: Int
    public let password: String?
    public let unixSocket: String?
    private let directory: URL
    private var process: Process?
    private var paused = false

    /// Starts a server; `password` sets requirepass, `unixSocket` adds a socket in the temp dir.
    public init(password: String? = nil, unixSocket: Bool = false) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("redis-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.password = password
        self.unixSocket = unixSocket ? directory.appendingPathComponent("redis.sock").path : nil
        // Try random high ports: redis-server exits at once when its port is taken, so retry elsewhere.
        for _ in 0..<20 {
            let candidate = Int.random(in: 20_000..<60_000)
            if try Self.launch(port: candidate, password: password, unixSocket: self.unixSocket,
                               directory: directory, into: &process) {
                port = candidate
                return
            }
        }
        throw RedisTestServerError.cannotStart("no free port found after 20 tries")
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Starts the server again on the same port (after `stop()`), with an empty dataset.
    public func restart() throws {
        stop()
        guard try Self.launch(port: port, password: password, unixSocket: unixSocket, directory: directory,
                              into: &process) else {
            throw RedisTestServerError.cannotStart("port \(port) was taken while the server was down")
        }
    }

    /// Stops the server and waits (at most 5 s, then SIGKILL) until it has exited.
    public func stop() {
        guard let running = process else { return }
        process = nil
        resume()
        running.terminate()
        let deadline = Date().addingTimeInterval(5)
        while running.isRunning, Date() < deadline { usleep(10_000) }
        if running.isRunning { kill(running.processIdentifier, SIGKILL) }
        running.waitUntilExit()
    }

    /// Freezes the server: the kernel still accepts connections, but nothing is answered.
    public func pause() {
        guard let running = process, !paused else { return }
        kill(running.processIdentifier, SIGSTOP)
        paused = true
    }

    public func resume() {
        guard let running = process, paused else { return }
        kill(running.processIdentifier, SIGCONT)
        paused = false
    }

    /// Launches redis-server and waits up to 5 s for PONG; false when it exited (port taken).
    private static func launch(port: Int, password: String?, unixSocket: String?, directory: URL,
                               into process: inout Process?) throws -> Bool {
        var arguments = ["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "",
                         "--appendonly", "no", "--dir", directory.path, "--logfile", ""]
        if let password { arguments += ["--requirepass", password] }
        if let unixSocket { arguments += ["--unixsocket", unixSocket] }
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        server.arguments = arguments
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        let deadline = Date().addingTimeInterval(5)
        while server.isRunning, Date() < deadline {
            if ping(port: port, password: password) {
                process = server
                return true
            }
            usleep(20_000)
        }
        if server.isRunning {
            server.terminate()
            server.waitUntilExit()
            throw RedisTestServerError.cannotStart("redis-server on port \(port) did not answer PING within 5 s")
        }
        return false
    }
}

public enum RedisTestServerError: Error {
    case cannotStart(String)

}

/// redis-cli PING: the server is up once it answers PONG.
private func ping(port: Int, password: String?) -> Bool {
    let cli = Process()
    cli.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    cli.arguments = ["redis-cli", "-h", "127.0.0.1", "-p", String(port), "--no-auth-warning"] + (password.map { ["-a", $0] } ?? []) + ["PING"]
    let output = Pipe()
    cli.standardOutput = output
    cli.standardError = FileHandle.nullDevice
    guard (try? cli.run()) != nil else { return false }
    cli.waitUntilExit()
    return String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).hasPrefix("PONG")
}
