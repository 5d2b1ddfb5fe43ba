/// One header field, as sent or received. Order and repeats matter, so headers are lists of these.
public struct HTTPField: Sendable, Equatable {
    public var name: String { didSet { known = KnownHeader(name) } }
    public var value: String
    /// What the name is among those the rules look for, classified once here.
    public private(set) var known: KnownHeader

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
        known = KnownHeader(name)
    }

    /// A field read off the wire: the name classified from its bytes where they lie (a parser has them at hand;
    /// classifying the String made of them looks at them again). A known name in its canonical spelling is that
    /// spelling's literal: no String made of the bytes.
    public init(name: UnsafeRawBufferPointer, value: String) {
        let (known, canonical) = KnownHeader.classifySpelling(name)
        self.name = canonical ? known.spelling : String(decoding: name, as: UTF8.self)
        self.value = value
        self.known = known
    }

    /// A header the gateway sets, in its canonical spelling (nothing to classify).
    public init(_ known: KnownHeader, _ value: String) {
        name = known.spelling
        self.value = value
        self.known = known
    }
}

extension HTTPField {
    /// tchar (RFC 9110): letters, digits and !#$%&'*+-.^_`|~ — two bit masks (constants: no lazy global
    /// to check per byte), since header names are checked per request and per byte. Inlinable, like
    /// `hasName` and `String.allBytes`: called from the other modules per header and per byte, they were
    /// calls through closures there (2,700 instructions of a relayed request); inlined, a literal name's
    /// length is known where it is compared.
    @inlinable @inline(__always)
    public static func isTokenByte(_ byte: UInt8) -> Bool {
        let low: UInt64 = 0x03FF_6CFA_0000_0000  // bytes 0–63: !#$%&'*+-. and the digits
        let high: UInt64 = 0x57FF_FFFF_C7FF_FFFE  // bytes 64–127: the letters, ^_`|~
        return byte < 64 ? low & (1 << UInt64(byte)) != 0 : byte < 128 && high & (1 << UInt64(byte - 64)) != 0
    }

    /// Whether this field is called `name`, ASCII case-insensitively (header names are ASCII tokens;
    /// Foundation's locale-aware comparison showed up in profiles at a tenth of a request, and a zip of
    /// the two views at a few percent).
    @inlinable
    public func hasName(_ name: String) -> Bool {
        guard self.name.utf8.count == name.utf8.count else { return false }
        // Native strings hand out their bytes; the views' indices are the slow path.
        let compared = self.name.utf8.withContiguousStorageIfAvailable { own in
            name.utf8.withContiguousStorageIfAvailable { other in
                own.indices.allSatisfy { Self.sameLetterOrByte(own[$0], other[$0]) }
            }
        }
        if let compared, let result = compared { return result }
        return zip(self.name.utf8, name.utf8).allSatisfy(Self.sameLetterOrByte)
    }

    @usableFromInline @inline(__always)
    static func sameLetterOrByte(_ lhs: UInt8, _ rhs: UInt8) -> Bool {
        lhs == rhs || (lhs | 0x20 == rhs | 0x20 && (lhs | 0x20) >= UInt8(ascii: "a") && (lhs | 0x20) <= UInt8(ascii: "z"))
    }
}

extension HTTPField {
    /// Whether `value` can go into a header block as it is: no CR, LF or NUL (a line break would end the field
    /// and start one of the sender's choosing). Eight bytes at a time up to the first byte below 0x0E (a tab,
    /// say), byte by byte from there.
    @inlinable
    public static func isSendableValue(_ value: String) -> Bool {
        value.utf8.withContiguousStorageIfAvailable { hasNoLineBreakOrNUL(UnsafeRawBufferPointer($0)) }
            ?? value.utf8.allSatisfy(isSendableValueByte)
    }

    @usableFromInline
    static func hasNoLineBreakOrNUL(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = ByteWord.firstMarked(in: bytes, from: 0) { ByteWord.below(0x0E, $0) }
        while offset < bytes.count {
            guard isSendableValueByte(bytes[offset]) else { return false }
            offset += 1
        }
        return true
    }

    @usableFromInline @inline(__always)
    static func isSendableValueByte(_ byte: UInt8) -> Bool { byte != 0x0D && byte != 0x0A && byte != 0 }
}

extension String {
    /// Whether every UTF-8 byte satisfies `predicate`, read from a native string's contiguous bytes: the
    /// view's per-byte indexing costs more than the checks made on header bytes.
    @inlinable
    public func allBytes(_ predicate: (UInt8) -> Bool) -> Bool {
        utf8.withContiguousStorageIfAvailable { $0.allSatisfy(predicate) } ?? utf8.allSatisfy(predicate)
    }
}

extension Array where Element == HTTPField {
    /// The values of every field called `name` (case-insensitive), in order.
    public func values(named name: String) -> [String] {
        let known = KnownHeader(name)
        if known != .other { return values(named: known) }
        return filter { $0.hasName(name) }.map(\.value)
    }

    /// The values of every field whose name is `known`, in order (by index: no field is copied to be looked at).
    public func values(named known: KnownHeader) -> [String] {
        var values: [String] = []
        for index in indices where self[index].known == known { values.append(self[index].value) }
        return values
    }
}

/// What the gateway forwards: the caller has already removed hop-by-hop headers.
public struct UpstreamRequest: Sendable, Equatable {
    public var method: String
    /// Origin-form request target, starting with "/", forwarded byte for byte ("/v1/items%2F7?x=1").
    public var pathAndQuery: String
    public var headers: [HTTPField]
    public var body: [UInt8]

    public init(method: String, pathAndQuery: String, headers: [HTTPField] = [], body: [UInt8] = []) {
        self.method = method
        self.pathAndQuery = pathAndQuery
        self.headers = headers
        self.body = body
    }
}

extension UpstreamRequest {
    /// Rejects what would break the request line or header block before anything is sent.
    func validate(upload: UpstreamUpload? = nil) throws(UpstreamError) {
        guard !method.isEmpty, method.allBytes(HTTPField.isTokenByte) else {
            throw .invalidRequest("method \"\(method)\" is not an HTTP token")
        }
        guard pathAndQuery.utf8.first == UInt8(ascii: "/"),
              pathAndQuery.allBytes({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "#") })
        else {
            throw .invalidRequest("request target \"\(pathAndQuery)\" must start with / and be printable ASCII")
        }
        // By index: a `for field in` copy retains and releases its two Strings. A known name is a token already
        // (its spelling's letters in either case, and "-"): only other names are scanned.
        for index in headers.indices {
            guard headers[index].known != .other
                    || (!headers[index].name.isEmpty && headers[index].name.allBytes(HTTPField.isTokenByte)) else {
                throw .invalidRequest("header name \"\(headers[index].name)\" is not an HTTP token")
            }
            guard HTTPField.isSendableValue(headers[index].value) else {
                throw .invalidRequest("header \(headers[index].name) has a line break or NUL in its value")
            }
        }
        let streamsBody = upload.map { $0.length != 0 } ?? false  // chunked (no length) or a length over 0
        guard Self.mayCarryBody(method) || (body.isEmpty && !streamsBody) else {
            throw .invalidRequest("a \(method) request cannot carry a body")
        }
    }

    /// GET, HEAD and TRACE carry no body, in memory or streamed: it has no meaning for them (RFC 9110 §9.3.1,
    /// §9.3.8), and an upstream that does not read it would take its bytes for the next request on the connection.
    public static func mayCarryBody(_ method: String) -> Bool {
        method != "GET" && method != "HEAD" && method != "TRACE"
    }

    /// Header lines for curl, each ended by a NUL, one after another in one buffer (no String per line):
    /// the caller's fields minus framing (that comes from the body alone: a caller's Content-Length or
    /// Transfer-Encoding could disagree with it and desynchronise the kept-alive connection), plus empty
    /// overrides that stop curl adding its own Accept, and for a request with a body its own Expect and
    /// Content-Type (curl adds those to bodies only). Values hold no NUL (`validate`).
    func curlHeaderLines(sendsBody: Bool) -> [UInt8] {
        var lines: [UInt8] = []
        lines.reserveCapacity(headers.reduce(40) { $0 + $1.name.utf8.count + $1.value.utf8.count + 3 })
        var hasAccept = false, hasContentType = false
        for field in headers {
            hasAccept = hasAccept || field.hasName("Accept")
            hasContentType = hasContentType || field.hasName("Content-Type")
            if field.hasName("Content-Length") || field.hasName("Transfer-Encoding") { continue }
            lines += field.name.utf8
            // "Name:" tells curl to drop a header; "Name;" is how it sends one with an empty value.
            if field.value.isEmpty {
                lines.append(UInt8(ascii: ";"))
            } else {
                lines += ": ".utf8
                lines += field.value.utf8
            }
            lines.append(0)
        }
        if !hasAccept { lines += "Accept:\0".utf8 }
        if sendsBody {
            lines += "Expect:\0".utf8
            if !hasContentType { lines += "Content-Type:\0".utf8 }
        }
        return lines
    }

    /// Safe to send again when it is unclear whether the upstream ran it (RFC 9110 9.2.2).
    var isIdempotent: Bool {
        // A switch: an array literal to search was an allocation per call.
        switch method {
        case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE": true
        default: false
        }
    }

    /// Whether the request carries a body (and so a Content-Length), even an empty one.
    var sendsBody: Bool {
        if !body.isEmpty { return true }
        switch method {
        case "POST", "PUT", "PATCH": return true
        default: return false
        }
    }
}
