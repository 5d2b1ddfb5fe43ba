import Foundation

/// A `redis-server` that speaks only TLS (`--tls-port`, `--port 0`) with a certificate from a CA made at test
/// time (`certificates`). Client certificates are optional unless `requireClientCertificate`.
public final class RedisTLSTestServer: @unchecked Sendable {
    public let certificates: TestCertificates
    public let node: RedisNode
    public let password: String?
    public var port: Int { node.port }
    /// `rediss://[:password@]localhost:port/0` (the certificate names localhost and 127.0.0.1).
    public var url: String { "rediss://\(password.map { ":\($0)@" } ?? "")localhost:\(port)/0" }

    public init(password: String? = nil, requireClientCertificate: Bool = false) throws {
        let certificates = try TestCertificates()
        self.certificates = certificates
        self.password = password
        let directory = certificates.directory
        node = try RedisNode.launch(directory: directory) { port in
            RedisNode(port: port, directory: directory,
                      arguments: ["--tls-cert-file", certificates.serverCertFile, "--tls-key-file", certificates.serverKeyFile,
                                  "--tls-ca-cert-file", certificates.caFile,
                                  "--tls-auth-clients", requireClientCertificate ? "yes" : "optional"]
                          + (password.map { ["--requirepass", $0] } ?? []),
                      portArgument: "--tls-port",
                      cliOptions: ["--tls", "--cacert", certificates.caFile, "--cert", certificates.clientCertFile,
                                   "--key", certificates.clientKeyFile] + (password.map { ["-a", $0] } ?? []))
        }
    }

    deinit { stop() }

    public func stop() {
        node.stop()
        try? FileManager.default.removeItem(atPath: certificates.directory)
    }

    /// `redis-cli --tls` PING checking the server against `caFile`, with or without the client certificate.
    public func ping(caFile: String, clientCertificate: Bool = true, serverName: String? = nil) throws -> Command.Result {
        var options = ["--tls", "--cacert", caFile, "-h", "127.0.0.1", "-p", String(port), "--no-auth-warning"]
        if clientCertificate { options += ["--cert", certificates.clientCertFile, "--key", certificates.clientKeyFile] }
        if let serverName { options += ["--sni", serverName] }
        if let password { options += ["-a", password] }
        return try Command.run("redis-cli", options + ["PING"], timeout: 10)
    }
}
