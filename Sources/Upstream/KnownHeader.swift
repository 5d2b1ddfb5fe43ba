/// The header names the gateway's rules look for, classified once when an `HTTPField` is made: a rule then
/// compares a byte (`field.known == .connection`) where it compared the name's bytes (`hasName`), and a
/// message's headers were compared with some name about 90 times a relayed request. `.other` is every
/// other name. `field.known == code` exactly when `field.hasName(code.spelling)`: the same ASCII
/// case-insensitive rule (letters fold, every other byte compares as it is; no Unicode folding).
public enum KnownHeader: UInt8, Sendable, CaseIterable {
    case other
    // Framing and hop-by-hop (RFC 9110 §7.6.1).
    case host, connection, keepAlive, contentLength, transferEncoding, te, trailer, upgrade, expect
    case proxyConnection, proxyAuthorization, proxyAuthenticate
    // Rewritten by the gateway.
    case xRequestId, xForwardedFor, xForwardedProto, forwarded
    // Set by the gateway for the upstream; a client's copy is dropped.
    case xAttestStatus, xAttestKeyId, xAttestRiskMetric, xAttestMethod, xAttestDebugName, xAttestDeviceIntegrity
    // App Attest request headers: consumed, never forwarded.
    case xAppAttestKeyId, xAppAttestAssertion, xAppAttestClientData, xAppAssertion, xAppAttestToken, xAppAttestDebugToken
    // Common ones that pass (known, so no rule needs their bytes).
    case userAgent, accept, acceptEncoding, acceptLanguage, contentType, authorization, cookie, date, server, traceparent
    case xAttestError

    /// The canonical spelling, as the gateway writes the headers it sets.
    public var spelling: String { Self.spellings[Int(rawValue)] }

    /// The code of `name`; `.other` for a name not listed.
    public init(_ name: String) {
        if let known = name.utf8.withContiguousStorageIfAvailable(KnownHeader.classify) {
            self = known
        } else {
            var copy = name
            self = copy.withUTF8(KnownHeader.classify)
        }
    }

    /// By length first (most names differ in it), then the candidates' lower-case bytes.
    static func classify(_ name: UnsafeBufferPointer<UInt8>) -> KnownHeader {
        guard name.count < byLength.count else { return .other }
        for candidate in byLength[name.count] where matches(name, candidate.lowered) { return candidate.code }
        return .other
    }

    private static func matches(_ name: UnsafeBufferPointer<UInt8>, _ lowered: [UInt8]) -> Bool {
        for index in 0..<name.count {
            let byte = name[index], wanted = lowered[index]
            // As `HTTPField.sameLetterOrByte`: only letters fold (CR | 0x20 is "-").
            guard byte == wanted || (byte | 0x20 == wanted && wanted >= UInt8(ascii: "a") && wanted <= UInt8(ascii: "z")) else {
                return false
            }
        }
        return true
    }

    private static let spellings: [String] = [
        "", "Host", "Connection", "Keep-Alive", "Content-Length", "Transfer-Encoding", "TE", "Trailer", "Upgrade", "Expect",
        "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate",
        "X-Request-Id", "X-Forwarded-For", "X-Forwarded-Proto", "Forwarded",
        "X-Attest-Status", "X-Attest-Key-Id", "X-Attest-Risk-Metric", "X-Attest-Method", "X-Attest-Debug-Name",
        "X-Attest-Device-Integrity",
        "X-App-Attest-Key-Id", "X-App-Attest-Assertion", "X-App-Attest-Client-Data", "X-App-Assertion", "X-App-Attest-Token",
        "X-App-Attest-Debug-Token",
        "User-Agent", "Accept", "Accept-Encoding", "Accept-Language", "Content-Type", "Authorization", "Cookie", "Date", "Server",
        "traceparent", "X-Attest-Error",
    ]

    /// Index: name length in bytes.
    private static let byLength: [[(lowered: [UInt8], code: KnownHeader)]] = {
        var table = [[(lowered: [UInt8], code: KnownHeader)]](repeating: [], count: spellings.map(\.utf8.count).max()! + 1)
        for code in allCases where code != .other {
            let lowered = code.spelling.utf8.map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 | 0x20 : $0 }
            table[lowered.count].append((lowered, code))
        }
        return table
    }()
}
