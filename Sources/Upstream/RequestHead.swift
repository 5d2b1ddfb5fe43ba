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
        out += method.utf8
        out.append(UInt8(ascii: " "))
        out += endpoint.pathPrefix.utf8
        out += pathAndQuery.utf8
        out += " HTTP/1.1\r\n".utf8
        if !headers.contains(where: { $0.hasName("Host") }) {
            out += "Host: ".utf8
            out += endpoint.hostHeader.utf8
            out += "\r\n".utf8
        }
        for field in headers where !field.hasName("Content-Length") && !field.hasName("Transfer-Encoding") {
            out += field.name.utf8
            out += field.value.isEmpty ? ":\r\n".utf8 : ": ".utf8
            if !field.value.isEmpty {
                out += field.value.utf8
                out += "\r\n".utf8
            }
        }
        switch framing {
        case .none: break
        case .length(let count):
            out += "Content-Length: ".utf8
            out += String(count).utf8
            out += "\r\n".utf8
        case .chunked:
            out += "Transfer-Encoding: chunked\r\n".utf8
        }
        out += "\r\n".utf8
    }
}
