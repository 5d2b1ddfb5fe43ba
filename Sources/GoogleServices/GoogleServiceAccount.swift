import AssertionCheck
import Foundation

/// A Google service account as its JSON key file describes it: who signs (`client_email`), with which key
/// (`private_key_id`, `private_key`) and where the signed assertion is exchanged (`token_uri`). Other members of
/// the file (project_id, client_id, …) are ignored. Printing it shows the email and key id only.
public struct GoogleServiceAccount: Sendable, CustomStringConvertible {
    public let clientEmail: String
    public let privateKeyID: String
    public let privateKey: RSAPrivateKey
    /// Google's is https://oauth2.googleapis.com/token; tests point it at a fake.
    public let tokenURI: String

    /// Key files are about 2.3 KB.
    public static let maxFileBytes = 64 * 1024

    public static func load(path: String) throws(GoogleServiceError) -> GoogleServiceAccount {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw .invalidConfiguration("cannot read the service account file \(path)")
        }
        do throws(GoogleServiceError) {
            return try GoogleServiceAccount(json: Array(data))
        } catch {
            guard case .invalidConfiguration(let detail) = error else { throw error }
            throw .invalidConfiguration("service account file \(path): \(detail)")
        }
    }

    /// `json`: the content of the key file.
    public init(json: [UInt8]) throws(GoogleServiceError) {
        guard json.count <= Self.maxFileBytes else {
            throw .invalidConfiguration("larger than \(Self.maxFileBytes) bytes: not a service account key file")
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any] else {
            throw .invalidConfiguration("not a JSON object")
        }
        func field(_ name: String) throws(GoogleServiceError) -> String {
            guard let value = object[name] else { throw .invalidConfiguration("`\(name)` is missing") }
            guard let text = value as? String, !text.isEmpty else { throw .invalidConfiguration("`\(name)` must be a non-empty string") }
            return text
        }
        guard try field("type") == "service_account" else {
            throw .invalidConfiguration("`type` must be \"service_account\" (a key file of a service account, not a user or client secret)")
        }
        clientEmail = try field("client_email")
        guard clientEmail.utf8.count <= 256, clientEmail.contains("@"), clientEmail.utf8.allSatisfy(Self.isVisibleASCII),
              !clientEmail.contains("\""), !clientEmail.contains("\\") else {
            throw .invalidConfiguration("`client_email` must be an email address of printable ASCII")
        }
        privateKeyID = try field("private_key_id")
        guard privateKeyID.utf8.count <= 128, privateKeyID.utf8.allSatisfy(Self.isKeyIDByte) else {
            throw .invalidConfiguration("`private_key_id` must be up to 128 letters, digits, - or _")
        }
        let pem = try field("private_key")
        do throws(VerificationError) {
            privateKey = try RSAPrivateKey(pem: pem)
        } catch {
            // The message names the problem, never the key.
            throw .invalidConfiguration("`private_key`: \(error.message)")
        }
        tokenURI = try field("token_uri")
        guard Self.splitURL(tokenURI) != nil else {
            throw .invalidConfiguration("`token_uri` must be an http(s) URL with a host and a path, got \"\(tokenURI.prefix(200))\"")
        }
    }

    public var description: String { "GoogleServiceAccount(\(clientEmail), key \(privateKeyID))" }

    /// "https://host[:port]/path" as the base URL and the request path (at least "/").
    static func splitURL(_ url: String) -> (base: String, path: String)? {
        guard let schemeEnd = url.range(of: "://"), ["http", "https"].contains(url[..<schemeEnd.lowerBound].lowercased()),
              url.utf8.allSatisfy({ isVisibleASCII($0) && $0 != UInt8(ascii: "#") }) else { return nil }
        let rest = url[schemeEnd.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        guard !authority.isEmpty else { return nil }
        let path = String(rest.dropFirst(authority.count))
        return (String(url[..<schemeEnd.upperBound]) + authority, path.hasPrefix("/") ? path : "/" + path)
    }

    static func isVisibleASCII(_ byte: UInt8) -> Bool { byte > 0x20 && byte < 0x7F }

    private static func isKeyIDByte(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }
}
