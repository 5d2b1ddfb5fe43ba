import HTTPServer

/// The access-log fields taken from the request itself: who sent it (client address, forwarded chain,
/// user agent) and the W3C trace it belongs to. Captured where the request's record is made.
extension RequestRecord {
    /// User agents are logged up to this many bytes (cut at a character boundary).
    static let maxUserAgentBytes = 256

    func capture(_ request: RequestHead, clientAddress policy: ClientAddressPolicy) {
        let resolved = policy.resolve(peer: request.clientAddress, headers: request.headers)
        clientIP = resolved.client
        forwardedFor = resolved.chain
        // One pass, by the names' codes: the first User-Agent, and a traceparent only when it is the only one.
        var agent: String?, parent: String?, parents = 0
        for field in request.headers {
            switch field.known {
            case .userAgent where agent == nil: agent = field.value
            case .traceparent: (parent, parents) = (field.value, parents + 1)
            default: break
            }
        }
        userAgent = agent.map(RequestRecord.truncated)
        traceparent = parents == 1 && TraceParent.isValid(parent ?? "") ? parent : nil
        httpProtocol = request.httpVersion
        tlsVersion = request.tls?.version
        alpn = request.tls?.alpn
    }

    static func truncated(_ text: String) -> String {
        guard text.utf8.count > maxUserAgentBytes else { return text }
        let bytes = Array(text.utf8.prefix(maxUserAgentBytes + 1))
        var end = maxUserAgentBytes
        // bytes[end] is the first byte left out: while it continues a character, that character goes too.
        while end > 0, bytes[end] & 0xC0 == 0x80 { end -= 1 }
        return String(decoding: bytes[..<end], as: UTF8.self)
    }
}

/// W3C Trace Context `traceparent`: `version-traceid-parentid-flags` in lowercase hex. The header is
/// forwarded unchanged whatever it holds (the upstream's tracer decides); only a valid one is logged.
enum TraceParent {
    static func isValid(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard bytes.count >= 55, bytes.count <= 512 else { return false }
        let fields = [(0, 2), (3, 32), (36, 16), (53, 2)]
        for (start, length) in fields where !bytes[start..<start + length].allSatisfy(isLowerHex) { return false }
        guard bytes[2] == dash, bytes[35] == dash, bytes[52] == dash else { return false }
        let version = bytes[0..<2]
        guard !version.elementsEqual("ff".utf8) else { return false }
        // Version 00 is exactly 55 characters; a later version may append fields after a dash.
        if version.elementsEqual("00".utf8) ? bytes.count != 55 : (bytes.count > 55 && bytes[55] != dash) { return false }
        let zero = UInt8(ascii: "0")
        return !bytes[3..<35].allSatisfy { $0 == zero } && !bytes[36..<52].allSatisfy { $0 == zero }
    }

    private static let dash = UInt8(ascii: "-")

    private static func isLowerHex(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66)
    }
}
