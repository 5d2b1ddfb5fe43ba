import AssertionCheck

/// What an iOS app sends the gateway, byte for byte as docs/client.md describes it — one encoding shared
/// by the tests' app client, the demo and the benchmark's request preparation.
extension SimulatedDevice {
    /// The JSON body of `POST /attest/verify` for `challenge` (the body of `GET /attest/challenge`), with
    /// `attestKey(keyId, SHA256(challenge))` made now.
    public func registrationBody(challenge: [UInt8], faults: Set<AttestationFault> = []) throws(SimulatorError) -> [UInt8] {
        let attestation = try attest(challenge: challenge, faults: faults)
        return SimulatedDevice.registrationBody(keyId: keyIdBase64, attestation: attestation, challenge: challenge)
    }

    public static func registrationBody(keyId: String, attestation: [UInt8], challenge: [UInt8]) -> [UInt8] {
        Array(JSONText.object([("key_id", keyId), ("attestation", Base64.encode(attestation)),
                               ("challenge", Base64.encode(challenge))]).utf8)
    }

    /// The query string of `GET /assert/challenge` for this device's key.
    public var assertChallengeQuery: String {
        "key_id=" + keyIdBase64.utf8.map { byte in
            let char = Character(Unicode.Scalar(byte))
            return char.isLetter || char.isNumber ? String(char) : "%" + String(byte, radix: 16, uppercase: true)
        }.joined()
    }

    /// The three headers of a signed request whose client data is `clientData` (a new counter unless one is given).
    public func assertionHeaders(clientData: [UInt8], counter: UInt32? = nil) throws(SimulatorError) -> [(name: String, value: String)] {
        let assertion: [UInt8]
        if let counter {
            assertion = try assert(clientData: clientData, counter: counter)
        } else {
            assertion = try assert(clientData: clientData)
        }
        return [("X-App-Attest-Key-Id", keyIdBase64), ("X-App-Attest-Assertion", Base64.encode(assertion)),
                ("X-App-Attest-Client-Data", Base64.encode(clientData))]
    }
}
