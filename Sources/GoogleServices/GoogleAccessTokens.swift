import AssertionCheck
import EventLoop
import Foundation
import Upstream

/// OAuth access tokens for one service account (RFC 7523 JWT-bearer grant): an RS256 assertion signed with the
/// account's key, exchanged at its `token_uri`. A token is reused until 5 minutes before it expires (halfway for
/// lifetimes under 10 minutes); one exchange runs at a time, and calls that need a token meanwhile wait for it
/// (at most `tokenWaitTimeoutMs`) and share its result, so a burst at expiry costs Google one exchange.
final class GoogleAccessTokens: Sendable {
    static let scope = "https://www.googleapis.com/auth/playintegrity"
    static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// What the assertion asks for, and the lifetime assumed when Google's answer names none.
    static let lifetime: TimeInterval = 3600
    static let refreshMargin: TimeInterval = 300
    /// Bearer tokens go into a header: Google's are about 1 KB.
    static let maxAccessTokenBytes = 4096

    private let account: GoogleServiceAccount
    private let transport: GoogleTransport
    private let tokenPath: String
    private let options: GoogleServiceOptions
    private let state = Locked(State())

    private typealias Outcome = Result<String, GoogleServiceError>

    private struct State {
        var current: (token: String, obtained: Date, refreshAt: Date)?
        var exchanging = false
        var waiters: [UInt64: CheckedContinuation<Outcome?, Never>] = [:]
        /// Each waiter's timeout, cancelled when the exchange answers first.
        var timers: [UInt64: Task<Void, Never>] = [:]
        var nextWaiter: UInt64 = 0
    }

    init(account: GoogleServiceAccount, options: GoogleServiceOptions) throws(GoogleServiceError) {
        guard let (base, path) = GoogleServiceAccount.splitURL(account.tokenURI) else {
            throw .invalidConfiguration("token_uri \"\(account.tokenURI.prefix(200))\" is not an http(s) URL")
        }
        guard options.tokenWaitTimeoutMs >= 1 else { throw .invalidConfiguration("the token wait timeout must be positive") }
        self.account = account
        self.options = options
        tokenPath = path
        transport = try GoogleTransport(baseURL: base, options: options)
    }

    private enum Step {
        case ready(Outcome)
        /// No token and no exchange in flight: this call exchanges.
        case exchange
        case wait(UInt64)
    }

    /// A valid access token: the cached one, the one an exchange in flight brings, or a new exchange's.
    func token() async throws(GoogleServiceError) -> String {
        let now = options.clock()
        // nil: this call is the one to exchange.
        let outcome: Outcome? = await withCheckedContinuation { continuation in
            let step = state.withLock { state -> Step in
                if let current = state.current, now >= current.obtained, now < current.refreshAt { return .ready(.success(current.token)) }
                guard state.exchanging else {
                    state.exchanging = true
                    return .exchange
                }
                state.nextWaiter += 1
                state.waiters[state.nextWaiter] = continuation
                return .wait(state.nextWaiter)
            }
            switch step {
            case .ready(let outcome): continuation.resume(returning: outcome)
            case .exchange: continuation.resume(returning: nil)
            case .wait(let id): scheduleWaitTimeout(id)
            }
        }
        if let outcome { return try outcome.get() }
        let result: Outcome
        do throws(GoogleServiceError) {
            result = .success(try await exchange())
        } catch {
            result = .failure(error)
        }
        let (waiters, timers) = state.withLock { state in
            state.exchanging = false
            defer { (state.waiters, state.timers) = ([:], [:]) }
            return (Array(state.waiters.values), Array(state.timers.values))
        }
        for timer in timers { timer.cancel() }
        for waiter in waiters { waiter.resume(returning: result) }
        return try result.get()
    }

    /// Forgets `token` after Google refused it (401), so the next call exchanges again. A newer token that
    /// another call already obtained is kept.
    func invalidate(_ token: String) {
        state.withLock { state in
            if state.current?.token == token { state.current = nil }
        }
    }

    private func scheduleWaitTimeout(_ id: UInt64) {
        let milliseconds = options.tokenWaitTimeoutMs
        let timer = Task { [state] in
            guard (try? await Task.sleep(nanoseconds: UInt64(milliseconds) * 1_000_000)) != nil else { return }
            let waiter = state.withLock { state in
                state.timers[id] = nil
                return state.waiters.removeValue(forKey: id)
            }
            waiter?.resume(returning: .failure(.unavailable(
                "no access token after waiting \(milliseconds) ms for the exchange in flight at the token endpoint")))
        }
        let waiting = state.withLock { state in
            guard state.waiters[id] != nil else { return false }
            state.timers[id] = timer
            return true
        }
        if !waiting { timer.cancel() }
    }

    private func exchange() async throws(GoogleServiceError) -> String {
        let issuedAt = options.clock()
        // The assertion is base64url and dots: nothing in it to escape.
        let body = "grant_type=" + Self.formEncoded(Self.grantType) + "&assertion=" + (try assertion(issuedAt: issuedAt))
        let (token, lifetime) = try await transport.post(
            .token, path: tokenPath, headers: [HTTPField("Content-Type", "application/x-www-form-urlencoded")],
            body: Array(body.utf8), decode: Self.accessToken)
        let usable = lifetime - min(Self.refreshMargin, lifetime / 2)
        state.withLock { $0.current = (token, issuedAt, issuedAt.addingTimeInterval(usable)) }
        return token
    }

    /// The JWT-bearer assertion: RS256 over {alg, typ, kid} . {iss, scope, aud, iat, exp}.
    func assertion(issuedAt: Date) throws(GoogleServiceError) -> String {
        let iat = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        // Key id, email and token URI are checked printable ASCII without quotes or backslashes: no escaping needed.
        let header = #"{"alg":"RS256","typ":"JWT","kid":"\#(account.privateKeyID)"}"#
        let claims = #"{"iss":"\#(account.clientEmail)","scope":"\#(Self.scope)","aud":"\#(account.tokenURI)","iat":\#(iat),"exp":\#(iat + Int64(Self.lifetime))}"#
        let signingInput = Base64.encodeURLSafe(Array(header.utf8)) + "." + Base64.encodeURLSafe(Array(claims.utf8))
        do throws(VerificationError) {
            return signingInput + "." + Base64.encodeURLSafe(try account.privateKey.rs256Signature(for: Array(signingInput.utf8)))
        } catch {
            throw .invalidConfiguration("cannot sign the assertion with key \(account.privateKeyID): \(error.message)")
        }
    }

    /// The token endpoint's answer: 200 with {"access_token", "expires_in", "token_type": "Bearer"}; 400, 401
    /// and 403 are Google refusing the account (invalid_grant, invalid_client, disabled account).
    private static func accessToken(_ status: Int, _ body: [UInt8]) throws(GoogleServiceError) -> (String, TimeInterval) {
        switch status {
        case 200: break
        case 400, 401, 403:
            throw .credentialsRefused("token endpoint answered HTTP \(status) (check the service account file, its key and that the account is enabled): \(GoogleTransport.excerpt(body))")
        default:
            throw .badResponse("token endpoint answered HTTP \(status): \(GoogleTransport.excerpt(body))")
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
              let token = object["access_token"] as? String, !token.isEmpty, token.utf8.count <= maxAccessTokenBytes,
              token.utf8.allSatisfy(GoogleServiceAccount.isVisibleASCII) else {
            throw .badResponse("token endpoint answered 200 without a usable access_token")
        }
        if let type = object["token_type"], (type as? String)?.lowercased() != "bearer" {
            throw .badResponse("token endpoint answered a token_type other than Bearer")
        }
        var lifetime = Self.lifetime
        if let expiresIn = object["expires_in"] {
            guard let seconds = (expiresIn as? NSNumber)?.doubleValue, seconds.isFinite, seconds >= 1 else {
                throw .badResponse("token endpoint answered an expires_in that is not a positive number of seconds")
            }
            lifetime = min(seconds, Self.lifetime)
        }
        return (token, lifetime)
    }

    /// application/x-www-form-urlencoded: unreserved characters as they are, every other byte %XX.
    private static func formEncoded(_ text: String) -> String {
        var encoded = ""
        for byte in text.utf8 {
            let scalar = Unicode.Scalar(byte)
            if ("0"..."9").contains(scalar) || ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || "-._~".unicodeScalars.contains(scalar) {
                encoded.unicodeScalars.append(scalar)
            } else {
                encoded += String(format: "%%%02X", byte)
            }
        }
        return encoded
    }
}
