import AssertionCheck
import Foundation

/// A stand-in for Apple's App Attestation CA: a self-signed root and one intermediate, both P-384 like
/// Apple's, that issue credential certificates for simulated devices. Its root is a `TrustAnchor` for
/// tests and the demo; production verification never trusts it.
public final class TestCA: @unchecked Sendable {
    static let rootSubject = [(attribute: "CN", value: "Simulated App Attestation Root CA"),
                              (attribute: "O", value: "AppAttestGateway DeviceSimulator"),
                              (attribute: "ST", value: "California")]
    static let intermediateSubject = [(attribute: "CN", value: "Simulated App Attestation CA 1"),
                                      (attribute: "O", value: "AppAttestGateway DeviceSimulator"),
                                      (attribute: "ST", value: "California")]
    static let files = (root: "root.pem", rootKey: "root-key.pem",
                        intermediate: "intermediate.pem", intermediateKey: "intermediate-key.pem")

    // Immutable after init; OpenSSL reads certificates and signs with keys safely from many threads.
    private let root: SimCertificate
    private let rootKey: SimKey
    private let intermediate: SimCertificate
    private let intermediateKey: SimKey
    public let rootPEM: String
    /// The root as AssertionCheck's trust anchor (`isApple` is false).
    public let trustAnchor: TrustAnchor

    /// A fresh root and intermediate, both valid from `validFrom` for `validFor` seconds.
    public convenience init(validFrom: Date = Date().addingTimeInterval(-86400),
                            validFor: TimeInterval = 365 * 86400) throws(SimulatorError) {
        let validUntil = validFrom.addingTimeInterval(validFor)
        let rootKey = try SimKey(curve: .p384)
        let root = try SimCertificate.issue(
            TestCA.authorityRequest(subject: TestCA.rootSubject, key: rootKey, from: validFrom, until: validUntil),
            issuer: nil, signingKey: rootKey)
        let intermediateKey = try SimKey(curve: .p384)
        let intermediate = try SimCertificate.issue(
            TestCA.authorityRequest(subject: TestCA.intermediateSubject, key: intermediateKey, from: validFrom, until: validUntil),
            issuer: root, signingKey: rootKey)
        try self.init(root: root, rootKey: rootKey, intermediate: intermediate, intermediateKey: intermediateKey)
    }

    /// Loads a CA written by `save(to:)`.
    public convenience init(directory: String) throws(SimulatorError) {
        let files = TestCA.files
        let root = try SimCertificate(pem: TestCA.read(directory, files.root))
        let rootKey = try SimKey(pem: TestCA.read(directory, files.rootKey))
        let intermediate = try SimCertificate(pem: TestCA.read(directory, files.intermediate))
        let intermediateKey = try SimKey(pem: TestCA.read(directory, files.intermediateKey))
        guard root.isCertified(rootKey), intermediate.isCertified(intermediateKey) else {
            throw .caInvalid("a key in \(directory) does not belong to its certificate")
        }
        guard intermediate.isSigned(by: root) else {
            throw .caInvalid("the intermediate in \(directory) is not signed by its root")
        }
        try self.init(root: root, rootKey: rootKey, intermediate: intermediate, intermediateKey: intermediateKey)
    }

    private init(root: SimCertificate, rootKey: SimKey, intermediate: SimCertificate, intermediateKey: SimKey) throws(SimulatorError) {
        self.root = root
        self.rootKey = rootKey
        self.intermediate = intermediate
        self.intermediateKey = intermediateKey
        rootPEM = try root.pem()
        do {
            trustAnchor = try TrustAnchor(pem: rootPEM)
        } catch {
            throw .caInvalid("root certificate is not a usable trust anchor: \(error)")
        }
    }

    /// Writes root.pem, root-key.pem, intermediate.pem and intermediate-key.pem (keys mode 0600),
    /// creating the directory if needed.
    public func save(to directory: String) throws(SimulatorError) {
        let files = TestCA.files
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw .caUnwritable(path: directory)
        }
        try TestCA.write(rootPEM, to: directory, files.root, secret: false)
        try TestCA.write(rootKey.pem(), to: directory, files.rootKey, secret: true)
        try TestCA.write(intermediate.pem(), to: directory, files.intermediate, secret: false)
        try TestCA.write(intermediateKey.pem(), to: directory, files.intermediateKey, secret: true)
    }

    /// The intermediate certificate, DER (the second x5c entry).
    var intermediateDER: [UInt8] { intermediate.der }

    /// A credential certificate (credCert) for a device key, signed ECDSA-SHA256 by the intermediate
    /// like Apple's. The subject mirrors Apple's: CN is the hex key id.
    func issueCredentialCertificate(for key: SimKey, keyId: [UInt8], from notBefore: Date, until notAfter: Date,
                                    extensions: [CertificateExtension]) throws(SimulatorError) -> SimCertificate {
        let subject = [(attribute: "CN", value: Bytes.hex(keyId)), (attribute: "OU", value: "AAA Certification"),
                       (attribute: "O", value: "AppAttestGateway DeviceSimulator"), (attribute: "ST", value: "California")]
        let request = CertificateRequest(
            subject: subject, subjectKey: key, notBefore: notBefore, notAfter: notAfter,
            extensions: [CertificateExtension(oid: "2.5.29.19", critical: true, value: DER.basicConstraints(isCA: false)),
                         CertificateExtension(oid: "2.5.29.15", critical: true, value: DER.keyUsage(isCA: false))] + extensions,
            digest: .sha256)
        return try SimCertificate.issue(request, issuer: intermediate, signingKey: intermediateKey)
    }

    private static func authorityRequest(subject: [(attribute: String, value: String)], key: SimKey,
                                         from notBefore: Date, until notAfter: Date) -> CertificateRequest {
        CertificateRequest(
            subject: subject, subjectKey: key, notBefore: notBefore, notAfter: notAfter,
            extensions: [CertificateExtension(oid: "2.5.29.19", critical: true, value: DER.basicConstraints(isCA: true)),
                         CertificateExtension(oid: "2.5.29.15", critical: true, value: DER.keyUsage(isCA: true))],
            digest: .sha384)
    }

    private static func read(_ directory: String, _ name: String) throws(SimulatorError) -> String {
        let path = (directory as NSString).appendingPathComponent(name)
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw .caUnreadable(path: path) }
        return text
    }

    private static func write(_ text: String, to directory: String, _ name: String, secret: Bool) throws(SimulatorError) {
        let path = (directory as NSString).appendingPathComponent(name)
        let attributes: [FileAttributeKey: Any] = [.posixPermissions: secret ? 0o600 : 0o644]
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: attributes) else {
            throw .caUnwritable(path: path)
        }
    }
}
