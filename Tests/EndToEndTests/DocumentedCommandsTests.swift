import Foundation
import TestSupport
import XCTest

/// What a newcomer copies from the README and docs/ runs here as printed: the shell lines of their code
/// blocks (`gateway …` against a real Redis and a fake Apple, `curl …` against a started gateway, `make …`
/// targets, dry-run), and every command `gateway help` lists answers `--help` with its usage.
final class DocumentedCommandsTests: XCTestCase {
    static let shared = SharedFixture<(environment: GatewayEnvironment, apple: FakeAppleServer)>()
    var env: GatewayEnvironment { Self.shared.value.environment }

    override class func setUp() {
        super.setUp()
        shared.make { try GatewayEnvironment.withFakeApple() }
    }

    override class func tearDown() {
        shared.tearDown {
            $0.environment.stop()
            $0.apple.stop()
        }
        super.tearDown()
    }

    override func setUpWithError() throws { try Self.shared.check() }

    /// One shell line of a fenced `sh` block, with where it stands.
    struct DocumentedLine {
        let file: String
        let text: String
    }

    /// Lines of ```sh / bash / console / shell blocks; `\` continuations joined, a leading `$ ` dropped.
    static func shellLines() throws -> [DocumentedLine] {
        var found: [DocumentedLine] = []
        for file in TestPaths.documentation {
            let text = try String(contentsOfFile: TestPaths.repository + "/" + file, encoding: .utf8)
            var inShell = false, inBlock = false, pending = ""
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed.hasPrefix("```") {
                    if !inBlock { inShell = ["sh", "bash", "console", "shell"].contains(trimmed.dropFirst(3).trimmingCharacters(in: .whitespaces)) }
                    inBlock.toggle()
                    continue
                }
                guard inBlock, inShell else { continue }
                var command = pending + (trimmed.hasPrefix("$ ") ? String(trimmed.dropFirst(2)) : trimmed)
                if command.hasSuffix("\\") {
                    command.removeLast()
                    pending = command
                    continue
                }
                pending = ""
                if !command.isEmpty, !command.hasPrefix("#") { found.append(DocumentedLine(file: file, text: command)) }
            }
        }
        return found
    }

    /// Runs `line` in bash with the test's gateway binary first on PATH; nil while it still runs after `seconds`.
    func shell(_ line: String, directory: String, seconds: TimeInterval = 30) throws -> (process: ChildProcess, status: Int32?) {
        let binaries = URL(fileURLWithPath: TestPaths.gatewayBinary).deletingLastPathComponent().path
        let process = try ChildProcess(executable: "/bin/bash", arguments: ["-c", line], environment: [
            "PATH": binaries + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "TOKEN": Data("device-token:\(UUID().uuidString)".utf8).base64EncodedString(),
            "REDIS_URL": "redis://127.0.0.1:\(env.redis.port)/0",
        ], directory: directory)
        return (process, process.waitForExit(timeout: seconds))
    }

    /// A config for a second gateway of the same set-up on its own ports (a documented `serve` line).
    func configOnFreePorts(in directory: String) throws -> String {
        let path = directory + "/serve.yaml"
        try GatewayEnvironment.config(port: TestPaths.freePort(), admin: TestPaths.freePort(), redis: env.redisSection,
                                      upstreamURL: env.upstream.baseURL, directory: env.directory, routes: "  - { path_prefix: \"/\", upstream: api, policy: pass }",
                                      challengeTTL: 300).write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func testEveryDocumentedGatewayCommandRunsWithoutAUsageError() throws {
        let app = try env.app()
        XCTAssertEqual(try app.register().status, 200)
        let lines = try Self.shellLines().filter { $0.text.hasPrefix("gateway ") || $0.text.hasPrefix(".build/release/gateway ") }
        XCTAssertGreaterThanOrEqual(lines.count, 5, "the docs show gateway commands in sh blocks")
        // The lines of one document share a working directory: one makes what the next reads (a CA, say).
        var directories: [String: String] = [:]
        for documented in lines {
            let directory = directories[documented.file] ?? TestPaths.temporaryDirectory("doc-command")
            directories[documented.file] = directory
            let isServe = documented.text.contains(" serve ")
            let config = isServe ? try configOnFreePorts(in: TestPaths.temporaryDirectory("doc-serve")) : env.gateway.configPath
            let line = documented.text
                .replacingOccurrences(of: ".build/release/gateway ", with: "gateway ")
                .replacingOccurrences(of: #"[^\s"']*gateway\.yaml"#, with: config, options: .regularExpression)
                .replacingOccurrences(of: "KEY_ID", with: app.device.keyIdBase64)
            let (process, status) = try shell(line, directory: directory, seconds: isServe ? 5 : 30)
            let output = process.lines.joined(separator: "\n")
            defer { process.stop() }
            let context = "\(documented.file): \(documented.text)\n\(output)"
            XCTAssertFalse(output.contains("usage:"), context)
            if isServe {
                XCTAssertNil(status, "serve keeps running: \(context)")
                XCTAssertNotNil(process.waitForLine(timeout: 15) { $0.contains("\"event\":\"listening\"") }, context)
            } else {
                XCTAssertNotNil(status, "finished: \(context)")
                XCTAssertNotEqual(status, 2, context)
                XCTAssertNotEqual(status, 127, "command not found: \(context)")
            }
        }
    }

    func testEveryDocumentedCurlLineReachesARouteOrEndpoint() throws {
        let lines = try Self.shellLines().filter { $0.text.hasPrefix("curl ") }
        XCTAssertGreaterThanOrEqual(lines.count, 2, "the README shows curl lines against a started gateway")
        for documented in lines {
            let line = documented.text
                .replacingOccurrences(of: #"\s+#\s.*$"#, with: "", options: .regularExpression)   // the comment, so options can follow
                .replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(env.gateway.port)")
                .replacingOccurrences(of: "127.0.0.1:9901", with: "127.0.0.1:\(env.gateway.adminPort)")
            // The status alone: a documented line that answers 404 or 5xx is drift.
            let (process, status) = try shell(line + " -sS -o /dev/null -w '%{http_code}\\n'", directory: env.directory)
            let code = Int(process.lines.last ?? "") ?? 0
            XCTAssertEqual(status, 0, "\(documented.file): \(documented.text)\n\(process.lines)")
            XCTAssertTrue((200..<500).contains(code) && code != 404, "\(documented.file): \(documented.text) answered \(code)")
        }
    }

    func testEveryDocumentedMakeTargetExists() throws {
        let makefile = try String(contentsOfFile: TestPaths.repository + "/Makefile", encoding: .utf8)
        let targets = Set(makefile.split(separator: "\n").compactMap { line -> String? in
            guard let colon = line.firstIndex(of: ":"), !line.hasPrefix("\t"), !line.hasPrefix("#") else { return nil }
            return String(line[..<colon])
        })
        let lines = try Self.shellLines().filter { $0.text.hasPrefix("make ") }
        XCTAssertTrue(lines.contains { $0.file == "README.md" && $0.text.hasPrefix("make test") }, "CI runs the README's `make test`")
        for documented in lines {
            let target = String(documented.text.dropFirst(5).prefix { !$0.isWhitespace })
            XCTAssertTrue(targets.contains(target), "\(documented.file): make \(target) is not a Makefile target")
            // A dry run: the target and what it depends on resolve (running them is the suite's and bench's job).
            let (dryRun, status) = try shell("make -n \(target)", directory: TestPaths.repository)
            XCTAssertEqual(status, 0, "\(documented.file): make -n \(target)\n\(dryRun.lines.joined(separator: "\n"))")
        }
    }

    /// The README's config passes `check-config` as printed.
    func testTheReadmesConfigIsValid() throws {
        let readme = try String(contentsOfFile: TestPaths.repository + "/README.md", encoding: .utf8)
        let blocks = readme.components(separatedBy: "```yaml\n").dropFirst().compactMap { $0.components(separatedBy: "```").first }
        XCTAssertFalse(blocks.isEmpty, "the README shows a gateway.yaml")
        for (index, yaml) in blocks.enumerated() {
            let path = TestPaths.temporaryDirectory("readme-yaml") + "/gateway-\(index).yaml"
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            let check = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: ["check-config", path])
            XCTAssertEqual(check.waitForExit(timeout: 20), 0, "\(yaml)\n\(check.lines.joined(separator: "\n"))")
        }
    }

    /// Each command of `gateway help` answers `gateway <command> --help` with its own usage on stdout, exit 0.
    func testEveryCommandGatewayHelpListsPrintsItsUsage() throws {
        let help = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: ["help"])
        XCTAssertEqual(help.waitForExit(timeout: 10), 0)
        usleep(50_000)
        let commands = Set(help.lines.dropFirst().compactMap { line -> String? in
            // Command lines are indented by two spaces; their continuations by more.
            guard line.hasPrefix("  "), !line.hasPrefix("   ") else { return nil }
            return line.split(separator: " ").first.map(String.init)
        }).subtracting(["help"])
        XCTAssertTrue(commands.isSuperset(of: ["serve", "check-config", "keys", "devicecheck", "demo", "verify", "bench"]), "\(commands)")
        for command in commands.sorted() {
            for flag in ["--help", "-h"] {
                let process = try ChildProcess(executable: TestPaths.gatewayBinary, arguments: [command, flag])
                let status = process.waitForExit(timeout: 10)
                usleep(50_000)
                let output = process.lines.joined(separator: "\n")
                XCTAssertEqual(status, 0, "gateway \(command) \(flag): \(output)")
                XCTAssertTrue(output.hasPrefix("usage: gateway \(command)"), "gateway \(command) \(flag): \(output)")
            }
        }
    }
}
