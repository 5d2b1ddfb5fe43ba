/// The WebAuthn-style authenticator data App Attest signs:
/// rpIdHash(32) flags(1) counter(4, big-endian) [aaguid(16) credIdLen(2) credId COSE_Key] [extensions map].
public struct AuthenticatorData: Sendable {
    public static let fixedLength = 37
    /// AT: what real devices set in attestations and (without credential data) in assertions.
    public static let flagAttestedCredentialData: UInt8 = 0x40

    /// A slice of the authenticator data it was read from.
    public let rpIdHash: ArraySlice<UInt8>
    public let flags: UInt8
    public let counter: UInt32
    public let attestedCredential: AttestedCredentialData?
    public let extensions: AuthenticatorExtensions?

    /// Attestation authData: attested credential data must be present, whatever the flags say.
    /// Apple's 2026 sample appends an extension map without setting ED, so trailing bytes are read as
    /// one CBOR map whenever they are there.
    static func parseAttestation(_ bytes: [UInt8]) throws(VerificationError) -> AuthenticatorData {
        guard bytes.count >= fixedLength + 18 else {
            throw VerificationError(.badFormat, "authData is \(bytes.count) bytes, too short for attested credential data")
        }
        let credentialLength = Int(bytes[53]) << 8 | Int(bytes[54])
        let credentialEnd = 55 + credentialLength
        guard credentialEnd < bytes.count else {
            throw VerificationError(.badFormat, "authData credentialId length \(credentialLength) exceeds the data")
        }
        let (coseKey, keyLength): (CBORValue, Int)
        do {
            (coseKey, keyLength) = try CBORDecoder.decodePrefix(bytes[credentialEnd...], maxDepth: 4)
        } catch {
            throw VerificationError(.badFormat, "authData credential public key is not CBOR: \(error.message)")
        }
        let credential = AttestedCredentialData(aaguid: Array(bytes[37..<53]),
                                                credentialId: Array(bytes[55..<credentialEnd]), coseKey: coseKey)
        let extensions = try AuthenticatorExtensions.parseTrailing(bytes[(credentialEnd + keyLength)...], reason: .badFormat)
        return AuthenticatorData(bytes[...], attestedCredential: credential, extensions: extensions)
    }

    /// Assertion authenticatorData: 37 fixed bytes, optionally followed by one CBOR extension map.
    /// Real assertions set AT (0x40) without any credential data (an Apple quirk since iOS 14), and
    /// iOS 27 appends an extension map with or without ED; so neither flag decides the parse.
    static func parseAssertion(_ bytes: ArraySlice<UInt8>) throws(VerificationError) -> AuthenticatorData {
        guard bytes.count >= fixedLength else {
            throw VerificationError(.badAssertion, "authenticatorData is \(bytes.count) bytes, expected at least 37")
        }
        let extensions = try AuthenticatorExtensions.parseTrailing(bytes.dropFirst(fixedLength), reason: .badAssertion)
        return AuthenticatorData(bytes, attestedCredential: nil, extensions: extensions)
    }

    /// `bytes` need not start at index 0 (an assertion's slice).
    private init(_ bytes: ArraySlice<UInt8>, attestedCredential: AttestedCredentialData?, extensions: AuthenticatorExtensions?) {
        let start = bytes.startIndex
        rpIdHash = bytes[start..<start + 32]
        flags = bytes[start + 32]
        counter = Bytes.bigEndianUInt32(bytes[(start + 33)..<(start + 37)])
        self.attestedCredential = attestedCredential
        self.extensions = extensions
    }
}

public struct AttestedCredentialData: Sendable {
    public let aaguid: [UInt8]
    public let credentialId: [UInt8]
    /// COSE_Key map (kty 2 = EC2, alg -7 = ES256, crv 1 = P-256, x, y).
    public let coseKey: CBORValue

    /// The COSE key as an uncompressed point, if it is an EC2 P-256 key.
    var uncompressedPoint: [UInt8]? {
        guard coseKey[intKey: 1] == .unsigned(2), coseKey[intKey: -1] == .unsigned(1),
              let x = coseKey[intKey: -2]?.bytes, let y = coseKey[intKey: -3]?.bytes,
              x.count == 32, y.count == 32 else { return nil }
        return [0x04] + x + y
    }
}

/// Apple's authenticator extensions (iOS 27+): a CBOR map after the fixed fields. Unknown keys are kept.
public struct AuthenticatorExtensions: Sendable, Equatable {
    public let entries: [CBORPair]

    /// `apple_bundle_version_01`: the app's bundle version (CFBundleVersion), as text.
    public var bundleVersion: String? { CBORValue.map(entries)["apple_bundle_version_01"]?.text }
    /// `apple_validation_category_01`: the launch validation category, 4 bytes as Apple sends them.
    public var validationCategory: [UInt8]? { CBORValue.map(entries)["apple_validation_category_01"]?.bytes }

    /// Trailing bytes must be exactly one CBOR map; anything else is a malformed object.
    static func parseTrailing(_ bytes: ArraySlice<UInt8>, reason: VerificationError.Reason) throws(VerificationError) -> AuthenticatorExtensions? {
        guard !bytes.isEmpty else { return nil }
        let value: CBORValue
        do {
            value = try CBORDecoder.decode(Array(bytes), maxDepth: 4)
        } catch {
            throw VerificationError(reason, "bytes after the authenticator data are not one CBOR extension map: \(error.message)")
        }
        guard case .map(let pairs) = value else {
            throw VerificationError(reason, "bytes after the authenticator data are not a CBOR map")
        }
        return AuthenticatorExtensions(entries: pairs)
    }
}
