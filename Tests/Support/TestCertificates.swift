import Foundation

/// A throwaway CA, a server certificate for `localhost` / 127.0.0.1 and a client certificate it signed, plus a
/// second CA that signed nothing here (the "wrong CA"), made with the openssl command line. EC P-256: fast.
public struct TestCertificates: Sendable {
    public let directory: String
    public var caFile: String { directory + "/ca.crt" }
    public var serverCertFile: String { directory + "/server.crt" }
    public var serverKeyFile: String { directory + "/server.key" }
    public var clientCertFile: String { directory + "/client.crt" }
    public var clientKeyFile: String { directory + "/client.key" }
    public var wrongCAFile: String { directory + "/wrong-ca.crt" }

    public init(directory: String = TestPaths.temporaryDirectory("certs")) throws {
        self.directory = directory
        try makeCA("ca", name: "Gateway Test Redis CA")
        try makeCA("wrong-ca", name: "Some Other CA")
        try issue("server", name: "localhost", extensions: "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth")
        try issue("client", name: "gateway", extensions: "extendedKeyUsage=clientAuth")
    }

    /// Another server certificate from the same CA, for `dnsNames` (the first is the subject's CN): the listener's
    /// SNI certificates and swaps. Returns its certificate and key files.
    @discardableResult
    public func issueServerCertificate(_ file: String, dnsNames: [String]) throws -> (cert: String, key: String) {
        try issue(file, name: dnsNames[0], extensions: "subjectAltName=" + dnsNames.map { "DNS:" + $0 }.joined(separator: ",")
            + "\nextendedKeyUsage=serverAuth")
        return ("\(directory)/\(file).crt", "\(directory)/\(file).key")
    }

    /// A DER OCSP response from the CA saying `certFile` (issued here) is good: the listener's `ocsp_staple_file`.
    public func ocspResponse(for certFile: String, subject: String) throws -> String {
        let serial = try Command.run("openssl", ["x509", "-in", certFile, "-noout", "-serial"]).output
            .trimmingCharacters(in: .whitespacesAndNewlines).replacing("serial=", with: "")
        let base = certFile + ".ocsp"
        try "V\t301231235959Z\t\t\(serial)\tunknown\t/CN=\(subject)\n".write(toFile: base + ".index", atomically: true, encoding: .utf8)
        try Self.openssl(["ocsp", "-issuer", caFile, "-cert", certFile, "-no_nonce", "-reqout", base + ".req"])
        try Self.openssl(["ocsp", "-index", base + ".index", "-CA", caFile, "-rsigner", caFile, "-rkey", directory + "/ca.key",
                          "-reqin", base + ".req", "-respout", base + ".der", "-ndays", "1"])
        return base + ".der"
    }

    private func makeCA(_ file: String, name: String) throws {
        try Self.openssl(["req", "-x509", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                          "-keyout", "\(directory)/\(file).key", "-out", "\(directory)/\(file).crt", "-days", "2", "-subj", "/CN=\(name)"])
    }

    private func issue(_ file: String, name: String, extensions: String) throws {
        let base = "\(directory)/\(file)"
        try extensions.write(toFile: base + ".ext", atomically: true, encoding: .utf8)
        try Self.openssl(["req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                          "-keyout", base + ".key", "-out", base + ".csr", "-subj", "/CN=\(name)"])
        try Self.openssl(["x509", "-req", "-in", base + ".csr", "-CA", caFile, "-CAkey", directory + "/ca.key", "-CAcreateserial",
                          "-out", base + ".crt", "-days", "2", "-extfile", base + ".ext"])
    }

    private static func openssl(_ arguments: [String]) throws {
        let result = try Command.run("openssl", arguments, timeout: 30)
        guard result.status == 0 else { throw TestSupportError("openssl \(arguments.first ?? "") failed: \(result.output)") }
    }
}

/// How the test setups' redis-server processes and redis-cli use these certificates.
extension TestCertificates {
    /// TLS for clients, replication and (sentinels) the links to the watched servers. Those links connect as
    /// clients: with the client certificate (the server's is serverAuth only).
    public func redisServerArguments(requireClientCertificate: Bool) -> [String] {
        ["--tls-replication", "yes", "--tls-cert-file", serverCertFile, "--tls-key-file", serverKeyFile,
         "--tls-client-cert-file", clientCertFile, "--tls-client-key-file", clientKeyFile,
         "--tls-ca-cert-file", caFile, "--tls-auth-clients", requireClientCertificate ? "yes" : "optional"]
    }

    /// redis-cli over TLS, checking the server against the test CA and showing the client certificate.
    public var redisCLIOptions: [String] { ["--tls", "--cacert", caFile, "--cert", clientCertFile, "--key", clientKeyFile] }
}

/// A short command run to completion with its output (stdout and stderr together) and a timeout.
public enum Command {
    public struct Result: Sendable {
        public let status: Int32
        public let output: String
    }

    public static func run(_ program: String, _ arguments: [String], timeout: TimeInterval = 30) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [program] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Read while it runs: a full pipe would block the child.
        let reader = DispatchQueue(label: "command-output")
        nonisolated(unsafe) var data = Data()
        let done = DispatchSemaphore(value: 0)
        reader.async {
            data = pipe.fileHandleForReading.readDataToEndOfFile()
            done.signal()
        }
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning, Date() < deadline { usleep(5_000) }
        if process.isRunning {
            process.terminate()
            usleep(100_000)
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        process.waitUntilExit()
        _ = done.wait(timeout: .now() + 5)
        return Result(status: process.isRunning ? -1 : process.terminationStatus, output: String(decoding: data, as: UTF8.self))
    }
}
