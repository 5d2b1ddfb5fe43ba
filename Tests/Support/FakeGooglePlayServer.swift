import AssertionCheck
import Foundation
import Synchronization

/// Google's OAuth token endpoint and Play Integrity API as a test sees them: real HTTP/1.1 on 127.0.0.1 (a free port,
/// `LoopbackHTTPServer`). The token endpoint verifies the RS256 JWT-bearer assertion with the service account's public
/// key and checks its claims as Google does, then issues access tokens; decodeIntegrityToken checks the bearer is one
/// it issued and unexpired, the package name, and answers the verdict a test registered for the integrity token.
/// Either endpoint can be scripted to answer otherwise for its next calls.
public final class FakeGooglePlayServer: @unchecked Sendable {
    public enum Endpoint: String, Sendable {
        case token, decode
    }

    /// A scripted answer, used once, for the next request to an endpoint (before any check).
    public enum Answer: Sendable {
        /// This status with a Google-style JSON error body.
        case status(Int)
        /// This status and body, verbatim (JSON).
        case body(Int, String)
        /// Wait this long, then answer normally.
        case slow(TimeInterval)
        /// Close the connection without an answer.
        case drop
    }

    public struct Request: Sendable {
        public let endpoint: Endpoint?
        public let path: String
        public let headers: [(name: String, value: String)]
        public let body: [UInt8]
        public let receivedAt: Date
        /// Why the fake refused it (Google's error text), nil when it answered 200.
        public let refusal: String?

        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }

        /// The members of a form-encoded body (the token endpoint's).
        public var form: [String: String] { FakeGooglePlayServer.formMembers(body) }
    }

    public static let scope = "https://www.googleapis.com/auth/playintegrity"
    public static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"

    public var baseURL: String { server.baseURL }
    /// What the service-account file's `token_uri` must say (the assertion's audience).
    public var tokenURI: String { server.baseURL + "/token" }
    public let account: GoogleTestAccount
    /// The apps linked to the service account's project.
    public let packageNames: Set<String>

    private let server: LoopbackHTTPServer
    private let clock: @Sendable () -> Date
    private let state = Mutex(State())

    private struct State {
        var scripts: [Endpoint: [Answer]] = [:]
        var requests: [Request] = []
        var expiresIn = 3599
        var accessTokens: [String: Date] = [:]
        /// Integrity token → (package name, tokenPayloadExternal JSON).
        var verdicts: [String: (packageName: String, payload: String)] = [:]
    }

    public init(account: GoogleTestAccount = .shared, packageNames: Set<String> = ["com.example.app"],
                clock: @escaping @Sendable () -> Date = { Date() }) throws {
        self.account = account
        self.packageNames = packageNames
        self.clock = clock
        server = try LoopbackHTTPServer()
        server.start { [weak self] request in self?.answer(request) }
    }

    deinit { stop() }

    public func stop() { server.stop() }

    /// The service-account key file for this fake (with `changes`), written to a temporary file: its path.
    public func serviceAccountFile(changes: [String: Any?] = [:]) throws -> String {
        try account.writeFile(tokenURI: tokenURI, changes: changes)
    }

    public func script(_ endpoint: Endpoint, _ answers: [Answer]) {
        state.withLock { $0.scripts[endpoint, default: []] += answers }
    }

    /// The `expires_in` of access tokens issued from now on (Google's is 3599).
    public func setAccessTokenLifetime(_ seconds: Int) {
        state.withLock { $0.expiresIn = seconds }
    }

    /// Forgets every access token issued so far: Google revoked them.
    public func revokeAccessTokens() {
        state.withLock { $0.accessTokens = [:] }
    }

    /// Registers a verdict and answers the opaque standard-request token that decodes to it.
    public func standardToken(for payloadJSON: String, packageName: String = "com.example.app") -> String {
        let token = "standard." + Base64.encodeURLSafe((0..<48).map { _ in UInt8.random(in: 0...255) })
        state.withLock { $0.verdicts[token] = (packageName, payloadJSON) }
        return token
    }

    public var requests: [Request] { state.withLock { $0.requests } }

    public func requests(to endpoint: Endpoint) -> [Request] { requests.filter { $0.endpoint == endpoint } }

    // MARK: - Google's behaviour

    private func answer(_ request: LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Response? {
        let endpoint: Endpoint? = request.method != "POST" ? nil
            : request.path == "/token" ? .token : request.path.hasSuffix(":decodeIntegrityToken") ? .decode : nil
        let scripted: Answer? = endpoint.flatMap { endpoint in
            state.withLock { state in state.scripts[endpoint]?.isEmpty == false ? state.scripts[endpoint]!.removeFirst() : nil }
        }
        var response: LoopbackHTTPServer.Response?
        switch scripted {
        case .status(let status)?:
            response = Self.apiError(status, status == 429 ? "RESOURCE_EXHAUSTED" : "INTERNAL", "scripted")
        case .body(let status, let text)?:
            response = LoopbackHTTPServer.Response(status, text, contentType: "application/json")
        case .drop?:
            response = nil
        case .slow(let seconds)?:
            Thread.sleep(forTimeInterval: seconds)
            fallthrough
        case nil:
            switch endpoint {
            case .token?: response = token(request)
            case .decode?: response = decode(request)
            case nil: response = Self.apiError(404, "NOT_FOUND", "no such method")
            }
        }
        let refusal = response.flatMap { $0.status == 200 ? nil : String(decoding: $0.body, as: UTF8.self) } ?? (response == nil ? "dropped" : nil)
        state.withLock {
            $0.requests.append(Request(endpoint: endpoint, path: request.path, headers: request.headers, body: request.body,
                                       receivedAt: Date(), refusal: refusal))
        }
        return response
    }

    /// The OAuth endpoint: RFC 7523 JWT-bearer grant, checked like Google (400 invalid_grant for a bad signature or
    /// claims, 401 invalid_client for an unknown account).
    private func token(_ request: LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Response {
        guard request.header("Content-Type")?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            return Self.oauthError(400, "invalid_request", "Content-Type must be application/x-www-form-urlencoded")
        }
        let form = Self.formMembers(request.body)
        guard form["grant_type"] == Self.grantType else {
            return Self.oauthError(400, "unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")")
        }
        let parts = (form["assertion"] ?? "").split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, parts.allSatisfy({ !$0.contains("=") && !$0.contains("+") && !$0.contains("/") }),
              let headerBytes = Base64.decode(parts[0]), let claimBytes = Base64.decode(parts[1]), let signature = Base64.decode(parts[2]),
              let header = try? JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: String],
              let claims = try? JSONSerialization.jsonObject(with: Data(claimBytes)) as? [String: Any] else {
            return Self.oauthError(400, "invalid_grant", "Invalid JWT: not a JWS")
        }
        guard claims["iss"] as? String == account.clientEmail else {
            return Self.oauthError(401, "invalid_client", "The OAuth client was not found.")
        }
        guard header == ["alg": "RS256", "typ": "JWT", "kid": account.keyID],
              account.publicKey.isValidRS256Signature(signature, for: Array("\(parts[0]).\(parts[1])".utf8)) else {
            return Self.oauthError(400, "invalid_grant", "Invalid JWT Signature.")
        }
        guard claims["aud"] as? String == tokenURI else {
            return Self.oauthError(400, "invalid_grant", "Invalid JWT: Failed audience check.")
        }
        guard (claims["scope"] as? String)?.split(separator: " ").contains(Substring(Self.scope)) == true else {
            return Self.oauthError(400, "invalid_scope", "Invalid OAuth scope or ID token audience provided.")
        }
        let now = clock().timeIntervalSince1970
        guard let iat = (claims["iat"] as? NSNumber)?.doubleValue, let exp = (claims["exp"] as? NSNumber)?.doubleValue,
              exp > now, iat <= now + 60, exp - iat <= 3600, exp > iat else {
            return Self.oauthError(400, "invalid_grant",
                                   "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
        }
        let accessToken = "ya29.fake-" + Base64.encodeURLSafe((0..<32).map { _ in UInt8.random(in: 0...255) })
        let lifetime = state.withLock { state in
            state.accessTokens[accessToken] = clock().addingTimeInterval(TimeInterval(state.expiresIn))
            return state.expiresIn
        }
        return LoopbackHTTPServer.Response(
            200, #"{"access_token":"\#(accessToken)","expires_in":\#(lifetime),"token_type":"Bearer"}"#, contentType: "application/json")
    }

    /// POST /v1/{packageName}:decodeIntegrityToken.
    private func decode(_ request: LoopbackHTTPServer.Request) -> LoopbackHTTPServer.Response {
        let bearer = request.header("Authorization").flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil } ?? ""
        let now = clock()
        guard let expiry = state.withLock({ $0.accessTokens[bearer] }), now < expiry else {
            return Self.apiError(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token.")
        }
        let packageName = String(request.path.dropFirst("/v1/".count).dropLast(":decodeIntegrityToken".count))
        guard request.path.hasPrefix("/v1/"), packageNames.contains(packageName) else {
            return Self.apiError(403, "PERMISSION_DENIED", "The caller does not have permission")
        }
        guard request.header("Content-Type")?.lowercased().hasPrefix("application/json") == true,
              let body = try? JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any],
              let token = body["integrity_token"] as? String,
              let verdict = state.withLock({ $0.verdicts[token] }), verdict.packageName == packageName else {
            return Self.apiError(400, "INVALID_ARGUMENT", "Integrity token cannot be decoded due to invalid arguments.")
        }
        return LoopbackHTTPServer.Response(200, #"{"tokenPayloadExternal":\#(verdict.payload)}"#, contentType: "application/json")
    }

    private static func oauthError(_ status: Int, _ error: String, _ description: String) -> LoopbackHTTPServer.Response {
        let body = try! JSONSerialization.data(withJSONObject: ["error": error, "error_description": description])
        return LoopbackHTTPServer.Response(status, String(decoding: body, as: UTF8.self), contentType: "application/json")
    }

    private static func apiError(_ status: Int, _ code: String, _ message: String) -> LoopbackHTTPServer.Response {
        let body = try! JSONSerialization.data(withJSONObject: ["error": ["code": status, "message": message, "status": code]])
        return LoopbackHTTPServer.Response(status, String(decoding: body, as: UTF8.self), contentType: "application/json")
    }

    static func formMembers(_ body: [UInt8]) -> [String: String] {
        var members: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let decode = { (text: Substring) in text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            members[decode(parts[0])] = parts.count > 1 ? decode(parts[1]) : ""
        }
        return members
    }
}
