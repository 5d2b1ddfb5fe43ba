import Foundation
import XCTest

/// examples/upstream.py running on a free loopback port for one test; `stop()` ends it.
final class ExampleUpstream {
    private let process = Process()
    let port: Int

    var baseURL: String { "http://127.0.0.1:\(port)" }

    init() throws {
        let repoRoot = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", repoRoot.appendingPathComponent("examples/upstream.py").path, "--host", "127.0.0.1", "--port", "0",
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = Self.firstLine(of: output.fileHandleForReading, timeout: 10)
        guard let line, let port = line.split(separator: ":").last.flatMap({ Int($0) }),
              line.hasPrefix("listening on http://127.0.0.1:")
        else {
            process.terminate()
            throw XCTSkip("examples/upstream.py did not start (printed \(line ?? "nothing"))")
        }
        self.port = port
    }

    deinit { stop() }

    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }

    /// Reads on another thread so a silent server cannot hang the test.
    private static func firstLine(of handle: FileHandle, timeout: TimeInterval) -> String? {
        final class Box: @unchecked Sendable { var text = "" }  // written before signal, read after wait
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            while !box.text.contains("\n") {
                let data = handle.availableData
                if data.isEmpty { break }
                box.text += String(decoding: data, as: UTF8.self)
            }
            done.signal()
        }
        guard done.wait(timeout: .now() + timeout) == .success else { return nil }
        return box.text.split(separator: "\n").first.map(String.init)
    }
}

/// What /echo reports about the request it received.
struct EchoReport: Decodable {
    let method: String
    let path: String
    let query: String
    let headers: [[String]]
    let bodyBase64: String
    let clientPort: Int
    let connectionNumber: Int

    var body: [UInt8] { [UInt8](Data(base64Encoded: bodyBase64) ?? Data()) }
    var headerFields: [(name: String, value: String)] { headers.map { ($0[0], $0[1]) } }

    init(_ json: [UInt8]) throws {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        self = try decoder.decode(EchoReport.self, from: Data(json))
    }
}
