import Foundation
import Upstream

/// Google's Play Integrity API: decodeIntegrityToken, authenticated with the service account's access token.
/// Thread-safe; calls suspend rather than hold a thread (curl on the calling event loop), and each is bounded by
/// the timeouts and retries of `GoogleServiceOptions`.
public final class PlayIntegrityAPI: Sendable {
    public static let defaultURL = "https://playintegrity.googleapis.com"
    /// Real tokens are a few KB (a classic token is a JWE of about 2–4 KB).
    public static let maxIntegrityTokenBytes = 32 * 1024

    private let tokens: GoogleAccessTokens
    private let transport: GoogleTransport

    /// `apiURL`: `defaultURL`, or a fake in tests. The token endpoint is the service account's `token_uri`.
    public init(serviceAccount: GoogleServiceAccount, apiURL: String = PlayIntegrityAPI.defaultURL,
                options: GoogleServiceOptions = GoogleServiceOptions()) throws(GoogleServiceError) {
        tokens = try GoogleAccessTokens(account: serviceAccount, options: options)
        transport = try GoogleTransport(baseURL: apiURL, options: options)
    }

    /// The verdict Google decoded from `token`, as the JSON bytes of the answer's `tokenPayloadExternal` object
    /// (the caller parses and judges it). `packageName` is the app's, as in the Play Console.
    public func decodeIntegrityToken(packageName: String, token: String) async throws(GoogleServiceError) -> [UInt8] {
        guard Self.isPackageName(packageName) else {
            throw .invalidConfiguration("\"\(packageName.prefix(100))\" is not an Android package name (dot-separated letters, digits, _)")
        }
        guard !token.isEmpty, token.utf8.count <= Self.maxIntegrityTokenBytes, token.utf8.allSatisfy(GoogleServiceAccount.isVisibleASCII) else {
            throw .tokenRejected("the integrity token is not 1 to \(Self.maxIntegrityTokenBytes) bytes of printable ASCII; not sent")
        }
        guard let body = try? JSONSerialization.data(withJSONObject: ["integrity_token": token]) else {
            throw .tokenRejected("cannot encode the integrity token as JSON; not sent")
        }
        let accessToken = try await tokens.token()
        return try await transport.post(
            .decode, path: "/v1/\(packageName):decodeIntegrityToken",
            headers: [HTTPField("Authorization", "Bearer \(accessToken)"), HTTPField("Content-Type", "application/json")],
            body: Array(body)) { (status, reply) throws(GoogleServiceError) in
            switch status {
            case 200:
                guard let object = try? JSONSerialization.jsonObject(with: Data(reply)) as? [String: Any],
                      let payload = object["tokenPayloadExternal"] as? [String: Any],
                      let bytes = try? JSONSerialization.data(withJSONObject: payload) else {
                    throw .badResponse("decodeIntegrityToken answered 200 without a tokenPayloadExternal object")
                }
                return Array(bytes)
            case 400:
                throw .tokenRejected("decodeIntegrityToken answered HTTP 400: \(GoogleTransport.excerpt(reply))")
            case 401, 403:
                // A revoked or expired access token: the next call exchanges the assertion again.
                if status == 401 { tokens.invalidate(accessToken) }
                throw .credentialsRefused("decodeIntegrityToken answered HTTP \(status) (check the service account: Play Integrity API enabled in its Google Cloud project, project linked to the app in the Play Console): \(GoogleTransport.excerpt(reply))")
            default:
                throw .badResponse("decodeIntegrityToken answered HTTP \(status): \(GoogleTransport.excerpt(reply))")
            }
        }
    }

    /// An Android application id: two or more dot-separated segments, each a letter then letters, digits or _.
    static func isPackageName(_ name: String) -> Bool {
        let segments = name.split(separator: ".", omittingEmptySubsequences: false)
        return name.utf8.count <= 255 && segments.count >= 2 && segments.allSatisfy { segment in
            guard let first = segment.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic else { return false }
            return segment.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_") }
        }
    }
}
