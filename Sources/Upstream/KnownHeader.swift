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

    /// One slot of a table by a hash of the length and the last two bytes (letters folded, so every spelling of a
    /// name lands in its slot; no two known names share one), then that candidate's bytes: a field is made per
    /// header of every message, so this costs a few instructions a byte.
    static func classify(_ name: UnsafeBufferPointer<UInt8>) -> KnownHeader {
        let count = name.count
        guard count >= 2, count <= 32 else { return .other }
        let slot = (count &* 15 ^ Int(name[count - 1] | 0x20) &* 42 ^ Int(name[count - 2] | 0x20)) & 127
        let candidate = slots[slot]
        guard candidate != 0 else { return .other }
        let start = Int(offsets[Int(candidate)]), end = Int(offsets[Int(candidate) + 1])
        guard end - start == count else { return .other }
        let lowered = Self.lowered
        for index in 0..<count {
            let byte = name[index], wanted = lowered[start + index]
            // As `HTTPField.sameLetterOrByte`: only letters fold (CR | 0x20 is "-").
            guard byte == wanted || (byte | 0x20 == wanted && wanted >= UInt8(ascii: "a") && wanted <= UInt8(ascii: "z")) else {
                return .other
            }
        }
        return KnownHeader(rawValue: candidate)!
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

    /// Every spelling lower-cased, one after another; a code's bytes are `offsets[code]..<offsets[code + 1]`.
    private static let lowered: [UInt8] = spellings.flatMap { $0.utf8.map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 | 0x20 : $0 } }
    private static let offsets: [Int] = spellings.reduce(into: [0]) { $0.append($0.last! + $1.utf8.count) }
    /// Index: the hash `classify` computes; value: the code's raw value (0: none).
    private static let slots: [UInt8] = {
        var slots = [UInt8](repeating: 0, count: 128)
        for code in allCases where code != .other {
            let bytes = Array(code.spelling.utf8), count = bytes.count
            let slot = (count &* 15 ^ Int(bytes[count - 1] | 0x20) &* 42 ^ Int(bytes[count - 2] | 0x20)) & 127
            precondition(slots[slot] == 0, "two known header names share a slot")
            slots[slot] = code.rawValue
        }
        return slots
    }()
}
