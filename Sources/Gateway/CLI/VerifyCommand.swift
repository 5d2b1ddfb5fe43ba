import AssertionCheck
import Foundation

/// `gateway verify attestation|assertion …`: offline verification for debugging a device.
/// Prints one JSON object; exit 0 valid, 1 invalid, 2 usage error.
enum VerifyCommand {
    static let usage = """
    usage: gateway verify attestation --attestation-b64 B64 --key-id B64 (--challenge-b64 B64 | --client-data-hash-b64 B64)
                                      --app TEAMID.bundle.id [--app …] --environment production|development|any
                                      [--trust-anchor PEM] [--at RFC3339] [--explain]
           gateway verify assertion --assertion-b64 B64 --client-data-b64 B64 --public-key-b64 B64
                                    --app TEAMID.bundle.id --previous-counter N [--explain]
    """

    static func run(_ arguments: [String]) -> Int32 {
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

    private static func assertion(_ options: inout Arguments) throws(UsageError) -> Int32 {
        let assertion = try decoded(&options, "assertion-b64")
        let clientData = try decoded(&options, "client-data-b64")
        let publicKeyBytes = try decoded(&options, "public-key-b64")
        let apps = try appIDs(&options)
        guard apps.count == 1 else { throw UsageError("an assertion is checked against the one App ID its key was registered for") }
        let previousText = try options.required("previous-counter")
        guard let previous = UInt32(previousText) else { throw UsageError("--previous-counter must be 0...4294967295") }
        let explain = options.flag("explain")
        try options.rejectUnknown()

        var checks = [String]()
        do {
            let key = try P256PublicKey(bytes: publicKeyBytes)
            let verified = try AssertionVerifier.verify(assertion: assertion, clientData: clientData, publicKey: key, appID: apps[0],
                                                        previousCounter: previous, trace: explain ? { checks.append($0) } : nil)
            var result: [String: Any] = ["valid": true, "counter": verified.counter, "key_id": Base64.encode(SHA256.hash(key.point))]
            addExtensions(verified.extensions, to: &result)
            return emit(result, checks: explain ? checks : nil, exitCode: 0)
        } catch {
            return emit(["valid": false, "reason": error.reasonCode, "message": error.message], checks: explain ? checks : nil, exitCode: 1)
        }
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
