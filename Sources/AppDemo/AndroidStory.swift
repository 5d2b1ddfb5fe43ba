import DeviceSimulator
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Gateway

/// The Android app's side: a Play Integrity verdict exchanged for a gateway token. Google is played by the
/// token maker with `make run`'s test keys (the app's Kotlin calls are in docs/client.md).
struct AndroidStory {
    let maker: PlayIntegrityTokenMaker
    let package: String
    let certificates: [String]
    /// `prefix` in front of the built-in endpoints.
    let prefix: String

    /// nil when the config has no `play_integrity:` section with the two key files.
    init?(config: GatewayConfig, keyDirectory: String) throws {
        guard let play = config.playIntegrity, play.localKeys != nil, let package = play.packageNames.first else { return nil }
        maker = try PlayIntegrityTokenMaker(directory: keyDirectory)
        self.package = package
        // base64url, as Play writes certificateSha256Digest.
        certificates = play.certificateDigests.map {
            Data($0).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        prefix = config.prefix
    }

    func play(_ story: Story) async throws -> Bool {
        print("An Android phone: Play Integrity, with test keys standing in for Google's.\n")
        var passed = true
        let challenge = try await self.challenge(story)
        let genuine = PlayIntegrityVerdict(packageName: package, nonce: challenge, certificateDigests: certificates)
        let exchange = try exchangeRequest(story, token: maker.classicToken(genuine), challenge: challenge)
        print("8. GET /play-integrity/challenge, a classic integrity token with it as nonce, POST /play-integrity/token")
        let (data, response) = try await story.session.data(for: exchange)
        let token = ((try? JSONSerialization.jsonObject(with: data)) as? [String: Any])?["token"] as? String
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        print("   ← \(status) \(token.map { "gateway token \($0.prefix(24))…" } ?? String(decoding: data, as: UTF8.self))\(status == 200 ? "" : "   ✗ expected 200")\n")
        passed = status == 200 && passed
        var call = story.request("POST", story.path)
        call.setValue(token ?? "", forHTTPHeaderField: "X-App-Attest-Token")
        passed = try await story.send("9. The paid call with the gateway token → forwarded (X-Attest-Method: play_integrity)", call, expect: 200) && passed
        passed = try await story.send("10. The same integrity token exchanged again → rejected (the challenge is spent)", exchange, expect: 401) && passed
        var rooted = genuine
        rooted.nonce = try await self.challenge(story)
        rooted.deviceRecognitionVerdict = ["MEETS_BASIC_INTEGRITY"]
        passed = try await story.send("11. A rooted phone's verdict (MEETS_BASIC_INTEGRITY only) → rejected",
                                      exchangeRequest(story, token: maker.classicToken(rooted), challenge: rooted.nonce ?? ""), expect: 403) && passed
        return passed
    }

    private func challenge(_ story: Story) async throws -> String {
        let (data, _) = try await story.session.data(from: story.gateway.appendingPathComponent(String((prefix + "/play-integrity/challenge").dropFirst())))
        return String(decoding: data, as: UTF8.self)
    }

    private func exchangeRequest(_ story: Story, token: String, challenge: String) throws -> URLRequest {
        var request = URLRequest(url: story.gateway.appendingPathComponent(String((prefix + "/play-integrity/token").dropFirst())))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONSerialization.data(withJSONObject: ["integrity_token": token, "challenge": challenge])
        return request
    }
}
