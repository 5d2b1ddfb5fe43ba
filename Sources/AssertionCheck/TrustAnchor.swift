import Foundation

/// The root certificate an attestation chain must end at. Apple's App Attestation Root CA is built in;
/// a PEM file can replace it (tests, the device simulator's demo CA).
public final class TrustAnchor: @unchecked Sendable {
    let certificate: X509Certificate
    /// True only for the built-in Apple root: anything else must be announced loudly by the caller.
    public let isApple: Bool

    /// Apple App Attestation Root CA (SHA-256 fingerprint 1C:B9:82:3B:…:C9:32), valid 2020-03-18 – 2045-03-15.
    public static let apple: TrustAnchor = {
        // The PEM below is a constant that is known to parse; a failure here is a build defect.
        try! TrustAnchor(pem: applePEM, isApple: true)
    }()

    public convenience init(pem: String) throws(VerificationError) {
        try self.init(pem: pem, isApple: false)
    }

    public convenience init(pemFile path: String) throws(VerificationError) {
        guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw VerificationError(.badCertificate, "cannot read trust anchor file \(path)")
        }
        try self.init(pem: pem)
    }

    private init(pem: String, isApple: Bool) throws(VerificationError) {
        certificate = try X509Certificate(pem: pem)
        self.isApple = isApple
    }

    private static let applePEM = """
-----BEGIN CERTIFICATE-----
MIICITCCAaegAwIBAgIQC/O+DvHN0uD7jG5yH2IXmDAKBggqhkjOPQQDAzBSMSYw
JAYDVQQDDB1BcHBsZSBBcHAgQXR0ZXN0YXRpb24gUm9vdCBDQTETMBEGA1UECgwK
QXBwbGUgSW5jLjETMBEGA1UECAwKQ2FsaWZvcm5pYTAeFw0yMDAzMTgxODMyNTNa
Fw00NTAzMTUwMDAwMDBaMFIxJjAkBgNVBAMMHUFwcGxlIEFwcCBBdHRlc3RhdGlv
biBSb290IENBMRMwEQYDVQQKDApBcHBsZSBJbmMuMRMwEQYDVQQIDApDYWxpZm9y
bmlhMHYwEAYHKoZIzj0CAQYFK4EEACIDYgAERTHhmLW07ATaFQIEVwTtT4dyctdh
NbJhFs/Ii2FdCgAHGbpphY3+d8qjuDngIN3WVhQUBHAoMeQ/cLiP1sOUtgjqK9au
Yen1mMEvRq9Sk3Jm5X8U62H+xTD3FE9TgS41o0IwQDAPBgNVHRMBAf8EBTADAQH/
MB0GA1UdDgQWBBSskRBTM72+aEH/pwyp5frq5eWKoTAOBgNVHQ8BAf8EBAMCAQYw
CgYIKoZIzj0EAwMDaAAwZQIwQgFGnByvsiVbpTKwSga0kP0e8EeDS4+sQmTvb7vn
53O5+FRXgeLhpJ06ysC5PrOyAjEAp5U4xDgEgllF7En3VcE3iexZZtKeYnpqtijV
oyFraWVIyd/dganmrduC1bmTBGwD
-----END CERTIFICATE-----
"""
}
