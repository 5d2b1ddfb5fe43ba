/// A CBOR data item to write. The simulator only produces CBOR (AssertionCheck reads it), so this is
/// just enough of RFC 8949: definite lengths, shortest heads, map entries in the given order (Apple's).
indirect enum CBORItem {
    case unsigned(UInt64)
    /// The integer -1 - n, stored as n.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBORItem])
    case map([(CBORItem, CBORItem)])

    var encoded: [UInt8] {
        var output = [UInt8]()
        write(into: &output)
        return output
    }

    private func write(into output: inout [UInt8]) {
        switch self {
        case .unsigned(let value): CBORItem.head(0, value, into: &output)
        case .negative(let value): CBORItem.head(1, value, into: &output)
        case .bytes(let value):
            CBORItem.head(2, UInt64(value.count), into: &output)
            output += value
        case .text(let value):
            CBORItem.head(3, UInt64(value.utf8.count), into: &output)
            output += value.utf8
        case .array(let items):
            CBORItem.head(4, UInt64(items.count), into: &output)
            for item in items { item.write(into: &output) }
        case .map(let entries):
            CBORItem.head(5, UInt64(entries.count), into: &output)
            for (key, value) in entries {
                key.write(into: &output)
                value.write(into: &output)
            }
        }
    }

    private static func head(_ major: UInt8, _ value: UInt64, into output: inout [UInt8]) {
        let type = major << 5
        switch value {
        case 0..<24: output.append(type | UInt8(value))
        case 24...0xFF: output += [type | 24, UInt8(value)]
        case 0x100...0xFFFF: output.append(type | 25); output += bigEndian(value, bytes: 2)
        case 0x1_0000...0xFFFF_FFFF: output.append(type | 26); output += bigEndian(value, bytes: 4)
        default: output.append(type | 27); output += bigEndian(value, bytes: 8)
        }
    }
}

/// `value`'s low `bytes` bytes, most significant first.
func bigEndian(_ value: UInt64, bytes: Int) -> [UInt8] {
    (0..<bytes).reversed().map { UInt8(truncatingIfNeeded: value >> UInt64($0 * 8)) }
}

/// The few DER structures the simulator's certificate extensions need.
enum DER {
    /// One TLV with a definite, minimal length.
    static func element(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        let count = content.count
        let length: [UInt8]
        switch count {
        case 0..<0x80: length = [UInt8(count)]
        case 0x80...0xFF: length = [0x81, UInt8(count)]
        default: length = [0x82] + bigEndian(UInt64(count), bytes: 2)
        }
        return [tag] + length + content
    }

    /// App Attest's nonce extension value: SEQUENCE { [1] EXPLICIT { OCTET STRING nonce } }.
    static func nonceExtension(_ nonce: [UInt8]) -> [UInt8] {
        element(0x30, element(0xA1, element(0x04, nonce)))
    }

    /// basicConstraints: SEQUENCE { BOOLEAN TRUE } for a CA; the empty SEQUENCE (cA DEFAULT FALSE) otherwise.
    static func basicConstraints(isCA: Bool) -> [UInt8] {
        element(0x30, isCA ? [0x01, 0x01, 0xFF] : [])
    }

    /// keyUsage BIT STRING: keyCertSign + cRLSign for CAs, digitalSignature for the device key.
    static func keyUsage(isCA: Bool) -> [UInt8] {
        isCA ? [0x03, 0x02, 0x01, 0x06] : [0x03, 0x02, 0x07, 0x80]
    }
}

/// JSON text for the client data: a flat object of string fields, written in the given order.
enum JSONText {
    static func object(_ fields: [(String, String)]) -> String {
        "{" + fields.map { string($0.0) + ":" + string($0.1) }.joined(separator: ",") + "}"
    }

    static func string(_ text: String) -> String {
        var output = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: output.unicodeScalars.append(scalar)
            }
        }
        return output + "\""
    }
}
