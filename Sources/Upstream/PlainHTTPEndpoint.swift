/// Where an `http://` base URL points, taken apart once per target for the loop's own HTTP/1.1 client.
/// `https://` (and anything the own client does not do, such as credentials in the URL) stays with curl.
struct PlainHTTPEndpoint: Sendable, Equatable {
    /// Name or address to connect to, without brackets ("localhost", "127.0.0.1", "::1").
    let host: String
    let port: Int
    /// What `Host` says unless the caller sends its own: the authority as written, minus a default port (as curl).
    let hostHeader: String
    /// Key of the keep-alive pool: one per host and port.
    let poolKey: String
    /// Path prefix of the base URL ("" or "/api"), put in front of every request target.
    let pathPrefix: String
    /// What follows the request target when the caller sends no Host: the HTTP version and `Host`, made once.
    let headTail: [UInt8]
    static let versionLine = Array(" HTTP/1.1\r\n".utf8)

    /// nil: not a plain `http://` URL this client takes (the caller uses curl).
    init?(baseURL: String) {
        let scheme = "http://"
        guard baseURL.utf8.count > scheme.utf8.count, baseURL.lowercased().hasPrefix(scheme) else { return nil }
        let rest = baseURL.dropFirst(scheme.count)
        let authority = rest.prefix { $0 != "/" }
        pathPrefix = String(rest.dropFirst(authority.count))
        guard !authority.isEmpty, !authority.contains("@") else { return nil }
        var portText: Substring?
        let hostPart: Substring
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                portText = after.dropFirst()
            }
        } else if let colon = authority.firstIndex(of: ":") {
            hostPart = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            hostPart = authority
        }
        guard !hostPart.isEmpty else { return nil }
        if let portText {
            guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy(\.isASCII), let port = Int(portText), (1...65535).contains(port)
            else { return nil }
            self.port = port
        } else {
            port = 80
        }
        host = String(hostPart)
        let bracketed = authority.hasPrefix("[") ? "[" + host + "]" : host
        hostHeader = port == 80 ? bracketed : bracketed + ":" + String(port)
        poolKey = bracketed + ":" + String(port)
        headTail = Self.versionLine + Array("Host: \(hostHeader)\r\n".utf8)
    }
}
