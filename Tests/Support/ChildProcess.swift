import Foundation
import Synchronization

/// A program the tests start (redis-server, the example upstream, the gateway binary) with its stdout
/// and stderr captured line by line, so a test can wait for a line or read the gateway's JSON log.
public final class ChildProcess: @unchecked Sendable {
    public let process = Process()
    private let output = Mutex<[String]>([])
    private let partial = Mutex<String>("")
    private let outputPipe = Pipe()
    /// The pipe reached end of file: every line the process printed is in `lines`.
    private let drained = Atomic<Bool>(false)

    public init(executable: String, arguments: [String], environment: [String: String]? = nil, directory: String? = nil) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        process.standardOutput = outputPipe
        process.standardError = outputPipe
        process.standardInput = FileHandle.nullDevice
        outputPipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            guard let self else { return }
            guard !data.isEmpty else {
                self.drained.store(true, ordering: .releasing)
                return
            }
            self.append(String(decoding: data, as: UTF8.self))
        }
        try process.run()
    }

    deinit { stop() }

    private func append(_ text: String) {
        let lines: [String] = partial.withLock { pending in
            pending += text
            var complete = pending.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            pending = complete.removeLast()
            return complete
        }
        if !lines.isEmpty { output.withLock { $0.append(contentsOf: lines) } }
    }

    /// Every complete line printed so far.
    public var lines: [String] { output.withLock { $0 } }

    /// Waits until some line satisfies `predicate`; returns it, or nil after `timeout` seconds.
    public func waitForLine(timeout: TimeInterval = 10, where predicate: (String) -> Bool) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let line = lines.first(where: predicate) { return line }
            if !process.isRunning { return lines.first(where: predicate) }
            usleep(20_000)
        }
        return nil
    }

    public func signal(_ number: Int32) { if process.isRunning { kill(process.processIdentifier, number) } }

    /// Waits for exit up to `timeout` seconds; returns the exit status, nil if still running.
    @discardableResult
    public func waitForExit(timeout: TimeInterval) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning, Date() < deadline { usleep(20_000) }
        if process.isRunning { return nil }
        // The exit can be seen before the reader has taken the last output: wait (briefly) for end of file.
        let drainDeadline = Date().addingTimeInterval(0.25)
        while !drained.load(ordering: .acquiring), Date() < drainDeadline { usleep(5_000) }
        return process.terminationStatus
    }

    /// SIGTERM, then SIGKILL if it does not go within 5 s.
    public func stop() {
        guard process.isRunning else { return }
        signal(SIGTERM)
        if waitForExit(timeout: 5) == nil {
            signal(SIGKILL)
            waitForExit(timeout: 5)
        }
        outputPipe.fileHandleForReading.readabilityHandler = nil
    }
}

public enum TestPaths {
    /// The repository root (this file is Tests/Support/ChildProcess.swift).
    public static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    /// The shared test vectors next to the repository.
    public static let vectors = URL(fileURLWithPath: repository).deletingLastPathComponent().appendingPathComponent("shared/vectors").path

    /// The Markdown a newcomer reads, relative to the repository: README.md, bench/README.md and docs/*.md.
    public static let documentation = ["README.md", "bench/README.md"]
        + ((try? FileManager.default.contentsOfDirectory(atPath: repository + "/docs")) ?? [])
            .filter { $0.hasSuffix(".md") }.sorted().map { "docs/" + $0 }

    /// The products folder of this build (where the test bundle and the `gateway` binary are).
    public static let products: String = {
        var url = URL(fileURLWithPath: CommandLine.arguments.first { $0.hasSuffix(".xctest") } ?? CommandLine.arguments[0])
        while url.path != "/", !FileManager.default.fileExists(atPath: url.appendingPathComponent("gateway").path) {
            url.deleteLastPathComponent()
        }
        return url.path
    }()

    public static var gatewayBinary: String { products + "/gateway" }

    /// A fresh temporary directory.
    public static func temporaryDirectory(_ name: String) -> String {
        let path = NSTemporaryDirectory() + "gateway-\(name)-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// A socket listening on 127.0.0.1 (a free port) with `backlog`, and its port; the caller closes it.
    public static func listeningSocket(backlog: Int32) -> (socket: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, backlog) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        precondition(listening, "a loopback listener could not be opened")
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A TCP port free on 127.0.0.1 right now.
    public static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Int32 in
                _ = bind(fd, pointer, length)
                return getsockname(fd, pointer, &length)
            }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
