import AssertionCheck
import DeviceSimulator
import Foundation
import Upstream

/// `gateway demo`: the whole story against a running gateway, played by a simulated iPhone.
/// `gateway demo ca DIR` makes the demo CA whose root `make run` passes to `serve --trust-anchor`.
enum DemoCommand {
    static let usage = """
    usage: gateway demo [--gateway URL] [--ca DIR] [--config gateway.yaml] [--log FILE] [--path /v1/ai/generate]
           gateway demo ca DIR
           gateway demo apple --key AuthKey.p8 [--listen 127.0.0.1:9100]
    """

    static func run(_ arguments: [String]) -> Int32 {
        CommandRunner.run("demo", usage: usage, hint: "(is the gateway running? start it with `make run`)") {
            var options = try Arguments(arguments)
            if options.positionals.first == "apple" {
                return try DemoAppleCommand.run(&options)
            }
            if options.positionals.first == "ca" {
                guard options.positionals.count == 2 else { throw UsageError("gateway demo ca DIR") }
                try options.rejectUnknown()
                try TestCA().save(to: options.positionals[1])
                print("demo CA written to \(options.positionals[1]) (trust it only in demos: serve --trust-anchor \(options.positionals[1])/root.pem)")
                return 0
            }
            let demo = try Demo(gateway: try options.optional("gateway") ?? "http://127.0.0.1:8080",
                                caDirectory: try options.optional("ca") ?? "run/demo-ca",
                                configPath: try options.optional("config") ?? "gateway.yaml",
                                logPath: try options.optional("log") ?? "run/gateway.log",
                                path: try options.optional("path") ?? "/v1/ai/generate")
            try options.rejectUnknown()
            return try demo.play() ? 0 : 1
        }
    }
}

/// One run of the story; each step checks what the gateway answered and says whether it was expected.
struct Demo {
    let http: UpstreamClient
    let device: SimulatedDevice
    let prefix: String
    /// The once-per-device story runs when the config talks to Apple (or `make run`'s stand-in).
    let showsDeviceCheck: Bool
    let logPath: String
    let path: String
    let body = Array(#"{"prompt":"Write a haiku about attestation"}"#.utf8)

    init(gateway: String, caDirectory: String, configPath: String, logPath: String, path: String) throws {
        let config = try GatewayConfig.load(path: configPath)
        guard let app = config.appAttest.apps.first else { throw UsageError("\(configPath) lists no app") }
        http = UpstreamClient(target: try UpstreamTarget(baseURL: gateway, connectTimeoutMs: 2000, timeoutMs: 10000))
        device = try SimulatedDevice(ca: try TestCA(directory: caDirectory), appID: app,
                                     environment: config.appAttest.environments.first ?? .production)
        prefix = config.prefix
        showsDeviceCheck = config.apple != nil && config.routes.contains { $0.match == .prefix("/promo/claim") && $0.deviceCheck.oncePerDevice != nil }
        self.logPath = logPath
        self.path = path
    }

    func play() throws -> Bool {
        print("A simulated iPhone (key id \(device.keyIdBase64.prefix(12))…) talks to the gateway.\n")
        var passed = true
        let challenge = try send("1. Fetch a one-time attestation challenge", GET: prefix + "/attest/challenge", expect: 200)
        passed = passed && challenge.ok
        let registration = try device.registrationBody(challenge: challenge.body)
        passed = try send("2. Attest the key (Apple-format object from the simulator) and register it",
                          request("POST", prefix + "/attest/verify", body: registration, contentType: "application/json"), expect: 200).ok && passed
        let signed = try signedRequest()
        passed = try send("3. Call the protected route with a valid assertion → forwarded to the upstream", signed, expect: 200).ok && passed
        passed = try send("4. Replay the very same request → rejected", signed, expect: 409).ok && passed
        var tampered = try signedRequest()
        tampered.body = Array(#"{"prompt":"Write a novel","max_tokens":100000}"#.utf8)
        passed = try send("5. Same signature, tampered body → rejected", tampered, expect: 401).ok && passed
        passed = try send("6. No assertion at all → rejected", request("POST", path, body: body, contentType: "application/json"), expect: 401).ok && passed
        if showsDeviceCheck {
            let device = "demo-iphone-\(device.keyIdBase64.prefix(8))"
            passed = try send("7. Claim the once-per-device promo (assertion + DeviceCheck token) → forwarded, bit0 set",
                              promoClaim(device: device), expect: 200).ok && passed
            passed = try send("8. Claim it again from the same device (a new token) → rejected", promoClaim(device: device), expect: 409).ok && passed
        }
        print(passed ? "Every step answered as expected." : "Some steps did NOT answer as expected (see above).")
        return passed
    }

    /// A signed POST /promo/claim carrying a fresh DeviceCheck token of `device` (the stand-in keeps bits per device).
    private func promoClaim(device: String) throws -> UpstreamRequest {
        var request = try signedRequest(path: "/promo/claim")
        request.headers.append(HTTPField("X-Apple-Device-Token", Base64.encode(Array("\(device):\(UUID().uuidString)".utf8))))
        return request
    }

    private func signedRequest() throws -> UpstreamRequest {
        try signedRequest(path: path)
    }

    private func signedRequest(path: String) throws -> UpstreamRequest {
        let challenge = try http.send(request("GET", prefix + "/assert/challenge?" + device.assertChallengeQuery))
        let text = String(decoding: try challenge.readAll(limit: 4096), as: UTF8.self)
        challenge.finish()
        let clientData = SimulatedDevice.requestClientData(challenge: text, method: "POST", path: path, query: nil, body: body)
        var signed = request("POST", path, body: body, contentType: "application/json")
        signed.headers += try device.assertionHeaders(clientData: clientData).map { HTTPField($0.name, $0.value) }
        return signed
    }

    private func request(_ method: String, _ path: String, body: [UInt8] = [], contentType: String? = nil) -> UpstreamRequest {
        UpstreamRequest(method: method, pathAndQuery: path,
                        headers: [HTTPField("Host", "demo")] + (contentType.map { [HTTPField("Content-Type", $0)] } ?? []), body: body)
    }

    private func send(_ title: String, GET path: String, expect status: Int) throws -> (ok: Bool, body: [UInt8]) {
        try send(title, request("GET", path), expect: status)
    }

    @discardableResult
    private func send(_ title: String, _ request: UpstreamRequest, expect status: Int) throws -> (ok: Bool, body: [UInt8]) {
        print(title)
        print("   → \(request.method) \(request.pathAndQuery)")
        let response = try http.send(request)
        let body = try response.readAll(limit: 1 << 20)
        response.finish()
        let ok = response.status == status
        let shown = String(decoding: body.prefix(300), as: UTF8.self).replacingOccurrences(of: "\n", with: " ")
        print("   ← \(response.status) \(shown)\(ok ? "" : "   ✗ expected \(status)")")
        if let id = response.headers.values(named: "X-Request-Id").first { printLogLine(requestId: id) }
        print("")
        return (ok, body)
    }

    /// The gateway's own JSON log line for this request, when `make run` keeps the log in a file.
    private func printLogLine(requestId: String) {
        guard FileManager.default.fileExists(atPath: logPath) else { return }
        for _ in 0..<20 {
            if let text = try? String(contentsOfFile: logPath, encoding: .utf8),
               let line = text.split(separator: "\n").last(where: { $0.contains("\"request_id\":\"\(requestId)\"") }) {
                print("   log: \(line)")
                return
            }
            usleep(50_000)
        }
    }
}
