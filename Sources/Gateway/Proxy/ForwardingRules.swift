import Upstream

/// Which headers cross the gateway, in each direction.
enum ForwardingRules {
    /// Headers the gateway itself sets for the upstream: a client's copy is always dropped, so it cannot
    /// forge a verified status.
    static let gatewayPrefix = "x-attest-"
    /// App Attest request headers (and any other `x-app-attest-*`): consumed here, never forwarded.
    static let appAttestHeaders: Set<String> = [
        "x-app-attest-key-id", "x-app-attest-assertion", "x-app-attest-client-data", "x-app-assertion", "x-app-attest-token",
        "x-app-attest-debug-token",
    ]
    /// RFC 9110 §7.6.1 hop-by-hop headers, plus framing the transport recomputes.
    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "proxy-connection",
        "proxy-authorization", "proxy-authenticate", "content-length", "expect", "host",
    ]

    /// Rewritten by the gateway from the client's copy plus its own value.
    static let rewritten: Set<String> = ["x-request-id", "x-forwarded-for", "x-forwarded-proto", "forwarded"]

    /// The client's headers as the upstream should see them, before the gateway adds its own. A name
    /// with "_" is dropped unless `forwardUnderscores` (`server.forward_underscore_headers`); then it is
    /// judged as the name CGI/WSGI servers read it, "_" as "-", so `X_Attest_Status` goes wherever
    /// `X-Attest-Status` would: nowhere.
    static func requestHeaders(_ headers: [HTTPField], forwardUnderscores: Bool = false) -> [HTTPField] {
        let named = connectionNamed(headers)
        return headers.filter { header in
            var name = header.name.lowercased()
            if name.utf8.contains(UInt8(ascii: "_")) {
                guard forwardUnderscores else { return false }
                name = String(decoding: name.utf8.map { $0 == UInt8(ascii: "_") ? UInt8(ascii: "-") : $0 }, as: UTF8.self)
            }
            return !hopByHop.contains(name) && !named.contains(name) && !name.hasPrefix("proxy-")
                && !name.hasPrefix(gatewayPrefix) && !name.hasPrefix("x-app-attest-") && !appAttestHeaders.contains(name)
                && !rewritten.contains(name)
        }
    }

    /// The upstream's response headers as the client should see them (framing is redone by the server).
    static func responseHeaders(_ headers: [HTTPField]) -> [HTTPField] {
        let named = connectionNamed(headers)
        return headers.filter { header in
            let name = header.name.lowercased()
            return !hopByHop.contains(name) && !named.contains(name) && !name.hasPrefix("proxy-")
        }
    }

    /// The values of every `name` header, comma-joined as one list (HTTP's rule for repeated fields).
    static func values(_ name: String, in headers: [HTTPField]) -> [String] {
        var values: [String] = []
        for header in headers where header.hasName(name) {
            for var item in header.value.utf8.split(separator: UInt8(ascii: ",")) {
                while let first = item.first, first == 0x20 || first == 0x09 { item = item.dropFirst() }
                while let last = item.last, last == 0x20 || last == 0x09 { item = item.dropLast() }
                if !item.isEmpty { values.append(String(decoding: item, as: UTF8.self)) }
            }
        }
        return values
    }

    /// Headers named in `Connection` are hop-by-hop too (a list of one or two names: no set needed).
    private static func connectionNamed(_ headers: [HTTPField]) -> [String] {
        values("connection", in: headers).map { $0.lowercased() }
    }
}
