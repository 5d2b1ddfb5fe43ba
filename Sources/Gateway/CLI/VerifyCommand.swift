import AssertionCheck
import Foundation

/// `gateway verify attestation|assertion …`: offline verification for debugging a device.
/// Prints one JSON object; exit 0 valid, 1 invalid, 2 usage error.
public enum VerifyCommand {
    public static let usage = """
    usage: gateway verify attestation --attestation-b64 B64 --key-id B64 (--challenge-b64 B64 | --client-data-hash-b64 B64)
                                      --app TEAMID.bundle.id [--app …] --environment production|development|any
                                      [--trust-anchor PEM] [--at RFC3339] [--explain]
           gateway verify assertion --assertion-b64 B64 --client-data-b64 B64
                                    [--public-key-b64 B64 | --key-id B64 | --config FILE]
                                    --app TEAMID.bundle.id --previous-counter N [--explain]
    Without --public-key-b64 the key is recovered from the signature (the candidates are printed); --key-id picks
    one of them, --config the one registered in that gateway's Redis.
    """

    public static func run(_ arguments: [String]) -> Int32 {
        CommandRunner.run("verify", usage: usage) {
            guard let kind = arguments.first else { throw UsageError("verify what: attestation or assertion?") }
            var options = try Arguments(Array(arguments.dropFirst()), flagNames: ["explain"])
            switch kind {
            case "attestation": return try attestation(&options)
            case "assertion": return try assertion(&options)
            default: throw UsageError("unknown verify kind \"\(kind)\"")
            }
        }
    }

    private static func attestation(_ options: inout Arguments) throws(UsageError) -> Int32 {
        let attestation = try decoded(&options, "attestation-b64")
        let keyId = try decoded(&options, "key-id")
        let clientData: AttestationClientData
        switch (try options.optional("challenge-b64"), try options.optional("client-data-hash-b64")) {
        case (let challenge?, nil): clientData = .challenge(try base64(challenge, "challenge-b64"))
        case (nil, let hash?): clientData = .clientDataHash(try base64(hash, "client-data-hash-b64"))
        default: throw UsageError("give exactly one of --challenge-b64 and --client-data-hash-b64")
        }
        let apps = try appIDs(&options)
        let environments = try environmentSet(try options.required("environment"))
        let anchor: TrustAnchor
        if let path = try options.optional("trust-anchor") {
            do { anchor = try TrustAnchor(pemFile: path) } catch { throw UsageError("--trust-anchor: \(error.message)") }
        } else {
            anchor = .apple
        }
        let time = try instant(try options.optional("at"))
        let explain = options.flag("explain")
        try options.rejectUnknown()

        var checks = [String]()
        do {
            let key = try AttestationVerifier.verify(attestation: attestation, keyId: keyId, clientData: clientData,
                                                     policy: AttestationPolicy(apps: apps, environments: environments, trustAnchor: anchor),
                                                     at: time, trace: explain ? { checks.append($0) } : nil)
            var result: [String: Any] = [
                "valid": true, "key_id": Base64.encode(key.keyId), "environment": key.environment.rawValue,
                "app_id": key.appID.description, "public_key": Base64.encode(key.publicKey.spki),
                "receipt_bytes": key.receipt.count, "counter": 0,
            ]
            addExtensions(key.extensions, to: &result)
            return emit(result, checks: explain ? checks : nil, exitCode: 0)
        } catch {
            return emit(["valid": false, "reason": error.reasonCode, "message": error.message], checks: explain ? checks : nil, exitCode: 1)
        }
    }

    private static func assertion(_ options: inout Arguments) throws -> Int32 {
        let assertion = try decoded(&options, "assertion-b64")
        let clientData = try decoded(&options, "client-data-b64")
        let publicKeyBytes = try options.optional("public-key-b64").map { (text) throws(UsageError) in try base64(text, "public-key-b64") }
        let namedKeyId = try options.optional("key-id").map { (text) throws(UsageError) in try base64(text, "key-id") }
        let configPath = try options.optional("config")
        guard [publicKeyBytes != nil, namedKeyId != nil, configPath != nil].filter({ $0 }).count <= 1 else {
            throw UsageError("give at most one of --public-key-b64, --key-id and --config")
        }
        let apps = try appIDs(&options)
        guard apps.count == 1 else { throw UsageError("an assertion is checked against the one App ID its key was registered for") }
        let previousText = try options.required("previous-counter")
        guard let previous = UInt32(previousText) else { throw UsageError("--previous-counter must be 0...4294967295") }
        let explain = options.flag("explain")
        try options.rejectUnknown()

        var checks = [String]()
        var result: [String: Any] = [:]
        do {
            let key: P256PublicKey
            if let publicKeyBytes {
                key = try P256PublicKey(bytes: publicKeyBytes)
            } else {
                let candidates = try AssertionVerifier.candidateKeys(assertion: assertion, clientData: clientData)
                result["key_id_candidates"] = candidates.map { Base64.encode($0.keyId) }
                checks.append("no public key given: \(candidates.count) candidate keys recovered from the signature")
                let chosen = try namedKeyId.map { id in candidates.first { $0.keyId == id } }
                    ?? configPath.map { try registered(candidates, configPath: $0) } ?? candidates.first
                guard let chosen else {
                    throw VerificationError(namedKeyId == nil ? .signatureInvalid : .keyIdMismatch,
                                            namedKeyId == nil ? "no public key can have made this signature" : "the key id did not make this signature")
                }
                if namedKeyId != nil || configPath != nil { result["key_id_source"] = "recovered" }
                key = try P256PublicKey(point: chosen.point)
            }
            let verified = try AssertionVerifier.verify(assertion: assertion, clientData: clientData, publicKey: key, appID: apps[0],
                                                        previousCounter: previous, trace: explain ? { checks.append($0) } : nil)
            result["valid"] = true
            result["counter"] = verified.counter
            // Without a way to tell the candidates apart, every one of them verifies: name none.
            if publicKeyBytes != nil || result["key_id_source"] != nil || (result["key_id_candidates"] as? [String])?.count == 1 {
                result["key_id"] = Base64.encode(SHA256.hash(key.point))
            }
            addExtensions(verified.extensions, to: &result)
            return emit(result, checks: explain ? checks : nil, exitCode: 0)
        } catch let error as VerificationError {
            return emit(["valid": false, "reason": error.reasonCode, "message": error.message], checks: explain ? checks : nil, exitCode: 1)
        }
    }

    /// The candidate registered in the gateway's Redis (as the gateway itself picks it), or nil.
    private static func registered(_ candidates: [RecoveredKey], configPath: String) throws -> RecoveredKey? {
        let config: GatewayConfig
        do { config = try GatewayConfig.load(path: configPath) } catch { throw UsageError("\(configPath): \(error)") }
        let store = try GatewayRuntime.makeStore(config.redis)
        for candidate in candidates where try store.loadPublicKey(keyId: candidate.keyId) != nil { return candidate }
        throw VerificationError(.keyIdMismatch, "none of the keys that can have made this signature is registered")
    }

    private static func emit(_ object: [String: Any], checks: [String]?, exitCode: Int32) -> Int32 {
        var object = object
        if let checks { object["checks"] = checks }
        print(JSONOutput.line(object))
        return exitCode
    }

    private static func addExtensions(_ extensions: AuthenticatorExtensions?, to result: inout [String: Any]) {
        guard let extensions else { return }
        if let version = extensions.bundleVersion { result["bundle_version"] = version }
        if let category = extensions.validationCategory { result["validation_category"] = Bytes.hex(category) }
    }

    private static func decoded(_ options: inout Arguments, _ name: String) throws(UsageError) -> [UInt8] {
        try base64(try options.required(name), name)
    }

    private static func base64(_ text: String, _ name: String) throws(UsageError) -> [UInt8] {
        guard let bytes = Base64.decode(text) else { throw UsageError("--\(name) is not base64 (standard or URL-safe)") }
        return bytes
    }

    private static func appIDs(_ options: inout Arguments) throws(UsageError) -> [AppID] {
        let texts = options.all("app")
        guard !texts.isEmpty else { throw UsageError("--app TEAMID.bundle.id is required") }
        return try texts.map { (text) throws(UsageError) in
            guard let app = AppID(text) else { throw UsageError("--app \"\(text)\" is not TEAMID.bundle.id") }
            return app
        }
    }

    private static func environmentSet(_ text: String) throws(UsageError) -> Set<AppAttestEnvironment> {
        if text == "any" { return Set(AppAttestEnvironment.allCases) }
        guard let environment = AppAttestEnvironment(rawValue: text) else {
            throw UsageError("--environment must be production, development or any")
        }
        return [environment]
    }

    private static func instant(_ text: String?) throws(UsageError) -> Date {
        guard let text else { return Date() }
        let formatter = ISO8601DateFormatter()
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard let date = formatter.date(from: text) else { throw UsageError("--at must be RFC 3339, e.g. 2024-01-31T12:00:00Z") }
        return date
    }
}
