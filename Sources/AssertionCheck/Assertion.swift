/// An assertion that verified: the counter it carries (to be stored) and Apple's extensions, if any.
public struct VerifiedAssertion: Sendable {
    public let counter: UInt32
    public let flags: UInt8
    public let extensions: AuthenticatorExtensions?
}

/// Apple's assertion validation, every numbered step. Pure: the caller supplies the stored key and counter.
public enum AssertionVerifier {
    /// Real assertions are ~110 bytes (~200 with iOS 27 extensions).
    public static let maxAssertionBytes = 4096

    /// - Parameters:
    ///   - clientData: the exact bytes the app hashed, as received (never re-encoded).
    ///   - appID: the App ID the key was registered for.
    ///   - previousCounter: the stored counter; nil when the caller enforces the counter itself
    ///     atomically (the gateway does, in Redis).
    public static func verify(assertion: [UInt8], clientData: [UInt8], publicKey: P256PublicKey, appID: AppID,
                              previousCounter: UInt32?, trace: ((String) -> Void)? = nil) throws(VerificationError) -> VerifiedAssertion {
        // The trace's lines are only built when someone reads them (about 20,000 instructions a request).
        func note(_ line: @autoclosure () -> String) { trace?(line()) }
        let (signature, authDataBytes) = try decode(assertion)
        let authData = try AuthenticatorData.parseAssertion(authDataBytes)
        note("assertion is a CBOR map with a \(signature.count)-byte signature and \(authDataBytes.count)-byte authenticatorData (flags 0x\(Bytes.hex([authData.flags])), counter \(authData.counter))")

        // 1. clientDataHash = SHA256(clientData). 2. nonce = SHA256(authenticatorData || clientDataHash).
        let nonce = SHA256.digest(authDataBytes, SHA256.digest(clientData[...]))
        note("steps 1-2: nonce = SHA256(authenticatorData || SHA256(clientData of \(clientData.count) bytes))")

        // 4 (checked first: it is cheap). rpIdHash is SHA256 of the App ID the key belongs to.
        guard Bytes.constantTimeEqual(authData.rpIdHash, appID.rpIdHash[...]) else {
            throw VerificationError(.appIdMismatch, "authenticatorData rpIdHash is not SHA256(\"\(appID)\")")
        }
        note("step 4: rpIdHash is SHA256(\"\(appID)\")")

        // 3. The signature is ECDSA P-256/SHA-256 over the nonce, by the attested key.
        guard publicKey.isValidSignature(signature, for: nonce) else {
            throw VerificationError(.signatureInvalid, "signature does not verify with the stored public key")
        }
        note("step 3: ECDSA P-256 signature over the nonce verifies with the stored public key")

        // 5. The counter is strictly greater than the stored one.
        if let previousCounter {
            guard authData.counter > previousCounter else {
                throw VerificationError(.counterNotIncreasing, "counter \(authData.counter) is not greater than the stored \(previousCounter)")
            }
            note("step 5: counter \(authData.counter) > stored \(previousCounter)")
        }
        if let extensions = authData.extensions {
            note("authenticator extensions: bundle version \(extensions.bundleVersion ?? "-"), validation category \(extensions.validationCategory.map(Bytes.hex) ?? "-")")
        }
        return VerifiedAssertion(counter: authData.counter, flags: authData.flags, extensions: authData.extensions)
    }

    /// {signature: bytes, authenticatorData: bytes}
    /// Slices of `assertion` in its usual layout (no copies).
    static func decode(_ assertion: [UInt8]) throws(VerificationError) -> (signature: ArraySlice<UInt8>, authData: ArraySlice<UInt8>) {
        guard !assertion.isEmpty, assertion.count <= maxAssertionBytes else {
            throw VerificationError(.badAssertion, "assertion is \(assertion.count) bytes, expected 1...\(maxAssertionBytes)")
        }
        if let (signature, authData) = CBORDecoder.twoByteStrings(assertion, keys: "signature", "authenticatorData"), !signature.isEmpty {
            return (signature, authData)
        }
        let value: CBORValue
        do {
            value = try CBORDecoder.decode(assertion, maxDepth: 4)
        } catch {
            throw VerificationError(.badAssertion, "assertion is not CBOR: \(error.message)")
        }
        guard let signature = value["signature"]?.bytes, !signature.isEmpty,
              let authData = value["authenticatorData"]?.bytes else {
            throw VerificationError(.badAssertion, "assertion must be a CBOR map with byte strings signature and authenticatorData")
        }
        return (signature[...], authData[...])
    }
}
