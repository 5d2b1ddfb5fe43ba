/// The names a message's `Connection` headers list. A real message lists one to three ("close",
/// "keep-alive", "upgrade", a hop-by-hop header or two); thousands only make every relay judge each
/// header against them. Over `limit`, a request is refused (400) and an upstream response failed (502).
public enum ConnectionTokens {
    public static let limit = 32

    /// Whether the `Connection` headers hold more than `limit` non-empty list items.
    public static func exceedLimit(_ headers: [HTTPField]) -> Bool {
        // n items take at least 2n - 1 bytes (a byte each, a comma between): values this short cannot list more
        // than the limit, and are not scanned (the usual "keep-alive" never is).
        var most = 0
        for index in headers.indices where headers[index].known == .connection { most += (headers[index].value.utf8.count + 1) / 2 }
        guard most > limit else { return false }
        var count = 0
        for index in headers.indices where headers[index].known == .connection {
            var inItem = false
            // Read from the value's bytes; stops at the first item over the limit.
            let withinLimit = headers[index].value.allBytes { byte in
                if byte == UInt8(ascii: ",") {
                    inItem = false
                } else if byte != 0x20 && byte != 0x09 && !inItem {
                    inItem = true
                    count += 1
                }
                return count <= limit
            }
            if !withinLimit { return true }
        }
        return false
    }
}
