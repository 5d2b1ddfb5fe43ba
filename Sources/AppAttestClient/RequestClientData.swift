import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The client data of one signed request, built exactly as the gateway checks it: the method as sent, the
/// percent-decoded path with its trailing slash, the raw query, and SHA-256 of the exact body bytes.
struct RequestClientData {
    let method: String
    let path: String
    /// nil when the URL has no query: the member is then left out.
    let query: String?
    let bodySHA256: String

    init(_ request: URLRequest) throws(AttestClientError) {
        guard request.httpBodyStream == nil else {
            throw .invalidRequest("httpBodyStream cannot be hashed before it is sent: put the body in httpBody")
        }
        guard let url = request.url, let components = URLComponents(url: url, resolvingAgainstBaseURL: true) else {
            throw .invalidRequest("the request has no URL")
        }
        method = request.httpMethod ?? "GET"
        // Not URL.path, which drops a trailing "/"; an empty path goes out as "/".
        path = components.path.isEmpty ? "/" : components.path
        query = components.percentEncodedQuery
        bodySHA256 = SHA256.hash(request.httpBody ?? Data()).base64EncodedString()
    }

    /// Encoded once: these bytes are both hashed for the assertion and sent.
    func encoded(challenge: String) -> Data {
        var fields = [("challenge", challenge), ("method", method), ("path", path), ("bodySHA256", bodySHA256)]
        if let query { fields.append(("query", query)) }
        return Data(("{" + fields.map { JSONText.string($0.0) + ":" + JSONText.string($0.1) }.joined(separator: ",") + "}").utf8)
    }
}

enum JSONText {
    /// A JSON string literal: quotes, backslashes and control characters escaped, everything else as is.
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
