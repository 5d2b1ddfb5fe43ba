import Foundation
import Upstream

/// `server.trusted_proxies` and `server.client_ip_header`: whose word the gateway takes for the client's
/// address in its logs. Without trusted proxies the client is the TCP peer, whatever the headers say
/// (anyone can send `X-Forwarded-For`). With them, and only when the peer is one of them, the chain in the
/// chosen header is walked from the right, past trusted hops, to the first address not trusted.
public struct ClientAddressPolicy: Sendable, Equatable {
    public enum Header: String, CaseIterable, Sendable {
        case xForwardedFor = "x-forwarded-for"
        case forwarded
    }

    /// Hops read from the header at most (from the right): a bound on work per request.
    static let maxHops = 32
    /// The logged chain is cut here.
    static let maxChainBytes = 512

    public let trustedProxies: [IPNetwork]
    public let header: Header

    public init(trustedProxies: [IPNetwork] = [], header: Header = .xForwardedFor) {
        self.trustedProxies = trustedProxies
        self.header = header
    }

    static func read(_ server: ConfigMapping) -> ClientAddressPolicy {
        var networks: [IPNetwork] = []
        if let list = server.optional("trusted_proxies")?.list() {
            for item in list {
                guard let text = item.string() else { continue }
                guard let network = IPNetwork(text) else {
                    item.invalid("expected an IP address or CIDR block like 10.0.0.0/8 or fd00::/8, got \"\(text)\"")
                    continue
                }
                networks.append(network)
            }
        }
        return ClientAddressPolicy(trustedProxies: networks, header: server.choice("client_ip_header", default: Header.xForwardedFor))
    }

    func trusts(_ address: IPAddress) -> Bool { trustedProxies.contains { $0.contains(address) } }

    /// The TCP peer is one of `trusted_proxies`.
    func trustsPeer(_ peer: String) -> Bool {
        guard !trustedProxies.isEmpty, let address = IPAddress(peer) else { return false }
        return trusts(address)
    }

    /// The client's address, and the forwarded chain (header hops, then the peer) when it was consulted.
    func resolve(peer: String, headers: [HTTPField]) -> (client: String, chain: String?) {
        guard !trustedProxies.isEmpty, let peerAddress = IPAddress(peer), trusts(peerAddress) else { return (peer, nil) }
        let hops = Array(hopList(headers).suffix(ClientAddressPolicy.maxHops))
        guard !hops.isEmpty else { return (peerAddress.text, nil) }
        var client = peerAddress
        for hop in hops.reversed() {
            // An entry that is not an address ("unknown", garbage) ends the walk at the last trusted hop.
            guard let address = IPAddress(ClientAddressPolicy.stripPort(hop)) else { break }
            client = address
            if !trusts(address) { break }
        }
        let chain = (hops + [peerAddress.text]).joined(separator: ", ")
        return (client.text, String(decoding: chain.utf8.prefix(ClientAddressPolicy.maxChainBytes), as: UTF8.self))
    }

    private func hopList(_ headers: [HTTPField]) -> [String] {
        switch header {
        case .xForwardedFor:
            return ForwardingRules.values("x-forwarded-for", in: headers)
        case .forwarded:
            // RFC 7239: elements separated by ",", pairs by ";"; only `for=` names a hop.
            return ForwardingRules.values("forwarded", in: headers).compactMap { element in
                element.split(separator: ";").lazy.compactMap { pair -> String? in
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == "for" else { return nil }
                    return parts[1].trimmingCharacters(in: CharacterSet(charactersIn: " \t\""))
                }.first ?? "unknown"
            }
        }
    }

    /// "192.0.2.1:4711" → "192.0.2.1", "[2001:db8::1]:4711" → "2001:db8::1"; a bare IPv6 address is kept.
    static func stripPort(_ hop: String) -> String {
        if hop.hasPrefix("["), let close = hop.firstIndex(of: "]") {
            return String(hop[hop.index(after: hop.startIndex)..<close])
        }
        let colons = hop.utf8.filter { $0 == UInt8(ascii: ":") }.count
        return colons == 1 ? String(hop.prefix { $0 != ":" }) : hop
    }
}

/// An IPv4 or IPv6 address (IPv4-mapped IPv6 addresses are read as IPv4).
public struct IPAddress: Sendable, Equatable {
    let bytes: [UInt8]

    init?(_ text: String) {
        guard !text.isEmpty, text.utf8.count <= 64 else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        let raw = withUnsafeBytes(of: &v6) { Array($0) }
        bytes = raw.prefix(12).elementsEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]) ? Array(raw.suffix(4)) : raw
    }

    /// The canonical text (inet_ntop).
    var text: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        return bytes.withUnsafeBytes { raw in
            inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count)) == nil
                ? "" : String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }
}

/// An address block: "10.0.0.0/8", "fd00::/8", or one address.
public struct IPNetwork: Sendable, Equatable {
    let address: IPAddress
    let prefixLength: Int

    init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress(String(parts[0])) else { return nil }
        let bits = address.bytes.count * 8
        if parts.count == 2 {
            guard parts[1].utf8.count <= 3, parts[1].utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let length = Int(parts[1]),
                  length <= bits else { return nil }
            prefixLength = length
        } else {
            prefixLength = bits
        }
        self.address = address
    }

    func contains(_ other: IPAddress) -> Bool {
        guard other.bytes.count == address.bytes.count else { return false }
        var remaining = prefixLength
        for (mine, theirs) in zip(address.bytes, other.bytes) where remaining > 0 {
            let mask: UInt8 = remaining >= 8 ? 0xFF : ~(0xFF >> UInt8(remaining))
            guard mine & mask == theirs & mask else { return false }
            remaining -= 8
        }
        return true
    }
}
