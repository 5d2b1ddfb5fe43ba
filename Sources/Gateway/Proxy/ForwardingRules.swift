import Upstream

/// Which headers cross the gateway, in each direction.
enum ForwardingRules {
    /// Headers the gateway itself sets for the upstream: a client's copy is always dropped, so it cannot
    /// forge a verified status.
    static let gatewayPrefix = "x-attest-"
    /// App Attest request headers (and any other `x-app-attest-*`): consumed here, never forwarded.
    static let appAttestHeaders = [
        "x-app-attest-key-id", "x-app-attest-assertion", "x-app-attest-client-data", "x-app-assertion", "x-app-attest-token",
        "x-app-attest-debug-token",
    ]
    /// RFC 9110 §7.6.1 hop-by-hop headers, plus framing the transport recomputes.
    static let hopByHop = [
        "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "proxy-connection",
        "proxy-authorization", "proxy-authenticate", "content-length", "expect", "host",
    ]
    /// Rewritten by the gateway from the client's copy plus its own value.
    static let rewritten = ["x-request-id", "x-forwarded-for", "x-forwarded-proto", "forwarded"]

    private static let requestDropped = HeaderNames(hopByHop + appAttestHeaders + rewritten)
    private static let requestDroppedPrefixes = ["proxy-", gatewayPrefix, "x-app-attest-"].map { Array($0.utf8) }
    private static let responseDropped = HeaderNames(hopByHop)
    private static let proxyPrefix = Array("proxy-".utf8)

    /// The verdicts above for each known name, judged once from its spelling: a known header is judged by its
    /// code (index: `KnownHeader.rawValue`), only other names by their bytes.
    private static let requestDroppedKnown = verdicts(underscoreAsDash: true) { isRequestDropped($0, named: []) }
    private static let responseDroppedKnown = verdicts(underscoreAsDash: false) { isResponseDropped($0, named: []) }

    private static func verdicts(underscoreAsDash: Bool, _ verdict: (FoldedName<UnsafeBufferPointer<UInt8>>) -> Bool) -> [Bool] {
        KnownHeader.allCases.map { $0 != .other && FoldedName.judge($0.spelling, underscoreAsDash: underscoreAsDash, verdict) }
    }

    private static func isRequestDropped(_ name: FoldedName<UnsafeBufferPointer<UInt8>>, named: Set<[UInt8]>) -> Bool {
        requestDropped.contains(name) || (!named.isEmpty && named.contains(name.lowered)) || requestDroppedPrefixes.contains(where: name.starts)
    }

    private static func isResponseDropped(_ name: FoldedName<UnsafeBufferPointer<UInt8>>, named: Set<[UInt8]>) -> Bool {
        responseDropped.contains(name) || (!named.isEmpty && named.contains(name.lowered)) || name.starts(with: proxyPrefix)
    }

    /// Whether a name the `Connection` headers list (`named`, lower-cased) is `known`'s.
    private static func isNamed(_ known: KnownHeader, in named: Set<[UInt8]>) -> Bool {
        !named.isEmpty && named.contains(knownLowered[Int(known.rawValue)])
    }

    private static let knownLowered = KnownHeader.allCases.map { code in
        code.spelling.utf8.map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 | 0x20 : $0 }
    }

    /// The client's headers as the upstream should see them, before the gateway adds its own. A name
    /// with "_" is dropped unless `forwardUnderscores` (`server.forward_underscore_headers`); then it is
    /// judged as the name CGI/WSGI servers read it, "_" as "-", so `X_Attest_Status` goes wherever
    /// `X-Attest-Status` would: nowhere. (The kept ones appended to one array reserved for them all: a filter
    /// grows its result by doubling, a copy thinned in place shifts what follows each removal.) `room`: how
    /// many headers the caller adds, reserved in that one array.
    static func requestHeaders(_ headers: [HTTPField], forwardUnderscores: Bool = false, room: Int = 0) -> [HTTPField] {
        let named = connectionNamed(headers)
        var kept: [HTTPField] = []
        kept.reserveCapacity(headers.count + room)
        for index in headers.indices where !isDroppedFromRequest(headers, at: index, named: named, forwardUnderscores: forwardUnderscores) {
            kept.append(headers[index])
        }
        return kept
    }

    /// Judged where the field lies: a copy of it, made to be passed, retained and released its two strings.
    private static func isDroppedFromRequest(_ headers: [HTTPField], at index: Int, named: Set<[UInt8]>, forwardUnderscores: Bool) -> Bool {
        // A known name has no "_" and folds to its spelling.
        let known = headers[index].known
        if known != .other { return requestDroppedKnown[Int(known.rawValue)] || isNamed(known, in: named) }
        if !forwardUnderscores && !headers[index].name.allBytes({ $0 != UInt8(ascii: "_") }) { return true }
        return FoldedName.judge(headers[index].name, underscoreAsDash: true) { isRequestDropped($0, named: named) }
    }

    /// The upstream's response head as the client gets it, in one pass over the upstream's fields (a copy
    /// thinned twice and a third look for the length before): hop-by-hop and framing fields dropped (framing is
    /// redone by the server), the upstream's X-Request-Id replaced by the gateway's `requestId` (the client
    /// sees exactly one); and the upstream's
    /// Content-Length, which is kept (a body cut short is then visibly short; without one, chunked).
    static func clientResponse(_ headers: [HTTPField], requestId: String) -> (headers: [HTTPField], contentLength: Int?) {
        let named = connectionNamed(headers)
        var kept: [HTTPField] = []
        kept.reserveCapacity(headers.count + 1)
        var length: String?
        for index in headers.indices {
            if length == nil, headers[index].known == .contentLength { length = headers[index].value }
            guard headers[index].known != .xRequestId, !isDroppedFromResponse(headers, at: index, named: named) else { continue }
            kept.append(headers[index])
        }
        kept.append(HTTPField(.xRequestId, requestId))
        return (kept, length.flatMap(contentLength))
    }

    /// The upstream's Content-Length as a number: read from the digits where that is all the value holds (the
    /// usual case; a trimmed copy and `Int(_:)` cost 270 instructions a response), else as `Int` reads it trimmed.
    private static func contentLength(_ value: String) -> Int? {
        let digits = value.utf8.withContiguousStorageIfAvailable { bytes -> Int? in
            guard !bytes.isEmpty, bytes.count <= 18 else { return nil }  // 18 digits cannot overflow
            var number = 0
            for byte in bytes {
                guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
                number = number &* 10 &+ Int(byte &- UInt8(ascii: "0"))
            }
            return number
        }
        return (digits ?? nil) ?? Int(value.trimmingSpaces)
    }

    /// A known name by its code, only other names by their bytes; judged where the field lies (as requests').
    private static func isDroppedFromResponse(_ headers: [HTTPField], at index: Int, named: Set<[UInt8]>) -> Bool {
        let known = headers[index].known
        if known != .other { return responseDroppedKnown[Int(known.rawValue)] || isNamed(known, in: named) }
        return FoldedName.judge(headers[index].name, underscoreAsDash: false) { isResponseDropped($0, named: named) }
    }

    /// RFC 7239's `for=…;proto=…` for the upstream's `Forwarded`, an IPv6 node quoted in brackets: written into
    /// one new string (an interpolation, appended piece by piece, cost 1,300 instructions a request).
    static func forwardedElement(client: String, scheme: String) -> String {
        let quoted = !client.allBytes { $0 != UInt8(ascii: ":") }
        return String(unsafeUninitializedCapacity: client.utf8.count + scheme.utf8.count + 18) { buffer in
            var element = unsafe OutputSpan(buffer: buffer, initializedCount: 0)
            element.append(ascii: quoted ? "for=\"[" : "for=")
            element.append(utf8: client)
            element.append(ascii: quoted ? "]\";proto=" : ";proto=")
            element.append(utf8: scheme)
            return unsafe element.finalize(for: buffer)
        }
    }

    /// The values of every `name` header, comma-joined as one list (HTTP's rule for repeated fields).
    static func values(_ name: String, in headers: [HTTPField]) -> [String] {
        let known = KnownHeader(name)
        guard known == .other else { return values(known, in: headers) }
        var values: [String] = []
        forEachItem(in: headers.filter { $0.hasName(name) }, named: nil) { values.append(String(decoding: $0, as: UTF8.self)) }
        return values
    }

    static func values(_ known: KnownHeader, in headers: [HTTPField]) -> [String] {
        var values: [String] = []
        forEachItem(in: headers, named: known) { values.append(String(decoding: $0, as: UTF8.self)) }
        return values
    }

    /// The non-empty items of the comma-separated list of every header called `known` (every header: nil), blanks around them trimmed. Read
    /// from the value's contiguous bytes (a `split` made an array per header, and the string view's index
    /// steps cost more than the scan: together most of what judging a response's headers cost).
    private static func forEachItem(in headers: [HTTPField], named known: KnownHeader?, _ body: (UnsafeBufferPointer<UInt8>) -> Void) {
        for index in headers.indices where known == nil || headers[index].known == known {
            forEachItem(in: headers[index].value, body)
        }
    }

    private static func forEachItem(in value: String, _ body: (UnsafeBufferPointer<UInt8>) -> Void) {
        var value = value
        value.withUTF8 { list in
            var start = 0
            while start < list.count {
                var end = start
                while end < list.count && list[end] != UInt8(ascii: ",") { end += 1 }
                var (first, last) = (start, end)
                while first < last && (list[first] == 0x20 || list[first] == 0x09) { first += 1 }
                while last > first && (list[last - 1] == 0x20 || list[last - 1] == 0x09) { last -= 1 }
                if first < last { body(UnsafeBufferPointer(rebasing: list[first..<last])) }
                start = end + 1
            }
        }
    }

    /// Headers named in `Connection` are hop-by-hop too: a set, lower-cased once, so a message listing
    /// thousands of names against thousands of headers costs their sum, not their product (an attack run
    /// spent 22 ms of CPU per such request when each header was compared with each name). Read from the
    /// bytes: "keep-alive", on nearly every upstream response, is dropped anyway and costs nothing.
    private static func connectionNamed(_ headers: [HTTPField]) -> Set<[UInt8]> {
        var named: Set<[UInt8]> = []
        for index in headers.indices where headers[index].known == .connection {
            // The usual value, whole: nothing to split or add.
            if headers[index].value.utf8.count == keepAlive.count,
               headers[index].value.utf8.withContiguousStorageIfAvailable(isKeepAlive) == true { continue }
            forEachItem(in: headers[index].value) { item in
                if isKeepAlive(item) { return }  // the usual item, known without a lower-cased copy
                // Non-ASCII names fold by Unicode's rules, as `FoldedName` folds the header names they meet.
                let lowered = item.allSatisfy({ $0 < 0x80 })
                    ? item.map { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 | 0x20 : $0 }
                    : Array(String(decoding: item, as: UTF8.self).lowercased().utf8)
                if lowered != keepAlive { named.insert(lowered) }
            }
        }
        return named
    }

    private static let keepAlive = Array("keep-alive".utf8)

    /// By index (a zip of the two was most of what judging a response's `Connection: keep-alive` cost).
    private static func isKeepAlive(_ item: UnsafeBufferPointer<UInt8>) -> Bool {
        guard item.count == keepAlive.count else { return false }
        for index in item.indices where (item[index] >= UInt8(ascii: "A") && item[index] <= UInt8(ascii: "Z") ? item[index] | 0x20 : item[index]) != keepAlive[index] {
            return false
        }
        return true
    }
}

/// Lower-case header names, grouped by length for `FoldedName` to be compared with.
struct HeaderNames {
    /// Index: name length in bytes.
    private let byLength: [[[UInt8]]]

    init(_ names: [String]) {
        var byLength = [[[UInt8]]](repeating: [], count: (names.map(\.utf8.count).max() ?? 0) + 1)
        for name in names { byLength[name.utf8.count].append(Array(name.utf8)) }
        self.byLength = byLength
    }

    func contains<Bytes: Collection<UInt8>>(_ name: FoldedName<Bytes>) -> Bool {
        name.count < byLength.count && byLength[name.count].contains(where: name.equals)
    }
}

/// A header name as the forwarding rules judge it: its bytes compared with ASCII letters folded to lower
/// case (and "_" read as "-" when asked), in place: a lower-cased String and a set lookup per header cost a
/// few percent of a relayed request, a folded copy an allocation per header. A name with other bytes (only
/// an upstream's can have them) is lower-cased by Unicode's rules first, as the rules always did: a few
/// letters fold to ASCII ones.
struct FoldedName<Bytes: Collection<UInt8>> {
    private let bytes: Bytes
    private let underscoreAsDash: Bool

    /// `verdict` on `name`, folded; it sees the name's own bytes when the string has them at hand.
    static func judge(_ name: String, underscoreAsDash: Bool, _ verdict: (FoldedName<UnsafeBufferPointer<UInt8>>) -> Bool) -> Bool
        where Bytes == UnsafeBufferPointer<UInt8> {
        var source = name.allBytes { $0 < 0x80 } ? name : name.lowercased()
        return source.withUTF8 { verdict(FoldedName(bytes: $0, underscoreAsDash: underscoreAsDash)) }
    }

    private init(bytes: Bytes, underscoreAsDash: Bool) {
        self.bytes = bytes
        self.underscoreAsDash = underscoreAsDash
    }

    var count: Int { bytes.count }

    /// The folded bytes as an array: one allocation, for a set lookup (only when `Connection` names any).
    var lowered: [UInt8] { bytes.map(fold) }

    func equals(_ lowered: [UInt8]) -> Bool {
        bytes.count == lowered.count && starts(with: lowered)
    }

    func starts(with lowered: [UInt8]) -> Bool {
        bytes.count >= lowered.count && zip(bytes, lowered).allSatisfy { fold($0) == $1 }
    }

    private func fold(_ byte: UInt8) -> UInt8 {
        if byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") { return byte | 0x20 }
        return underscoreAsDash && byte == UInt8(ascii: "_") ? UInt8(ascii: "-") : byte
    }
}
