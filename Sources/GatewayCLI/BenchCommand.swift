import EventLoop
import Gateway
import HTTPServer
import Upstream
import AssertionCheck
import DeviceSimulator
import Foundation

/// `gateway bench verify|ca|prepare …`: the building blocks of `make bench` (bench/run.sh).
///
/// `verify` is the per-request pure work of an assert route on one thread — base64 of the three headers,
/// client-data parse and binding, CBOR, SHA-256, ECDSA — over assertions a simulated device made (the
/// public key parsed once, as the proxy caches it). It also times the bare ECDSA verify of the same
/// signatures so the overhead is visible as a ratio in one run, and the same work for a request without
/// `X-App-Attest-Key-Id` (the key recovered from the signature, then looked up in a cache, then verified). `ca` saves the test CA a bench gateway
/// trusts; `prepare` (BenchPrepare.swift) registers simulated devices and pre-signs requests for wrk.
enum BenchCommand {
    static let usage = """
    usage: gateway bench verify [--seconds N]
           gateway bench ca --out DIR
           gateway bench prepare --gateway URL --ca DIR --out FILE [--devices K] [--requests-per-device M]
                                 [--route /assert/] [--client-data json|body] [--threads N]
                                 [--app TEAMID.bundle.id] [--register attest|store --redis URL [--key-prefix aag]]
                                 [--max-requests N]
    """

    static func run(_ arguments: [String]) -> Int32 {
        do {
            var options = try Arguments(Array(arguments.dropFirst()))
            switch arguments.first {
            case "verify":
                let seconds = try options.integer("seconds", default: 5)
                guard (1...600).contains(seconds) else { throw UsageError("--seconds must be 1...600") }
                try options.rejectUnknown()
                try benchVerify(seconds: Double(seconds))
            case "ca":
                let directory = try options.required("out")
                try options.rejectUnknown()
                try saveCA(to: directory)
            case "prepare":
                let plan = try BenchPrepare.Plan(&options)
                try options.rejectUnknown()
                try BenchPrepare(plan).run()
            default:
                throw UsageError("bench what? verify, ca or prepare")
            }
            return 0
        } catch let error as UsageError {
            FileHandle.standardError.write(Data("gateway bench: \(error)\n\(usage)\n".utf8))
            return 2
        } catch {
            FileHandle.standardError.write(Data("gateway bench: \(error)\n".utf8))
            return 1
        }
    }

    /// Keeps a CA already saved there, so devices registered earlier stay valid.
    private static func saveCA(to directory: String) throws {
        let root = (directory as NSString).appendingPathComponent("root.pem")
        if FileManager.default.fileExists(atPath: root) {
            _ = try TestCA(directory: directory)
            print("kept the test CA in \(directory)")
            return
        }
        try TestCA().save(to: directory)
        print("saved a new test CA in \(directory)")
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
        let signatures = try requests.map { request -> (signature: [UInt8], nonce: [UInt8]) in
            let assertion = try CBORDecoder.decode(Base64.decode(request.assertionHeader)!)
            let clientData = Base64.decode(request.clientDataHeader)!
            return (assertion["signature"]!.bytes!, SHA256.hash(assertion["authenticatorData"]!.bytes!, SHA256.hash(clientData)))
        }
        // The two loops take turns in short slices, so machine noise hits both alike.
        let cache = [device.keyId: publicKey]
        var full = Throughput(), cryptoOnly = Throughput(), recovered = Throughput()
        let slices = max(2, Int(seconds / 0.25))
        for _ in 0..<(slices / 2) {
            try full.run(seconds: seconds / Double(slices), count: requests.count) { index in
                try verifyLikeTheProxy(requests[index], publicKey: publicKey, app: app)
            }
            try cryptoOnly.run(seconds: seconds / Double(slices), count: signatures.count) { index in
                guard publicKey.isValidSignature(signatures[index].signature, for: signatures[index].nonce) else {
                    throw VerificationError(.signatureInvalid, "bench signature did not verify")
                }
            }
            try recovered.run(seconds: seconds / Double(slices), count: requests.count) { index in
                try verifyLikeTheProxy(requests[index], keys: cache, app: app)
            }
        }
        let (fullRate, cryptoRate) = (full.perSecond, cryptoOnly.perSecond)
        print("ecdsa_verify_per_second=\(Int(cryptoRate))")
        print("recovery_assertions_per_second=\(Int(recovered.perSecond))")
        print(String(format: "ratio_recovery_to_plain=%.3f", recovered.perSecond / fullRate))
        print(String(format: "ratio_to_bare_ecdsa=%.3f", fullRate / cryptoRate))
        print("assertions_per_second=\(Int(fullRate))")
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

    /// The same without the key id header: recover the candidates, take the cached one, verify with it.
    private static func verifyLikeTheProxy(_ request: SignedRequest, keys: [[UInt8]: P256PublicKey], app: AppID) throws {
        guard let assertion = Base64.decode(request.assertionHeader), let clientDataBytes = Base64.decode(request.clientDataHeader) else {
            throw VerificationError(.badBase64, "bench header is not base64")
        }
        let clientData = try ClientData.parse(clientDataBytes)
        try RequestBinding.check(clientData, against: BoundRequest(method: "POST", path: "/v1/ai/generate", query: nil, body: request.body))
        let candidates = try AssertionVerifier.candidateKeys(assertion: assertion, clientData: clientDataBytes)
        guard let publicKey = candidates.lazy.compactMap({ keys[$0.keyId] }).first else {
            throw VerificationError(.signatureInvalid, "bench key was not recovered")
        }
        _ = try AssertionVerifier.verify(assertion: assertion, clientData: clientDataBytes, publicKey: publicKey, appID: app,
                                         previousCounter: nil)
    }

    /// Operations and elapsed time accumulated over several slices.
    struct Throughput {
        var operations = 0
        var nanoseconds: UInt64 = 0
        var perSecond: Double { Double(operations) / (Double(nanoseconds) / 1e9) }

        /// Runs `body` for about `seconds` (the clock is read every 32 operations).
        mutating func run(seconds: Double, count: Int, _ body: (Int) throws -> Void) throws {
            let start = DispatchTime.now().uptimeNanoseconds
            let deadline = start + UInt64(seconds * 1e9)
            var now = start
            while now < deadline {
                for _ in 0..<32 {
                    try body(operations % count)
                    operations += 1
                }
                now = DispatchTime.now().uptimeNanoseconds
            }
            nanoseconds += now - start
        }
    }
}
