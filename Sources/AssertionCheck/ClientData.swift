/// The client data an app signs for one HTTP request: a JSON object with string fields
/// `challenge`, `method`, `path`, `bodySHA256` (base64 SHA-256 of the exact body) and `query` when the
/// request has a query string. The gateway hashes the bytes it received and only parses them.
public struct ClientData: Sendable, Equatable {
    public static let maxBytes = 8 * 1024

    /// Each field's UTF-8 bytes, escapes decoded: a slice of the client data itself when it has no escape.
    /// They are compared with the request as bytes; the String views below are for messages and tools.
    public let challengeBytes: ArraySlice<UInt8>
    let methodBytes: ArraySlice<UInt8>
    let pathBytes: ArraySlice<UInt8>
    let queryBytes: ArraySlice<UInt8>?
    public let bodySHA256: [UInt8]

    public var challenge: String { String(decoding: challengeBytes, as: UTF8.self) }
    public var method: String { String(decoding: methodBytes, as: UTF8.self) }
    public var path: String { String(decoding: pathBytes, as: UTF8.self) }
    public var query: String? { queryBytes.map { String(decoding: $0, as: UTF8.self) } }

    public static func parse(_ bytes: [UInt8]) throws(VerificationError) -> ClientData {
        guard !bytes.isEmpty, bytes.count <= maxBytes else {
            throw VerificationError(.clientDataInvalid, "client data is \(bytes.count) bytes, expected 1...\(maxBytes)")
        }
        guard let object = JSONFields(bytes) else {
            throw VerificationError(.clientDataInvalid, "client data is not a JSON object (or repeats a member)")
        }
        func field(_ name: StaticString) throws(VerificationError) -> ArraySlice<UInt8> {
            guard case .string(let value)? = object[name] else {
                throw VerificationError(.clientDataInvalid, "client data field \"\(name)\" is missing or not a string")
            }
            return object.bytes(of: value)
        }
        let challenge = try field("challenge")
        guard !challenge.isEmpty else { throw VerificationError(.clientDataInvalid, "client data challenge is empty") }
        let encodedHash = try field("bodySHA256")
        guard let bodySHA256 = Base64.decode(utf8: encodedHash), bodySHA256.count == 32 else {
            throw VerificationError(.clientDataInvalid, "client data bodySHA256 is not base64 of 32 bytes")
        }
        let query: ArraySlice<UInt8>?
        switch object["query"] {
        case nil, .null?: query = nil
        case .string(let text)?: query = object.bytes(of: text)
        case .other?: throw VerificationError(.clientDataInvalid, "client data field \"query\" is not a string")
        }
        return ClientData(challengeBytes: challenge, methodBytes: try field("method"), pathBytes: try field("path"),
                          queryBytes: query, bodySHA256: bodySHA256)
    }
}

/// The parts of an HTTP request that client data binds.
public struct BoundRequest: Sendable {
    public let method: String
    /// The percent-decoded path, without the query.
    public let path: String
    /// The raw query string after "?", exactly as sent; nil or empty when there is none.
    public let query: String?
    public let bodySHA256: [UInt8]

    public init(method: String, path: String, query: String?, body: [UInt8]) {
        self.init(method: method, path: path, query: query, bodySHA256: SHA256.hash(body))
    }

    public init(method: String, path: String, query: String?, bodySHA256: [UInt8]) {
        self.method = method
        self.path = path
        self.query = query
        self.bodySHA256 = bodySHA256
    }
}

public enum RequestBinding {
    /// Checks that the signed client data describes this very request.
    public static func check(_ clientData: ClientData, against request: BoundRequest) throws(VerificationError) {
        guard Bytes.sameText(clientData.methodBytes, request.method) else {
            throw VerificationError(.methodMismatch, "client data method \(clientData.method) but request method \(request.method)")
        }
        guard Bytes.sameText(clientData.pathBytes, request.path) else {
            throw VerificationError(.pathMismatch, "client data path differs from the request path")
        }
        guard Bytes.sameText(clientData.queryBytes ?? [], request.query ?? "") else {
            throw VerificationError(.queryMismatch, "client data query differs from the request query string")
        }
        guard Bytes.constantTimeEqual(clientData.bodySHA256, request.bodySHA256) else {
            throw VerificationError(.bodyHashMismatch, "SHA-256 of the request body differs from client data bodySHA256")
        }
    }
}
