import CCBOR

// The only file of AssertionCheck that touches libcbor. Untrusted input is first walked with libcbor's
// streaming decoder (which allocates nothing) to bound nesting and declared sizes, then loaded and
// copied into a Swift `CBORValue`; the libcbor tree is freed before returning.

/// A decoded CBOR data item.
public indirect enum CBORValue: Equatable, Sendable {
    case unsigned(UInt64)
    /// A negative integer -1 - n, stored as n (CBOR's own representation).
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBORValue])
    case map([CBORPair])
    case tagged(UInt64, CBORValue)
    case bool(Bool)
    case null
    case undefined
    case float(Double)

    /// The value of the first entry whose key is this text string.
    public subscript(key: String) -> CBORValue? {
        guard case .map(let pairs) = self else { return nil }
        return pairs.first { $0.key == .text(key) }?.value
    }

    /// The value of the first entry whose key is this integer (COSE keys use integer labels).
    public subscript(intKey key: Int64) -> CBORValue? {
        guard case .map(let pairs) = self else { return nil }
        let wanted: CBORValue = key >= 0 ? .unsigned(UInt64(key)) : .negative(UInt64(-1 - key))
        return pairs.first { $0.key == wanted }?.value
    }

    public var bytes: [UInt8]? {
        if case .bytes(let value) = self { return value }
        return nil
    }

    public var text: String? {
        if case .text(let value) = self { return value }
        return nil
    }
}

public struct CBORPair: Equatable, Sendable {
    public let key: CBORValue
    public let value: CBORValue
}

public enum CBORDecoder {
    /// Decodes the first CBOR item of `input` and says how many bytes it used.
    /// Throws `bad_cbor` on malformed input, nesting deeper than `maxDepth`, or a declared length
    /// that the input cannot hold (so a 5-byte input cannot make libcbor allocate gigabytes).
    public static func decodePrefix(_ input: ArraySlice<UInt8>, maxDepth: Int = 16) throws(VerificationError) -> (value: CBORValue, length: Int) {
        let bytes = Array(input)
        guard !bytes.isEmpty else { throw VerificationError(.badCBOR, "empty CBOR input") }
        let length = try Preflight.itemLength(bytes, maxDepth: maxDepth)
        var result = cbor_load_result()
        let item: UnsafeMutablePointer<cbor_item_t>? = bytes.withUnsafeBufferPointer { cbor_load($0.baseAddress, length, &result) }
        defer { release(item) }
        guard let item, result.error.code == CBOR_ERR_NONE, result.read == length else {
            throw VerificationError(.badCBOR, "malformed CBOR near byte \(result.error.position)")
        }
        return (try convert(item), length)
    }

    /// Decodes `input` as exactly one CBOR item; trailing bytes are an error.
    public static func decode(_ input: [UInt8], maxDepth: Int = 16) throws(VerificationError) -> CBORValue {
        let (value, length) = try decodePrefix(input[...], maxDepth: maxDepth)
        guard length == input.count else {
            throw VerificationError(.badCBOR, "\(input.count - length) trailing bytes after the CBOR item")
        }
        return value
    }

    /// The byte strings of `input` when it is exactly a definite map of two entries, text `first` then text
    /// `second`, each to a definite byte string; nil for anything else, which `decode` then reads in full.
    /// The shape every assertion has: read here in a few hundred instructions instead of libcbor's walk,
    /// load and copy (~13,000), with the same outcome (such a map is one `decode` accepts, with these values).
    public static func twoByteStrings(_ input: [UInt8], keys first: StaticString, _ second: StaticString) -> (ArraySlice<UInt8>, ArraySlice<UInt8>)? {
        var cursor = 0
        /// A head of `major` type with a length in the byte itself or the 1 or 2 bytes after it.
        func length(major: UInt8) -> Int? {
            guard cursor < input.count, input[cursor] >> 5 == major else { return nil }
            let info = Int(input[cursor] & 0x1F)
            cursor += 1
            switch info {
            case 0..<24: return info
            case 24 where cursor < input.count:
                cursor += 1
                return Int(input[cursor - 1])
            case 25 where cursor + 1 < input.count:
                cursor += 2
                return Int(input[cursor - 2]) << 8 | Int(input[cursor - 1])
            default: return nil
            }
        }
        func text(_ expected: StaticString) -> Bool {
            let count = expected.utf8CodeUnitCount
            guard length(major: 3) == count, input.count - cursor >= count else { return false }
            for offset in 0..<count where input[cursor + offset] != expected.utf8Start[offset] { return false }
            cursor += count
            return true
        }
        func bytes() -> ArraySlice<UInt8>? {
            guard let count = length(major: 2), input.count - cursor >= count else { return nil }
            cursor += count
            return input[(cursor - count)..<cursor]
        }
        guard input.first == 0xA2 else { return nil }
        cursor = 1
        guard text(first), let firstValue = bytes(), text(second), let secondValue = bytes(), cursor == input.count else { return nil }
        return (firstValue, secondValue)
    }

    private static func convert(_ item: UnsafeMutablePointer<cbor_item_t>) throws(VerificationError) -> CBORValue {
        switch cbor_typeof(item) {
        case CBOR_TYPE_UINT: return .unsigned(cbor_get_int(item))
        case CBOR_TYPE_NEGINT: return .negative(cbor_get_int(item))
        case CBOR_TYPE_BYTESTRING: return .bytes(stringBytes(item, definite: cbor_bytestring_is_definite(item)))
        case CBOR_TYPE_STRING:
            let raw = stringBytes(item, definite: cbor_string_is_definite(item))
            guard let text = String(validating: raw, as: UTF8.self) else {
                throw VerificationError(.badCBOR, "text string is not valid UTF-8")
            }
            return .text(text)
        case CBOR_TYPE_ARRAY:
            let count = cbor_array_size(item)
            guard count > 0, let handle = cbor_array_handle(item) else { return .array([]) }
            var elements = [CBORValue]()
            elements.reserveCapacity(count)
            for index in 0..<count {
                guard let element = handle[index] else { throw VerificationError(.badCBOR, "incomplete array") }
                elements.append(try convert(element))
            }
            return .array(elements)
        case CBOR_TYPE_MAP:
            let count = cbor_map_size(item)
            guard count > 0, let handle = cbor_map_handle(item) else { return .map([]) }
            var pairs = [CBORPair]()
            pairs.reserveCapacity(count)
            for index in 0..<count {
                guard let key = handle[index].key, let value = handle[index].value else {
                    throw VerificationError(.badCBOR, "incomplete map")
                }
                pairs.append(CBORPair(key: try convert(key), value: try convert(value)))
            }
            return .map(pairs)
        case CBOR_TYPE_TAG:
            let tagged = cbor_tag_item(item)
            defer { release(tagged) }
            guard let tagged else { throw VerificationError(.badCBOR, "empty tag") }
            return .tagged(cbor_tag_value(item), try convert(tagged))
        default:
            // Floats first: libcbor's bool/null/undefined tests assert (abort) on a float item.
            if !cbor_float_ctrl_is_ctrl(item) { return .float(cbor_float_get_float(item)) }
            if cbor_is_bool(item) { return .bool(cbor_get_bool(item)) }
            if cbor_is_null(item) { return .null }
            if cbor_is_undef(item) { return .undefined }
            throw VerificationError(.badCBOR, "unsupported simple value")
        }
    }

    private static func release(_ item: UnsafeMutablePointer<cbor_item_t>?) {
        var reference = item
        if reference != nil { cbor_decref(&reference) }
    }

    /// Byte or text string contents; indefinite strings are their chunks concatenated.
    private static func stringBytes(_ item: UnsafeMutablePointer<cbor_item_t>, definite: Bool) -> [UInt8] {
        let isText = cbor_typeof(item) == CBOR_TYPE_STRING
        if definite {
            let length = isText ? cbor_string_length(item) : cbor_bytestring_length(item)
            guard length > 0, let start = isText ? cbor_string_handle(item) : cbor_bytestring_handle(item) else { return [] }
            return Array(UnsafeBufferPointer(start: start, count: length))
        }
        let count = isText ? cbor_string_chunk_count(item) : cbor_bytestring_chunk_count(item)
        guard let chunks = isText ? cbor_string_chunks_handle(item) : cbor_bytestring_chunks_handle(item) else { return [] }
        var output = [UInt8]()
        for index in 0..<count {
            if let chunk = chunks[index] { output += stringBytes(chunk, definite: true) }
        }
        return output
    }
}

/// A walk over the encoded item with libcbor's streaming decoder: counts nesting and checks every
/// declared container size against the bytes left, before anything is allocated.
private final class Preflight {
    /// Items still expected per open container; -1 for indefinite ones (closed by a break).
    var open: [Int] = []
    var failure: String?
    let maxDepth: Int
    var bytesLeft = 0

    init(maxDepth: Int) { self.maxDepth = maxDepth }

    static func itemLength(_ bytes: [UInt8], maxDepth: Int) throws(VerificationError) -> Int {
        let walk = Preflight(maxDepth: maxDepth)
        var callbacks = Preflight.callbacks
        var offset = 0
        var finished = false
        withExtendedLifetime(walk) {
            let context = Unmanaged.passUnretained(walk).toOpaque()
            bytes.withUnsafeBufferPointer { buffer in
                while !finished, walk.failure == nil {
                    guard offset < buffer.count else {
                        walk.failure = "truncated CBOR"
                        return
                    }
                    walk.bytesLeft = buffer.count - offset
                    let result = cbor_stream_decode(buffer.baseAddress! + offset, buffer.count - offset, &callbacks, context)
                    guard result.status == CBOR_DECODER_FINISHED, result.read > 0 else {
                        walk.failure = result.status == CBOR_DECODER_NEDATA ? "truncated CBOR" : "malformed CBOR at byte \(offset)"
                        return
                    }
                    offset += result.read
                    finished = walk.open.isEmpty
                }
            }
        }
        if let failure = walk.failure { throw VerificationError(.badCBOR, failure) }
        return offset
    }

    func itemDone() {
        while let top = open.last {
            if top < 0 { return }
            if top > 1 {
                open[open.count - 1] = top - 1
                return
            }
            open.removeLast()
        }
    }

    func openContainer(_ expected: Int) {
        if open.count >= maxDepth {
            failure = failure ?? "CBOR nested deeper than \(maxDepth)"
            return
        }
        if expected == 0 { itemDone() } else { open.append(expected) }
    }

    func openSized(_ size: Int, perEntry: Int) {
        // Every entry takes at least one byte, so a size beyond the input is a lie.
        guard size <= bytesLeft / perEntry else {
            failure = failure ?? "CBOR container declares \(size) entries but the input is shorter"
            return
        }
        openContainer(size * perEntry)
    }

    func closeIndefinite() {
        guard open.last == -1 else {
            failure = failure ?? "unexpected CBOR break"
            return
        }
        open.removeLast()
        itemDone()
    }

    static func of(_ context: UnsafeMutableRawPointer?) -> Preflight {
        Unmanaged<Preflight>.fromOpaque(context!).takeUnretainedValue()
    }

    static let callbacks: cbor_callbacks = {
        var c = cbor_empty_callbacks
        c.uint8 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.uint16 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.uint32 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.uint64 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.negint8 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.negint16 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.negint32 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.negint64 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.byte_string = { ctx, _, _ in Preflight.of(ctx).itemDone() }
        c.string = { ctx, _, _ in Preflight.of(ctx).itemDone() }
        c.byte_string_start = { ctx in Preflight.of(ctx).openContainer(-1) }
        c.string_start = { ctx in Preflight.of(ctx).openContainer(-1) }
        c.indef_array_start = { ctx in Preflight.of(ctx).openContainer(-1) }
        c.indef_map_start = { ctx in Preflight.of(ctx).openContainer(-1) }
        c.array_start = { ctx, size in Preflight.of(ctx).openSized(Int(clamping: size), perEntry: 1) }
        c.map_start = { ctx, size in Preflight.of(ctx).openSized(Int(clamping: size), perEntry: 2) }
        c.tag = { ctx, _ in Preflight.of(ctx).openContainer(1) }
        c.float2 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.float4 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.float8 = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.undefined = { ctx in Preflight.of(ctx).itemDone() }
        c.null = { ctx in Preflight.of(ctx).itemDone() }
        c.boolean = { ctx, _ in Preflight.of(ctx).itemDone() }
        c.indef_break = { ctx in Preflight.of(ctx).closeIndefinite() }
        return c
    }()
}
