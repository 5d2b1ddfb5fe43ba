/// HMAC-SHA256 (RFC 2104) over the low-level SHA-256 (see `SHA256`): OpenSSL 3's HMAC() fetches the
/// algorithm from the provider on every call, which costs more than the MAC of a challenge. Holds key
/// material: never printed.
public struct HMACSHA256: Sendable, CustomStringConvertible, CustomReflectable {
    /// The hash states after the padded keys' block: two of a MAC's four compressions done once per key.
    private let inner: SHA256.Midstate
    private let outer: SHA256.Midstate

    /// Keys longer than SHA-256's 64-byte block are hashed first, as RFC 2104 says. `messagePrefix`: the
    /// start of every message MAC'd with this value (a domain label), hashed once here rather than
    /// prepended to each message.
    public init(key: [UInt8], messagePrefix: [UInt8] = []) {
        var block = key.count > 64 ? SHA256.hash(key) : key
        block += [UInt8](repeating: 0, count: 64 - block.count)
        inner = SHA256.Midstate(prefix: block.map { $0 ^ 0x36 } + messagePrefix)
        outer = SHA256.Midstate(prefix: block.map { $0 ^ 0x5C })
    }

    public var description: String { "HMACSHA256(<redacted>)" }
    public var customMirror: Mirror { Mirror(self, children: []) }

    public func mac(_ message: [UInt8]) -> [UInt8] {
        mac(message[...])
    }

    /// The MAC of `messagePrefix || first || second`, without building the message.
    public func mac(_ first: ArraySlice<UInt8>, _ second: [UInt8] = []) -> [UInt8] {
        digest(first, second[...]).bytes
    }

    /// The same as a value, for a constant-time compare (`SHA256.Digest.matches`) without arrays.
    public func digest(_ first: ArraySlice<UInt8>, _ second: ArraySlice<UInt8> = []) -> SHA256.Digest {
        outer.digest(inner.digest(first, second))
    }
}
