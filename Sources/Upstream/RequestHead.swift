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
        // The room is made once; names are told by the code they were classified with.
        var hasHost = false, size = method.utf8.count + endpoint.pathPrefix.utf8.count + pathAndQuery.utf8.count
            + endpoint.headTail.count + 48
        for field in headers {
            size += field.name.utf8.count + field.value.utf8.count + 4
            hasHost = hasHost || field.known == .host
        }
        out.reserveCapacity(out.count + size)
        out.appendUTF8(method)
        out.append(UInt8(ascii: " "))
        if !endpoint.pathPrefix.isEmpty { out.appendUTF8(endpoint.pathPrefix) }
        out.appendUTF8(pathAndQuery)
        out.append(contentsOf: hasHost ? PlainHTTPEndpoint.versionLine : endpoint.headTail)
        for field in headers where field.known != .contentLength && field.known != .transferEncoding {
            out.appendUTF8(field.name)
            out.append(UInt8(ascii: ":"))
            if !field.value.isEmpty {
                out.append(UInt8(ascii: " "))
                out.appendUTF8(field.value)
            }
            out.append(UInt8(ascii: "\r"))
            out.append(UInt8(ascii: "\n"))
        }
        switch framing {
        case .none: break
        case .length(let count):
            out.appendUTF8("Content-Length: ")
            out.appendUTF8(String(count))
            out.appendUTF8("\r\n")
        case .chunked:
            out.appendUTF8("Transfer-Encoding: chunked\r\n")
        }
        out.append(UInt8(ascii: "\r"))
        out.append(UInt8(ascii: "\n"))
    }
}

extension Array where Element == UInt8 {
    /// A string's bytes in one copy: appending the UTF8View goes byte by byte (a few percent of a request).
    @inlinable @inline(__always)
    public mutating func appendUTF8(_ text: String) {
        let copied: Void? = text.utf8.withContiguousStorageIfAvailable { append(contentsOf: $0) }
        if copied == nil { append(contentsOf: text.utf8) }
    }
}
