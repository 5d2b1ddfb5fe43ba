/// The names a message's `Connection` headers list. A real message lists one to three ("close",
/// "keep-alive", "upgrade", a hop-by-hop header or two); thousands only make every relay judge each
/// header against them. Over `limit`, a request is refused (400) and an upstream response failed (502).
public enum ConnectionTokens {
    public static let limit = 32

    /// Whether the `Connection` headers hold more than `limit` non-empty list items.
    public static func exceedLimit(_ headers: [HTTPField]) -> Bool {
        var count = 0
        for header in headers where header.known == .connection {
            var inItem = false
            for byte in header.value.utf8 {
                if byte == UInt8(ascii: ",") {
                    inItem = false
                } else if byte != 0x20 && byte != 0x09 && !inItem {
                    inItem = true
                    count += 1
                    if count > limit { return true }
                }
            }
        }
        return false
    }
}
