import Foundation

/// A real TLS upstream: `openssl s_server -www` on a free loopback port, with the server certificate of
/// `certificates` (for localhost and 127.0.0.1, signed by its test CA). It answers every GET with
/// `200` and a status page. With `requireClientCertificate` the handshake needs a client certificate that
/// the same CA signed (`-Verify`: refused without one).
public final class HTTPSTestUpstream: @unchecked Sendable {
    public let process: ChildProcess
    public let port: Int
    public var baseURL: String { "https://127.0.0.1:\(port)" }

    public init(certificates: TestCertificates, requireClientCertificate: Bool = false) throws {
        var lastOutput = ""
        for _ in 1...3 {
            let port = TestPaths.freePort()
            let process = try ChildProcess(
                executable: "/usr/bin/env",
                arguments: ["openssl", "s_server", "-accept", "127.0.0.1:\(port)", "-www", "-cert", certificates.serverCertFile,
                            "-key", certificates.serverKeyFile, "-CAfile", certificates.caFile]
                    + (requireClientCertificate ? ["-Verify", "1"] : []))
            // s_server prints ACCEPT once it listens (or exits when the port was taken meanwhile).
            if process.waitForLine(timeout: 10, where: { $0 == "ACCEPT" }) != nil {
                (self.process, self.port) = (process, port)
                return
            }
            lastOutput = process.lines.joined(separator: "\n")
            process.stop()
        }
        throw TestSupportError("openssl s_server did not start:\n\(lastOutput)")
    }

    deinit { stop() }

    public func stop() { process.stop() }
}
