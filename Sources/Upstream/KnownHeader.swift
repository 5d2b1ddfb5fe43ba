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

    /// The canonical spelling, as the gateway writes the headers it sets. A switch of literals: an array's
    /// element was a lazy global to check and a string to retain per field made.
    public var spelling: String {
        switch self {
        case .other: ""
        case .host: "Host"
        case .connection: "Connection"
        case .keepAlive: "Keep-Alive"
        case .contentLength: "Content-Length"
        case .transferEncoding: "Transfer-Encoding"
        case .te: "TE"
        case .trailer: "Trailer"
        case .upgrade: "Upgrade"
        case .expect: "Expect"
        case .proxyConnection: "Proxy-Connection"
        case .proxyAuthorization: "Proxy-Authorization"
        case .proxyAuthenticate: "Proxy-Authenticate"
        case .xRequestId: "X-Request-Id"
        case .xForwardedFor: "X-Forwarded-For"
        case .xForwardedProto: "X-Forwarded-Proto"
        case .forwarded: "Forwarded"
        case .xAttestStatus: "X-Attest-Status"
        case .xAttestKeyId: "X-Attest-Key-Id"
        case .xAttestRiskMetric: "X-Attest-Risk-Metric"
        case .xAttestMethod: "X-Attest-Method"
        case .xAttestDebugName: "X-Attest-Debug-Name"
        case .xAttestDeviceIntegrity: "X-Attest-Device-Integrity"
        case .xAppAttestKeyId: "X-App-Attest-Key-Id"
        case .xAppAttestAssertion: "X-App-Attest-Assertion"
        case .xAppAttestClientData: "X-App-Attest-Client-Data"
        case .xAppAssertion: "X-App-Assertion"
        case .xAppAttestToken: "X-App-Attest-Token"
        case .xAppAttestDebugToken: "X-App-Attest-Debug-Token"
        case .userAgent: "User-Agent"
        case .accept: "Accept"
        case .acceptEncoding: "Accept-Encoding"
        case .acceptLanguage: "Accept-Language"
        case .contentType: "Content-Type"
        case .authorization: "Authorization"
        case .cookie: "Cookie"
        case .date: "Date"
        case .server: "Server"
        case .traceparent: "traceparent"
        case .xAttestError: "X-Attest-Error"
        }
    }

    /// The code of `name`; `.other` for a name not listed.
    public init(_ name: String) {
        if let known = name.utf8.withContiguousStorageIfAvailable({ KnownHeader.classify(UnsafeRawBufferPointer($0)) }) {
            self = known
        } else {
            var copy = name
            self = copy.withUTF8 { KnownHeader.classify(UnsafeRawBufferPointer($0)) }
        }
    }

    /// One slot of a table by a hash of the length and the last two bytes (letters folded, so every spelling of a
    /// name lands in its slot; no two known names share one), then that candidate's bytes eight at a time: a
    /// field is made per header of every message (byte by byte, this cost 200 instructions a name).
    static func classify(_ name: UnsafeRawBufferPointer) -> KnownHeader { classifySpelling(name).known }

    /// `classify`, and whether `name` is the code's `spelling` byte for byte (as most senders write the names
    /// they share): then that literal can stand for the name, no String made of its bytes (nor any compared).
    static func classifySpelling(_ name: UnsafeRawBufferPointer) -> (known: KnownHeader, canonical: Bool) {
        let count = name.count
        guard count >= 2, count <= maxLength else { return (.other, false) }
        let table = Self.table
        let code = table.slots[slot(count: count, last: name[count - 1], beforeLast: name[count - 2])]
        guard code != 0, table.lengths[Int(code)] == count else { return (.other, false) }
        // A spelling's letters fold by OR-ing 0x20 (only an ASCII letter of either case becomes that lower-case
        // letter so, as `HTTPField.sameLetterOrByte` folds); its other bytes ("-") compare as they are.
        var word = Int(code) &* wordsPerName, canonical = true
        let matches = words(name) { chunk in
            defer { word += 1 }
            canonical = canonical && chunk == table.spelled[word]
            return chunk | table.masks[word] == table.words[word]
        }
        return matches ? (KnownHeader(rawValue: code)!, canonical) : (.other, false)
    }

    private static func slot(count: Int, last: UInt8, beforeLast: UInt8) -> Int {
        (count &* 15 ^ Int(last | 0x20) &* 42 ^ Int(beforeLast | 0x20)) & 127
    }

    /// `bytes` (2 to `maxLength` of them) as words, while `body` agrees: whole words from the start, the last
    /// one overlapping the one before it; under eight bytes, two overlapping halves. No byte-by-byte tail.
    @inline(__always)
    private static func words(_ bytes: UnsafeRawBufferPointer, _ body: (UInt64) -> Bool) -> Bool {
        let count = bytes.count
        if count < 4 {
            return body(UInt64(bytes.loadUnaligned(as: UInt16.self)) | UInt64(bytes.loadUnaligned(fromByteOffset: count - 2, as: UInt16.self)) << 16)
        }
        if count < 8 {
            return body(UInt64(bytes.loadUnaligned(as: UInt32.self)) | UInt64(bytes.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self)) << 32)
        }
        var offset = 0
        repeat {
            guard body(bytes.loadUnaligned(fromByteOffset: min(offset, count - 8), as: UInt64.self)) else { return false }
            offset += 8
        } while offset < count
        return true
    }

    private static let maxLength = 32
    private static let wordsPerName = maxLength / 8

    /// What `classify` reads, in one place (one lazy global to check, not four).
    private final class Table: Sendable {
        /// Index: the hash `classify` computes; value: the code's raw value (0: none).
        let slots: [UInt8]
        let lengths: [Int]
        /// Each spelling lower-cased, as the words `words` reads (`wordsPerName` a code, zero-padded), and the
        /// bits that fold: 0x20 in each letter's byte.
        let words: [UInt64]
        let masks: [UInt64]
        /// Each spelling as it is, read the same way.
        let spelled: [UInt64]

        init() {
            var slots = [UInt8](repeating: 0, count: 128)
            var words = [UInt64](repeating: 0, count: KnownHeader.allCases.count * wordsPerName)
            var masks = words, spelled = words
            for code in KnownHeader.allCases where code != .other {
                let spelling = Array(code.spelling.utf8), count = spelling.count
                precondition(count >= 2 && count <= maxLength)
                let slot = slot(count: count, last: spelling[count - 1], beforeLast: spelling[count - 2])
                precondition(slots[slot] == 0, "two known header names share a slot")
                slots[slot] = code.rawValue
                let lowered = spelling.map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 | 0x20 : $0 }
                let folding = lowered.map { $0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z") ? UInt8(0x20) : 0 }
                let first = Int(code.rawValue) * wordsPerName
                words.replaceSubrange(first..<(first + wordsPerName), with: Self.packed(lowered))
                masks.replaceSubrange(first..<(first + wordsPerName), with: Self.packed(folding))
                spelled.replaceSubrange(first..<(first + wordsPerName), with: Self.packed(spelling))
            }
            (self.slots, self.words, self.masks, self.spelled) = (slots, words, masks, spelled)
            lengths = KnownHeader.allCases.map(\.spelling.utf8.count)
        }

        private static func packed(_ bytes: [UInt8]) -> [UInt64] {
            var packed = [UInt64](repeating: 0, count: wordsPerName), index = 0
            _ = bytes.withUnsafeBytes { raw in
                KnownHeader.words(raw) { word in
                    packed[index] = word
                    index += 1
                    return true
                }
            }
            return packed
        }
    }

    private static let table = Table()
}
