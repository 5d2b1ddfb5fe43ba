/// Percent-decodes a raw request path for routing, refusing every path whose meaning could differ between
/// the gateway and the upstream (which receives the raw path). A refused path is answered 400 `bad_path`.
///
/// Refused: malformed `%` escapes; NUL and every other control byte (raw or encoded: `%0A`, `%09`, `%7F`;
/// frameworks that trim them or match routes with a regex `$`, which allows a final newline, would read
/// another path); bytes that are not UTF-8 once decoded; an encoded
/// slash `%2F` (one segment here, two segments to a server that decodes it); backslashes, raw or `%5C`
/// (some servers treat them as slashes); dot segments `/./` and `/../`, also when encoded (`%2e%2e`);
/// empty segments `//` (servers that merge slashes would see another path); and anything not starting with "/".
/// All checks work on bytes, never on Swift `Character`s, whose grapheme clustering could hide a "/"
/// behind a combining mark.
public enum PathDecoding {
    public static func decode(_ rawPath: String) -> String? {
        // A native string's bytes are read in place: most paths have nothing to decode, and copying them into
        // an array first cost every request a few hundred instructions.
        switch rawPath.utf8.withContiguousStorageIfAvailable(readAsIs) ?? readAsIs(Array(rawPath.utf8)) {
        case .plain: return rawPath
        case .refused: return nil
        case .encoded: break
        }
        let raw = Array(rawPath.utf8)
        guard raw.first == UInt8(ascii: "/"), let bytes = percentDecoded(raw), hasOnlyPlainSegments(bytes) else {
            return nil
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private enum AsIs { case plain, refused, encoded }

    /// Without a `%` escape the path is its own decoding: the same checks, on the raw bytes.
    private static func readAsIs<Bytes: RandomAccessCollection<UInt8>>(_ raw: Bytes) -> AsIs where Bytes.Index == Int {
        if raw.contains(UInt8(ascii: "%")) { return .encoded }
        let plain = raw.first == UInt8(ascii: "/") && !raw.contains { $0 < 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "\\") } && hasOnlyPlainSegments(raw)
        return plain ? .plain : .refused
    }

    private static func percentDecoded(_ raw: [UInt8]) -> [UInt8]? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(raw.count)
        var index = 0
        while index < raw.count {
            var byte = raw[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < raw.count, let high = hexValue(raw[index + 1]), let low = hexValue(raw[index + 2]) else {
                    return nil
                }
                byte = high << 4 | low
                guard byte != UInt8(ascii: "/") else { return nil }
                index += 2
            }
            guard byte >= 0x20, byte != 0x7F, byte != UInt8(ascii: "\\") else { return nil }
            bytes.append(byte)
            index += 1
        }
        return bytes
    }

    /// The segments after the leading "/": none empty but the last, none "." or "..". One pass, no list.
    private static func hasOnlyPlainSegments<Bytes: RandomAccessCollection<UInt8>>(_ path: Bytes) -> Bool where Bytes.Index == Int {
        let dot = UInt8(ascii: ".")
        var start = 1
        for index in 1...max(1, path.count) where index == path.count || path[index] == UInt8(ascii: "/") {
            let length = index - start
            if length == 0 && index != path.count { return false }
            if (length == 1 && path[start] == dot) || (length == 2 && path[start] == dot && path[start + 1] == dot) { return false }
            start = index + 1
        }
        return true
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
