import AppAttestClient
import DeviceSimulator
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Gateway
import SimulatedAppAttest

/// One run of the story; each step says whether the gateway answered as expected.
struct Story {
    let gateway: URL
    let attest: AttestClient
    let session = URLSession(configuration: .ephemeral)
    let path: String
    let logPath: String
    /// The once-per-device steps run when the config talks to Apple (or `make run`'s stand-in).
    let showsDeviceCheck: Bool
    let body = Data(#"{"prompt":"Write a haiku about attestation"}"#.utf8)
    /// The Android steps run when the config has `play_integrity:` with the Console keys (`make run`'s test keys).
    let android: AndroidStory?

    init(_ options: Options) throws {
        let config = try GatewayConfig.load(path: options.configPath)
        guard let app = config.appAttest.apps.first, let url = URL(string: options.gateway) else {
            throw Options.UsageError(message: "\(options.configPath) lists no app, or \(options.gateway) is not a URL")
        }
        gateway = url
        let service = SimulatedAppAttestService(ca: try TestCA(directory: options.caDirectory), appID: app,
                                                environment: config.appAttest.environments.first ?? .production)
        // The demo Apple stand-in keeps bits per device: a token's bytes up to ":".
        let device = "demo-iphone-\(UUID().uuidString.prefix(8))"
        attest = AttestClient(gateway: url, prefix: config.prefix, service: service, deviceCheck: DemoDeviceTokens(device: device),
                              session: session)
        path = options.path
        logPath = options.logPath
        android = try AndroidStory(config: config, keyDirectory: options.playKeyDirectory)
        showsDeviceCheck = config.apple != nil
            && config.routes.contains { $0.match == .prefix("/promo/claim") && $0.deviceCheck.oncePerDevice != nil }
    }

    func play() async throws -> Bool {
        print("A simulated iPhone runs the app's code: AppAttestClient's AttestClient, with a simulator in place of the Secure Enclave.\n")
        var passed = true
        print("1. attest.register(): generate a key, attest it over a gateway challenge, register it")
        let keyId = try await attest.register()
        print("   ← registered key \(keyId.prefix(12))…\n")

        passed = try await step("2. attest.data(for:) a protected call → signed, forwarded to the upstream",
                                request("POST", path), expect: 200) && passed
        let signed = try await attest.sign(request("POST", path))
        passed = try await send("3. The app sends a request it signed (attest.sign) …", signed, expect: 200) && passed
        passed = try await send("   … and an attacker who captured it replays it → rejected", signed, expect: 409) && passed
        var tampered = try await attest.sign(request("POST", path))
        tampered.httpBody = Data(#"{"prompt":"Write a novel","max_tokens":100000}"#.utf8)
        passed = try await send("4. Same signature, tampered body → rejected", tampered, expect: 401) && passed
        passed = try await send("5. No assertion at all (plain URLSession) → rejected", request("POST", path), expect: 401) && passed
        if showsDeviceCheck {
            passed = try await step("6. Claim the once-per-device promo (assertion + DeviceCheck token) → forwarded, bit0 set",
                                    request("POST", "/promo/claim"), deviceToken: true, expect: 200) && passed
            passed = try await step("7. Claim it again from the same device → rejected (AttestClientError.alreadyClaimed)",
                                    request("POST", "/promo/claim"), deviceToken: true, expect: 409) && passed
        }
        if let android { passed = try await android.play(self) && passed }
        print(passed ? "Every step answered as expected." : "Some steps did NOT answer as expected (see above).")
        return passed
    }

    func request(_ method: String, _ path: String) -> URLRequest {
        var request = URLRequest(url: gateway.appendingPathComponent(String(path.dropFirst())))
        request.httpMethod = method
        request.httpBody = body
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        return request
    }

    /// Through `attest.data(for:)`, as the app does: a refusal arrives as an `AttestClientError`.
    private func step(_ title: String, _ request: URLRequest, deviceToken: Bool = false, expect status: Int) async throws -> Bool {
        print(title)
        print("   → \(request.httpMethod ?? "GET") \(request.url?.path ?? "")")
        do {
            let (data, response) = try await attest.data(for: request, deviceToken: deviceToken)
            let http = response as? HTTPURLResponse
            return report(http?.statusCode ?? 0, String(decoding: data, as: UTF8.self),
                          requestId: http?.value(forHTTPHeaderField: "X-Request-Id"), expect: status)
        } catch let error as AttestClientError {
            guard let rejection = error.rejection else { throw error }
            return report(rejection.status, "\(error)", requestId: rejection.requestId, expect: status)
        }
    }

    /// Sent as is, the way an attacker replays or edits a captured request.
    func send(_ title: String, _ request: URLRequest, expect status: Int) async throws -> Bool {
        print(title)
        print("   → \(request.httpMethod ?? "GET") \(request.url?.path ?? "")")
        let (data, response) = try await session.data(for: request)
        let http = response as? HTTPURLResponse
        return report(http?.statusCode ?? 0, String(decoding: data, as: UTF8.self), requestId: http?.value(forHTTPHeaderField: "X-Request-Id"),
                      expect: status)
    }

    private func report(_ status: Int, _ text: String, requestId: String?, expect: Int) -> Bool {
        let shown = String(text.prefix(300)).replacingOccurrences(of: "\n", with: " ")
        print("   ← \(status) \(shown)\(status == expect ? "" : "   ✗ expected \(expect)")")
        if let requestId { printLogLine(requestId: requestId) }
        print("")
        return status == expect
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

/// DCDevice played for the demo's Apple stand-in: tokens of one device, a new one per call.
struct DemoDeviceTokens: DeviceCheckTokenProvider {
    let device: String
    var isSupported: Bool { true }

    func generateToken() async throws -> Data { Data("\(device):\(UUID().uuidString)".utf8) }
}
