import AssertionCheck

/// A test-only P-256 key in PKCS#8 PEM (the form of Apple's .p8 files), made with
/// `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`. It signs nothing but requests to
/// `FakeAppleServer`, which checks them with its public half.
public enum AppleTestKey {
    public static let teamID = "TEAM123456"
    public static let keyID = "KEY7654321"

    public static let pem = """
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg781t0NL4huX3umg3
MUk/9v5QxCuhZ8Gh1W0sjaiKpgShRANCAASSeumlebQjFct3hlsq0HJHxolCOibJ
9HMygWnq+Bdd7v4j+gOrXwes8QDhkhHpxzBuQwwSo4qE/Lm+PBVrc2LQ
-----END PRIVATE KEY-----
"""
    /// `openssl pkey -in signing.p8 -pubout -outform DER | tail -c 65 | base64`
    public static let publicPoint = "BJJ66aV5tCMVy3eGWyrQckfGiUI6Jsn0czKBaer4F13u/iP6A6tfB6zxAOGSEenHMG5DDBKjioT8ub48FWtzYtA="

    /// The fake Apple server that accepts JWTs signed by this key.
    public static func fakeApple() throws -> FakeAppleServer {
        try FakeAppleServer(teamID: teamID, keyID: keyID, publicKey: P256PrivateKey(pem: pem).publicKey)
    }
}
