import AssertionCheck

/// One entry of `app_attest.debug_tokens`: a secret that stands in for App Attest on the Simulator and in CI.
/// Only its SHA-256 is configured, so the file (and whoever reads it) never holds the secret itself.
public struct DebugToken: Sendable, Equatable {
    /// Logged, counted and forwarded to the upstream (`X-Attest-Debug-Name`) in place of a key id.
    public let name: String
    public let sha256: [UInt8]

    public init(name: String, sha256: [UInt8]) {
        self.name = name
        self.sha256 = sha256
    }

    /// `debug_tokens: [{ name: ci, sha256: "<64 hex digits>" }, …]`; names and hashes unique.
    static func readAll(_ value: ConfigValue?) -> [DebugToken] {
        guard let value, let items = value.list() else { return [] }
        var tokens: [DebugToken] = []
        for item in items {
            guard let entry = item.mapping() else { continue }
            defer { entry.finish() }
            let nameValue = entry.required("name")
            let hashValue = entry.required("sha256")
            let name = nameValue?.string().flatMap { text -> String? in
                guard (1...64).contains(text.utf8.count), text.utf8.allSatisfy(isNameByte) else {
                    nameValue?.invalid("expected 1-64 characters of A-Z a-z 0-9 _ . -, got \"\(text)\"")
                    return nil
                }
                return text
            }
            let hash = hashValue?.string().flatMap { text -> [UInt8]? in
                guard let bytes = hex(text), bytes.count == 32 else {
                    hashValue?.invalid("expected the SHA-256 of the token as 64 hex digits (`printf %s TOKEN | sha256sum`)")
                    return nil
                }
                return bytes
            }
            guard let name, let hash else { continue }
            if tokens.contains(where: { $0.name == name }) {
                nameValue?.invalid("\(name) is listed twice")
            } else if tokens.contains(where: { $0.sha256 == hash }) {
                hashValue?.invalid("this hash is already listed under another name")
            } else {
                tokens.append(DebugToken(name: name, sha256: hash))
            }
        }
        return tokens
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A) || byte == 0x5F || byte == 0x2E || byte == 0x2D
    }

    private static func hex(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = nibble(digits[index]), let low = nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case 0x30...0x39: return digit - 0x30
        case 0x61...0x66: return digit - 0x61 + 10
        case 0x41...0x46: return digit - 0x41 + 10
        default: return nil
        }
    }
}

extension GatewayConfig {
    /// Debug tokens on a gateway that accepts production keys only looks like a production gateway that
    /// would let anyone holding a leaked CI secret through: `check-config` and `serve` say so.
    public var debugTokenWarning: String? {
        guard !appAttest.debugTokens.isEmpty, appAttest.environments == [.production] else { return nil }
        return "app_attest.debug_tokens is set on a gateway that accepts production keys only: "
            + "anyone with one of these tokens passes assert routes without App Attest; keep debug tokens to staging gateways"
    }
}
