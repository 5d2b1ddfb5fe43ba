import AssertionCheck
import DeviceSimulator
import Foundation

/// `gateway bench verify [--seconds N]`: the per-request pure work of an assert route on one thread —
/// base64 of the three headers, client-data parse and binding, CBOR, SHA-256, ECDSA — over assertions a
/// simulated device made (the public key parsed once, as the proxy caches it). Also times the bare
/// ECDSA verify of the same signatures so the overhead is visible as a ratio in one run.
enum BenchCommand {
    static let usage = "usage: gateway bench verify [--seconds N]"

    static func run(_ arguments: [String]) -> Int32 {
        do {
            guard arguments.first == "verify" else { throw UsageError("bench what? only `verify` exists") }
            var options = try Arguments(Array(arguments.dropFirst()))
            let seconds = try options.integer("seconds", default: 5)
            guard (1...600).contains(seconds) else { throw UsageError("--seconds must be 1...600") }
            try options.rejectUnknown()
            try benchVerify(seconds: Double(seconds))
            return 0
        } catch let error as UsageError {
            FileHandle.standardError.write(Data("gateway bench: \(error)\n\(usage)\n".utf8))
            return 2
        } catch {
            FileHandle.standardError.write(Data("gateway bench: \(error)\n".utf8))
            return 1
        }
    }

    struct SignedRequest {
        let keyIdHeader: String
        let assertionHeader: String
        let clientDataHeader: String
        let body: [UInt8]
    }

    private static func benchVerify(seconds: Double) throws {
        let app = AppID(teamID: "BENCH12345", bundleID: "com.example.bench")
        let device = try SimulatedDevice(ca: try TestCA(), appID: app)
        let body = Array(#"{"prompt":"a haiku about attestation"}"#.utf8)
        let requests = try (0..<512).map { index in
            let clientData = SimulatedDevice.requestClientData(challenge: "challenge-\(index)", method: "POST",
                                                               path: "/v1/ai/generate", query: nil, body: body)
            return SignedRequest(keyIdHeader: device.keyIdBase64, assertionHeader: Base64.encode(try device.assert(clientData: clientData)),
                                 clientDataHeader: Base64.encode(clientData), body: body)
        }
        let publicKey = try P256PublicKey(bytes: device.publicKeySPKI)
        let full = try measure(seconds: seconds / 2, count: requests.count) { index in
            try verifyLikeTheProxy(requests[index], publicKey: publicKey, app: app)
        }
        let signatures = try requests.map { request -> (signature: [UInt8], nonce: [UInt8]) in
            let assertion = try CBORDecoder.decode(Base64.decode(request.assertionHeader)!)
            let clientData = Base64.decode(request.clientDataHeader)!
            return (assertion["signature"]!.bytes!, SHA256.hash(assertion["authenticatorData"]!.bytes!, SHA256.hash(clientData)))
        }
        let cryptoOnly = try measure(seconds: seconds / 2, count: signatures.count) { index in
            guard publicKey.isValidSignature(signatures[index].signature, for: signatures[index].nonce) else {
                throw VerificationError(.signatureInvalid, "bench signature did not verify")
            }
        }
        print("ecdsa_verify_per_second=\(Int(cryptoOnly))")
        print(String(format: "overhead_ratio=%.3f", full / cryptoOnly))
        print("assertions_per_second=\(Int(full))")
    }

    private static func verifyLikeTheProxy(_ request: SignedRequest, publicKey: P256PublicKey, app: AppID) throws {
        guard let keyId = Base64.decode(request.keyIdHeader), keyId.count == 32,
              let assertion = Base64.decode(request.assertionHeader),
              let clientDataBytes = Base64.decode(request.clientDataHeader) else {
            throw VerificationError(.badBase64, "bench header is not base64")
        }
        let clientData = try ClientData.parse(clientDataBytes)
        try RequestBinding.check(clientData, against: BoundRequest(method: "POST", path: "/v1/ai/generate", query: nil, body: request.body))
        _ = try AssertionVerifier.verify(assertion: assertion, clientData: clientDataBytes, publicKey: publicKey, appID: app,
                                         previousCounter: nil)
    }

    /// Operations per second of `body` over `seconds` (clock read every 64 operations).
    private static func measure(seconds: Double, count: Int, _ body: (Int) throws -> Void) throws -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        let deadline = start + UInt64(seconds * 1e9)
        var operations = 0
        var now = start
        while now < deadline {
            for _ in 0..<64 {
                try body(operations % count)
                operations += 1
            }
            now = DispatchTime.now().uptimeNanoseconds
        }
        return Double(operations) / (Double(now - start) / 1e9)
    }
}
