import DeviceSimulator
import Foundation
import TestSupport
import Upstream
import XCTest

/// `server.tls` over the real binary, with clients that are not ours (openssl s_client, curl, Python's ssl): TLS 1.2
/// and 1.3, TLS 1.1 refused, SNI, a SIGHUP certificate swap under an open keep-alive connection, the handshake
/// timeout and the connection limits, and routes over TLS with what the upstream is told.
final class ListenerTLSTests: XCTestCase {
    private var certificates: TestCertificates!
    private var environment: GatewayEnvironment!

    override func tearDown() {
        environment?.stop()
        super.tearDown()
    }

    /// A gateway on TLS with the test CA's `localhost` certificate by default; `extraTLS` and `extraServer` are
    /// flow-mapping entries added to `server.tls` and `server`.
    @discardableResult
    private func start(extraTLS: String = "", extraServer: String = "") throws -> GatewayEnvironment {
        certificates = try TestCertificates()
        environment = try GatewayEnvironment.overTLS(certificates, extraTLS: extraTLS, extraServer: extraServer)
        return environment
    }

    private func curl(serverName: String = "localhost") -> TLSCurl {
        TLSCurl(port: environment.gateway.port, caFile: certificates.caFile, serverName: serverName, directory: environment.directory)
    }

    /// `openssl s_client -brief` against the gateway: its summary lines (protocol, peer certificate) or its error.
    /// `serverName` nil: no SNI at all. `brief` false: the whole report (OCSP, session), not the summary.
    private func sClient(_ options: [String], serverName: String? = "localhost", brief: Bool = true) throws -> String {
        let sni = serverName.map { ["-servername", $0] } ?? ["-noservername"]
        return try Command.run("openssl", ["s_client", "-connect", "127.0.0.1:\(environment.gateway.port)", "-CAfile", certificates.caFile,
                                           "-verify_return_error"] + (brief ? ["-brief"] : []) + sni + options, timeout: 15).output
    }

    private func handshakeFailures(_ reason: String, atLeast count: Double) throws -> Double? {
        let series = "gateway_tls_handshake_failures_total{reason=\"\(reason)\"}"
        let text = try environment.metrics { (MetricsText.sample(series, in: $0) ?? 0) >= count }
        return MetricsText.sample(series, in: text)
    }

    func testTLS12And13HandshakeAndOlderVersionsAndPlainHTTPAreRefusedAndCounted() throws {
        try start()
        for (option, version) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
            let output = try sClient([option])
            XCTAssertTrue(output.contains("Protocol version: \(version)"), output)
            XCTAssertTrue(output.contains("Peer certificate: CN = localhost"), output)
            XCTAssertFalse(output.contains("Verification error"), output)
        }
        XCTAssertEqual(try handshakeFailures("protocol_version", atLeast: 0), 0, "zero series from start")
        // The client is allowed to offer TLS 1.1 (OpenSSL's client refuses it itself at the default security level).
        let old = try sClient(["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"])
        XCTAssertFalse(old.contains("CONNECTION ESTABLISHED"), old)
        XCTAssertEqual(try handshakeFailures("protocol_version", atLeast: 1), 1, "the gateway refused it")
        // Plain HTTP on the TLS port: no answer in clear, the connection closed, counted.
        let plain = try? Reply(UpstreamClient(target: UpstreamTarget(baseURL: environment.gateway.baseURL, connectTimeoutMs: 1000, timeoutMs: 3000))
            .send(UpstreamRequest(method: "GET", pathAndQuery: "/anything", headers: [HTTPField("Host", "x")])))
        XCTAssertNil(plain, "a plaintext request gets no plaintext response")
        XCTAssertEqual(try handshakeFailures("not_tls", atLeast: 1), 1)
        XCTAssertFalse(environment.gateway.process.lines.contains { $0.contains("not_tls") }, "handshake failures are counted, not logged per line")
    }

    func testSNIPicksTheCertificateForTheNameAndTheDefaultOtherwiseWithItsOwnOCSPStaple() throws {
        certificates = try TestCertificates()
        let api = try certificates.issueServerCertificate("api", dnsNames: ["api.example.test"])
        let staple = try certificates.ocspResponse(for: api.cert, subject: "api.example.test")
        let wildcard = try certificates.issueServerCertificate("wild", dnsNames: ["*.apps.example.test"])
        let tls = "{ cert_file: \"\(certificates.serverCertFile)\", key_file: \"\(certificates.serverKeyFile)\", certificates: ["
            + "{ server_names: [api.example.test], cert_file: \"\(api.cert)\", key_file: \"\(api.key)\", ocsp_staple_file: \"\(staple)\" }, "
            + "{ server_names: [\"*.apps.example.test\"], cert_file: \"\(wildcard.cert)\", key_file: \"\(wildcard.key)\" }] }"
        environment = try GatewayEnvironment(extra: "server: { tls: \(tls) }")
        XCTAssertTrue(try sClient([], serverName: "api.example.test").contains("Peer certificate: CN = api.example.test"))
        XCTAssertTrue(try sClient([], serverName: "one.apps.example.test").contains("Peer certificate: CN = *.apps.example.test"))
        let other = try sClient([], serverName: nil)
        XCTAssertTrue(other.contains("Peer certificate: CN = localhost"), other)
        let unknown = try sClient([], serverName: "unknown.example.test")
        XCTAssertTrue(unknown.contains("Peer certificate: CN = localhost"), "an unknown name gets the default certificate: \(unknown)")
        // The staple of the certificate SNI chose, when the client asks; the default certificate has none.
        let stapled = try sClient(["-status"], serverName: "api.example.test", brief: false)
        XCTAssertTrue(stapled.contains("OCSP Response Status: successful"), stapled)
        XCTAssertTrue(stapled.contains("Cert Status: good"), stapled)
        XCTAssertTrue(try sClient(["-status"], brief: false).contains("OCSP response: no response sent"))
        // A request over the SNI certificate goes through like any other.
        XCTAssertEqual(try curl(serverName: "api.example.test").send(UpstreamRequest(method: "GET", pathAndQuery: "/hello", headers: [])).status, 200)
    }

    func testRoutesOverTLSTellTheUpstreamHTTPSAndLogTheTLSVersion() throws {
        try start()
        let client = curl()
        let app = AppClient(device: try SimulatedDevice(ca: environment.ca, appID: GatewayEnvironment.app, environment: .development),
                            transport: client.send)
        XCTAssertEqual(try app.register().status, 200)
        let signed = try app.send(app.signed("GET", "/secure/feed", extraHeaders: [HTTPField("X-Forwarded-Proto", "http"),
                                                                                    HTTPField("Forwarded", "proto=http")]))
        XCTAssertEqual(signed.status, 200, signed.text)
        XCTAssertEqual(signed.forwarded("x-attest-status"), ["verified"])
        XCTAssertEqual(signed.forwarded("x-forwarded-proto"), ["https"], "the gateway's word only: the client's copy is dropped")
        XCTAssertEqual(signed.forwarded("forwarded"), ["for=127.0.0.1;proto=https"])
        let unsigned = try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/secure/feed", headers: []))
        XCTAssertEqual(unsigned.status, 401, unsigned.text)
        XCTAssertEqual(try client.send(UpstreamRequest(method: "GET", pathAndQuery: "/closed/x", headers: [])).status, 403)
        let pass = try client.send(UpstreamRequest(method: "POST", pathAndQuery: "/hello", headers: [HTTPField("Content-Type", "text/plain")],
                                                   body: Array("over tls".utf8)))
        XCTAssertEqual(pass.status, 200)
        XCTAssertEqual(pass.json["body_base64"] as? String, Data("over tls".utf8).base64EncodedString())
        XCTAssertEqual(pass.forwarded("x-forwarded-proto"), ["https"])
        // Bulk both ways through the TLS layer: 900 kB up to the echo upstream, its JSON (the body in base64) back.
        let big = (0..<900_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let bulk = try client.send(UpstreamRequest(method: "POST", pathAndQuery: "/v1/public/big", headers: [], body: big))
        XCTAssertEqual(bulk.status, 200)
        XCTAssertEqual(bulk.json["body_base64"] as? String, Data(big).base64EncodedString(), "the body arrived intact")
        let line = environment.gateway.waitForEvent { $0["path"] as? String == "/hello" && $0["status"] as? Int == 200 }
        XCTAssertEqual(line?["protocol"] as? String, "HTTP/1.1")
        XCTAssertEqual(line?["tls_version"] as? String, "TLSv1.3")
        XCTAssertEqual(line?["alpn"] as? String, "http/1.1")
    }

    func testAClientsForwardedProtoReachesTheUpstreamOnlyFromATrustedProxy() throws {
        environment = try GatewayEnvironment(extra: "server: { trusted_proxies: [\"127.0.0.2\"] }")
        let claims = [HTTPField("X-Forwarded-Proto", "https"), HTTPField("Forwarded", "for=192.0.2.1;proto=https")]
        let plain = try environment.request("GET", "/echo/p", headers: claims)
        XCTAssertEqual(plain.forwarded("x-forwarded-proto"), ["http"], "a client over plain HTTP cannot claim https")
        XCTAssertEqual(plain.forwarded("forwarded"), ["for=127.0.0.1;proto=http"])
        let config = try String(contentsOfFile: environment.gateway.configPath, encoding: .utf8)
        try environment.gateway.reload(config.replacing("127.0.0.2", with: "127.0.0.1"))
        XCTAssertNotNil(environment.gateway.waitForEvent { $0["event"] as? String == "config_reloaded" })
        let proxied = try environment.request("GET", "/echo/p", headers: claims)
        XCTAssertEqual(proxied.forwarded("x-forwarded-proto"), ["https, http"], "a trusted proxy's word is kept, the gateway's appended")
        XCTAssertEqual(proxied.forwarded("forwarded"), ["for=192.0.2.1;proto=https, for=127.0.0.1;proto=http"])
    }

    func testSIGHUPSwapsTheCertificateForNewConnectionsWhileAnOpenOneKeepsWorking() throws {
        try start()
        let config = try String(contentsOfFile: environment.gateway.configPath, encoding: .utf8)
        let renewed = try certificates.issueServerCertificate("renewed", dnsNames: ["localhost", "renewed.example.test"])
        let go = environment.directory + "/go"
        // One keep-alive connection before the swap, asked again after it; then a new connection.
        let script = """
        import http.client, os, ssl, sys, time
        context = ssl.create_default_context(cafile=sys.argv[2])
        def common_name(connection):
            return ",".join(value for kind, value in connection.sock.getpeercert()["subjectAltName"] if kind == "DNS")
        def ask(connection):
            connection.request("GET", "/hello")
            response = connection.getresponse()
            response.read()
            return response.status
        old = http.client.HTTPSConnection("localhost", int(sys.argv[1]), context=context, timeout=10)
        print("old", ask(old), common_name(old), flush=True)
        deadline = time.time() + 20
        while not os.path.exists(sys.argv[3]) and time.time() < deadline:
            time.sleep(0.05)
        print("old-again", ask(old), common_name(old), flush=True)
        new = http.client.HTTPSConnection("localhost", int(sys.argv[1]), context=context, timeout=10)
        print("new", ask(new), common_name(new), flush=True)
        """
        let client = try ChildProcess(executable: "/usr/bin/python3",
                                      arguments: ["-c", script, String(environment.gateway.port), certificates.caFile, go])
        defer { client.stop() }
        XCTAssertNotNil(client.waitForLine(timeout: 15) { $0 == "old 200 localhost" }, client.lines.joined(separator: "\n"))

        // A broken key first: the reload is refused, says why, and the running certificate stays.
        try "not a key".write(toFile: environment.directory + "/broken.key", atomically: true, encoding: .utf8)
        try environment.gateway.reload(config.replacing(certificates.serverKeyFile, with: environment.directory + "/broken.key"))
        let refused = environment.gateway.waitForEvent { $0["event"] as? String == "config_reload_failed" }
        XCTAssertTrue("\(refused ?? [:])".contains("broken.key"), "\(refused ?? [:])")

        try environment.gateway.reload(config.replacing(certificates.serverCertFile, with: renewed.cert)
            .replacing(certificates.serverKeyFile, with: renewed.key))
        XCTAssertNotNil(environment.gateway.waitForEvent { $0["event"] as? String == "config_reloaded" })
        XCTAssertTrue(FileManager.default.createFile(atPath: go, contents: Data()))
        XCTAssertNotNil(client.waitForLine(timeout: 15) { $0.hasPrefix("new ") }, client.lines.joined(separator: "\n"))
        // The certificates' DNS names tell them apart: the renewed one has a second name.
        XCTAssertTrue(client.lines.contains("old-again 200 localhost"), "the open connection keeps working, on its certificate: \(client.lines)")
        XCTAssertTrue(client.lines.contains("new 200 localhost,renewed.example.test"), "a new connection gets the renewed one: \(client.lines)")
    }

    func testAStalledHandshakeIsClosedAtTheTimeoutAndHandshakesCountAgainstTheConnectionLimits() throws {
        try start(extraTLS: ", handshake_timeout_ms: 1500", extraServer: ", per_ip_connection_limit: 2")
        let script = """
        import socket, sys, time
        port = int(sys.argv[1])
        stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        time.sleep(0.3)
        third = socket.create_connection(("127.0.0.1", port))
        third.settimeout(10)
        start = time.time()
        print("third", len(third.recv(1)), round(time.time() - start, 2), flush=True)
        for s in stalled:
            s.settimeout(10)
            print("stalled", len(s.recv(1)), round(time.time() - start, 2), flush=True)
        """
        let result = try Command.run("python3", ["-c", script, String(environment.gateway.port)], timeout: 30)
        let lines = result.output.split(separator: "\n").map { $0.split(separator: " ") }
        XCTAssertEqual(lines.count, 3, result.output)
        guard lines.count == 3 else { return }
        XCTAssertEqual(lines[0][1], "0", "the third connection is closed without a handshake")
        XCTAssertLessThan(Double(lines[0][2]) ?? 99, 1.0, "closed at once, not at the handshake timeout: \(result.output)")
        for line in lines[1...] {
            XCTAssertEqual(line[1], "0", result.output)
            XCTAssertGreaterThan(Double(line[2]) ?? 0, 0.8, "closed by the 1500 ms timeout (started 0.3 s before): \(result.output)")
        }
        XCTAssertEqual(try handshakeFailures("timeout", atLeast: 2), 2)
        XCTAssertNotNil(environment.gateway.waitForEvent { $0["reason"] as? String == "per_ip_connection_limit" })
        // Session resumption: a second connection resumes the first one's session.
        let session = environment.directory + "/session.pem"
        _ = try sClient(["-tls1_2", "-sess_out", session])
        let resumed = try sClient(["-tls1_2", "-sess_in", session], brief: false)
        XCTAssertTrue(resumed.contains("Reused, TLSv1.2"), resumed)
    }
}

extension GatewayEnvironment {
    /// A gateway on TLS with the test CA's `localhost` certificate by default; `extraTLS` and `extraServer` are
    /// flow-mapping entries added to `server.tls` and `server`.
    static func overTLS(_ certificates: TestCertificates, extraTLS: String = "", extraServer: String = "",
                        routes: String = GatewayEnvironment.defaultRoutes) throws -> GatewayEnvironment {
        let tls = "{ cert_file: \"\(certificates.serverCertFile)\", key_file: \"\(certificates.serverKeyFile)\"\(extraTLS) }"
        return try GatewayEnvironment(routes: routes, extra: "server: { tls: \(tls)\(extraServer) }")
    }
}

/// curl over TLS to the gateway, checking its certificate against the test CA: one handshake per request, HTTP/1.1
/// unless `http2`.
struct TLSCurl {
    let port: Int
    let caFile: String
    let serverName: String
    let directory: String
    var http2 = false

    func send(_ request: UpstreamRequest) throws -> Reply {
        let id = UUID().uuidString
        let (bodyFile, headFile, outFile) = ("\(directory)/req-\(id)", "\(directory)/head-\(id)", "\(directory)/out-\(id)")
        var arguments = ["-sS", http2 ? "--http2" : "--http1.1", "--max-time", "10", "--cacert", caFile, "--resolve", "\(serverName):\(port):127.0.0.1",
                         "-X", request.method, "-D", headFile, "-o", outFile]
        for header in request.headers { arguments += ["-H", header.value.isEmpty ? "\(header.name);" : "\(header.name): \(header.value)"] }
        if !request.body.isEmpty {
            try Data(request.body).write(to: URL(fileURLWithPath: bodyFile))
            arguments += ["--data-binary", "@" + bodyFile]
        }
        arguments.append("https://\(serverName):\(port)\(request.pathAndQuery)")
        let result = try Command.run("curl", arguments, timeout: 15)
        guard result.status == 0 else { throw TestSupportError("curl failed: \(result.output)") }
        let head = try String(contentsOfFile: headFile, encoding: .utf8)
        // The last response head (after any 100 Continue).
        let block = head.components(separatedBy: "\r\n\r\n").last { $0.hasPrefix("HTTP/") } ?? ""
        let lines = block.components(separatedBy: "\r\n")
        let status = Int(lines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
        let headers = lines.dropFirst().compactMap { line -> HTTPField? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return HTTPField(String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        let body = (try? Data(contentsOf: URL(fileURLWithPath: outFile))).map { [UInt8]($0) } ?? []
        return Reply(status: status, headers: headers, body: body)
    }
}
