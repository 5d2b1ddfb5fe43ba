/// How the request body is framed on the wire to the upstream; it comes from the body alone.
enum BodyFraming: Equatable {
    case none
    case length(Int)
    case chunked
}

extension UpstreamRequest {
    /// The framing curl chose for the same request: an in-memory body (or POST/PUT/PATCH) with its length, a
    /// streamed one with the client's length or chunked, HEAD none.
    func framing(upload: UpstreamUpload?) -> BodyFraming {
        if let upload { return upload.length.map(BodyFraming.length) ?? .chunked }
        if method == "HEAD" { return .none }
        return sendsBody ? .length(body.count) : .none
    }

    /// Appends the request line and header block for the event loops' own client, as bytes (no String per
    /// line): `Host` from the base URL first unless the caller sends one (preserve_host), then the caller's
    /// fields in order minus Content-Length and Transfer-Encoding (a caller's copy could disagree with the body
    /// and desynchronise the kept-alive connection), then the framing. Nothing else is added: no Accept, no
    /// User-Agent, no Expect (as the curl requests with their overrides). `validate()` ran before.
    func appendHead(to out: inout [UInt8], endpoint: PlainHTTPEndpoint, framing: BodyFraming) {
        // Room for the longest form, made once, then one pass of copies into it (an `Array.append` per piece
        // was most of what building the head cost); names are told by the code they were classified with.
        var hasHost = false, room = method.utf8.count + endpoint.pathPrefix.utf8.count + pathAndQuery.utf8.count
            + endpoint.headTail.count + 48
        for index in headers.indices {
            room += headers[index].name.utf8.count + headers[index].value.utf8.count + 4
            hasHost = hasHost || headers[index].known == .host
        }
        // What the writer reads, as locals: captured whole, the endpoint and the request were copied per call.
        let (method, prefix, target, headers) = (method, endpoint.pathPrefix, pathAndQuery, headers)
        let tail = hasHost ? PlainHTTPEndpoint.versionLine : endpoint.headTail
        out.append(addingCapacity: room) { head in
            head.append(utf8: method)
            head.append(UInt8(ascii: " "))
            head.append(utf8: prefix)
            head.append(utf8: target)
            head.append(bytes: tail)
            for index in headers.indices where headers[index].known != .contentLength && headers[index].known != .transferEncoding {
                head.append(utf8: headers[index].name)
                head.append(UInt8(ascii: ":"))
                if !headers[index].value.isEmpty {
                    head.append(UInt8(ascii: " "))
                    head.append(utf8: headers[index].value)
                }
                head.appendLineEnd()
            }
            switch framing {
            case .none: break
            case .length(let count):
                head.append(ascii: "Content-Length: ")
                head.append(decimal: count)
                head.append(ascii: "\r\n")
            case .chunked:
                head.append(ascii: "Transfer-Encoding: chunked\r\n")
            }
            head.appendLineEnd()
        }
    }
}

extension OutputSpan where Element == UInt8 {
    /// A string's UTF-8 bytes in one copy. Like every append to a span, it traps if they do not fit: the
    /// writer reserves room for its longest form first.
    @inlinable @inline(__always)
    public mutating func append(utf8 text: String) {
        let copied: Void? = text.utf8.withContiguousStorageIfAvailable { append(bytes: $0) }
        if copied == nil { for byte in text.utf8 { append(byte) } }
    }

    @inlinable @inline(__always)
    public mutating func append(ascii text: StaticString) {
        text.withUTF8Buffer { append(bytes: $0) }
    }

    @inlinable @inline(__always)
    public mutating func append(bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { append(bytes: $0) }
    }

    /// The span has no bulk append of its own.
    @inlinable @inline(__always)
    public mutating func append(bytes: UnsafeBufferPointer<UInt8>) {
        withUnsafeMutableBufferPointer { buffer, initialized in
            _ = UnsafeMutableBufferPointer(rebasing: buffer[initialized...]).initialize(fromContentsOf: bytes)
            initialized += bytes.count
        }
    }

    /// A number's decimal digits, at most 20 bytes (no String on the way), written from the last one back.
    @inlinable
    public mutating func append(decimal number: Int) {
        if number < 0 { append(UInt8(ascii: "-")) }
        var count = 1, rest = number.magnitude
        while rest >= 10 { rest /= 10; count += 1 }
        withUnsafeMutableBufferPointer { buffer, initialized in
            precondition(buffer.count - initialized >= count, "no room for the digits")
            var rest = number.magnitude, index = initialized + count
            repeat {
                index -= 1
                buffer[index] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            } while rest > 0
            initialized += count
        }
    }

    /// CR LF: two bytes (a literal's copy costs more).
    @inlinable @inline(__always)
    public mutating func appendLineEnd() {
        append(0x0D)
        append(0x0A)
    }
}
