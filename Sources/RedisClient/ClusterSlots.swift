/// Redis Cluster's key → slot function and the slot map a node reports (CLUSTER SLOTS).
enum ClusterSlots {
    static let count = 16384

    /// CRC16 (XMODEM) of the key's hash tag — the part between the first `{` and the next `}` when that
    /// is not empty — or of the whole key, modulo 16384.
    static func slot(of key: [UInt8]) -> Int {
        var hashed = key[...]
        if let open = key.firstIndex(of: UInt8(ascii: "{")),
           let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1 {
            hashed = key[(open + 1)..<close]
        }
        var crc: UInt16 = 0
        for byte in hashed { crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)] }
        return Int(crc) % count
    }

    private static let table: [UInt16] = (0..<256).map { index in
        var crc = UInt16(index) << 8
        for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        return crc
    }

    /// What an error reply asks of a Cluster client.
    enum Redirect: Equatable {
        /// The slot lives elsewhere now: update the map.
        case moved(slot: Int, to: RedisAddress)
        /// The slot is being migrated and this key is already there: ASKING, then the command, once.
        case ask(RedisAddress)
        /// A multi-key command during a migration: retry shortly.
        case tryAgain
    }

    static func redirect(_ message: String) -> Redirect? {
        if message.hasPrefix("TRYAGAIN") { return .tryAgain }
        let words = message.split(separator: " ")
        guard words.count == 3, words[0] == "MOVED" || words[0] == "ASK", let slot = Int(words[1]), (0..<count).contains(slot),
              let colon = words[2].lastIndex(of: ":"), let port = Int(words[2][words[2].index(after: colon)...]) else { return nil }
        var host = words[2][..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        let address = RedisAddress(host: String(host), port: port)
        return words[0] == "MOVED" ? .moved(slot: slot, to: address) : .ask(address)
    }
}

/// Which primary serves each slot: an index per slot into the primaries' addresses (32 KiB, not an address
/// per slot).
struct SlotOwners {
    private static let none = UInt16.max
    private var slots = [UInt16](repeating: none, count: ClusterSlots.count)
    private(set) var primaries: [RedisAddress] = []

    init() {}

    /// From a CLUSTER SLOTS reply (`[[start, end, [host, port, id, …], replicas…], …]`); a node that reports
    /// no host is `asked` itself. Nil when the reply is not such a map.
    init?(_ reply: RedisReply, asked: RedisAddress) {
        guard case .array(let ranges) = reply else { return nil }
        for range in ranges {
            guard case .array(let fields) = range, fields.count >= 3, case .integer(let start) = fields[0],
                  case .integer(let end) = fields[1], 0 <= start, start <= end, end < ClusterSlots.count,
                  case .array(let node) = fields[2], node.count >= 2, case .string(let host) = node[0],
                  case .integer(let port) = node[1], (1...65535).contains(port) else { return nil }
            let address = host.isEmpty || host == Array("?".utf8)
                ? asked : RedisAddress(host: String(decoding: host, as: UTF8.self), port: Int(port))
            for slot in Int(start)...Int(end) { assign(slot, to: address) }
        }
    }

    var isEmpty: Bool { primaries.isEmpty }

    func owner(of slot: Int) -> RedisAddress? {
        let index = slots[slot]
        return index == Self.none ? nil : primaries[Int(index)]
    }

    mutating func assign(_ slot: Int, to address: RedisAddress) {
        guard slots.indices.contains(slot) else { return }
        if let index = primaries.firstIndex(of: address) {
            slots[slot] = UInt16(index)
        } else {
            primaries.append(address)
            slots[slot] = UInt16(primaries.count - 1)
        }
    }
}
