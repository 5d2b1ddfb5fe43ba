import AppleServices
import AssertionCheck
import Foundation
import Synchronization
import TestSupport

/// Test-only keys, made with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` (PKCS#8, the
/// form of Apple's .p8 files). They sign nothing but requests to the fake server.
enum TestKeys {
    static let teamID = AppleTestKey.teamID
    static let keyID = AppleTestKey.keyID
    static let signing = AppleTestKey.pem
    static let signingPublicPoint = AppleTestKey.publicPoint

    /// A different P-256 key: Apple would not know it.
    static let other = """
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg4mz3LA0qqEnjk0b0
umjjPmf5sCYTBhqOjkBdYEjg4yWhRANCAAQkBzBS6dpk7xUxBY22/y8HG+3tgYsM
DTAC4Gno1/y4DMOKHqbSSz551XSxhR4HQJyPSKckg4fdbJNXRTPLxTS/
-----END PRIVATE KEY-----
"""

    /// A P-384 key: valid PKCS#8, wrong curve for ES256.
    static let p384 = """
-----BEGIN PRIVATE KEY-----
MIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDBdjps4Q9D5eZ5jePLt
2FwgyWxAWig+2sECKQIz/9kiW1Gt2Sn0Tv/v3xmM890/lWehZANiAASA14c1Z13Q
NgwvmIKWnIdsoN8XkAK1kIW0CHkYATaazQeY1HHRDr7o90lszXKwyzp4CdYkHoMW
2CA6Jti47HgK1XJ7s5gp0I85KFHSJVBehXF5YYNhZ7LT+LcRknQIXXk=
-----END PRIVATE KEY-----
"""

    /// `signing`, encrypted with a passphrase (`openssl pkcs8 -topk8 -v2 aes-256-cbc`): must be refused, not prompted for.
    static let encrypted = """
-----BEGIN ENCRYPTED PRIVATE KEY-----
MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAhobWesOpbjJwICCAAw
DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEIM6JJSGj1+bKKApy293JOwEgZBB
Dcbyko2RcqQg5/8nmcpbK2c1NDxMF4xd5vC9Z5566Bedp8yXc4qD89dzvdJBClRu
ZcMradDRFO02lRXmq/RhccSBGeL0lbYPSLsSmZeyzNnCUnXh1E0eh2xARIYr7cbm
KWO/OTGrwVbd5eSUtD5A6YSrADuTO33UJ6kLaR5pBn0hch3DibBBi6+jpqiPTWE=
-----END ENCRYPTED PRIVATE KEY-----
"""

    static func credentials(_ pem: String = signing) throws -> AppleCredentials {
        try AppleCredentials(teamID: teamID, keyID: keyID, privateKeyPEM: pem)
    }

    static func jwt(_ pem: String = signing) throws -> AppleJWT {
        try AppleJWT(credentials: credentials(pem))
    }

    static func fakeApple() throws -> FakeAppleServer {
        try FakeAppleServer(teamID: teamID, keyID: keyID, publicKey: credentials().privateKey.publicKey)
    }
}

/// A clock the test moves by hand.
final class TestClock: Sendable {
    private let now: Mutex<Date>

    init(_ start: Date) { now = Mutex(start) }

    var date: Date { now.withLock { $0 } }

    func advance(_ seconds: TimeInterval) { now.withLock { $0 += seconds } }
}

/// Every attempt the clients report, in order.
final class CallLog: Sendable {
    private let calls = Mutex<[AppleCall]>([])

    var observer: AppleCallObserver { { [self] call in calls.withLock { $0.append(call) } } }

    var all: [AppleCall] { calls.withLock { $0 } }
}

enum Vectors {
    /// The shared real-device vectors; APP_ATTEST_VECTORS overrides where they live.
    static let directory = ProcessInfo.processInfo.environment["APP_ATTEST_VECTORS"] ?? TestPaths.vectors
}
