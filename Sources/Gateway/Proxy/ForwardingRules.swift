import Foundation
import Upstream

/// Which headers cross the gateway, in each direction.
enum ForwardingRules {
    /// Headers the gateway itself sets for the upstream: a client's copy is always dropped, so it cannot
    /// forge a verified status.
    static let gatewayPrefix = "x-attest-"
    /// App Attest request headers: consumed here, never forwarded.
    static let appAttestHeaders: Set<String> = [
        "x-app-attest-key-id", "x-app-attest-assertion", "x-app-attest-client-data", "x-app-assertion",
    ]
    /// RFC 9110 §7.6.1 hop-by-hop headers, plus framing the transport recomputes.
    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "proxy-connection",
        "proxy-authorization", "proxy-authenticate", "content-length", "expect", "host",
    ]

    /// The client's headers as the upstream should see them, before the gateway adds its own.
    static func requestHeaders(_ headers: [HTTPField]) -> [HTTPField] {
        let named = connectionNamed(headers)
        return headers.filter { header in
            let name = header.name.lowercased()
            return !hopByHop.contains(name) && !named.contains(name) && !name.hasPrefix("proxy-")
                && !name.hasPrefix(gatewayPrefix) && !appAttestHeaders.contains(name)
                && !["x-request-id", "x-forwarded-for", "x-forwarded-proto", "forwarded"].contains(name)
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
        headers.filter { $0.hasName(name) }
            .flatMap { $0.value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
            .filter { !$0.isEmpty }
    }

    /// Headers named in `Connection` are hop-by-hop too.
    private static func connectionNamed(_ headers: [HTTPField]) -> Set<String> {
        Set(values("connection", in: headers).map { $0.lowercased() })
    }
}
