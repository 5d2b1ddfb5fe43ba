import AssertionCheck
import Foundation
import Upstream

/// The Apple endpoints this module calls; `rawValue` is the request path (safe to log).
public enum AppleEndpoint: String, Sendable, CaseIterable {
    case validateDeviceToken = "/v1/validate_device_token"
    case queryTwoBits = "/v1/query_two_bits"
    case updateTwoBits = "/v1/update_two_bits"
    case attestationData = "/v1/attestationData"
}

/// Production and development hosts; tests and proxies pass their own base URL instead.
public enum AppleServiceBase {
    public static func deviceCheck(_ environment: AppAttestEnvironment) -> String {
        environment == .production ? "https://api.devicecheck.apple.com" : "https://api.development.devicecheck.apple.com"
    }

    public static func appAttestData(_ environment: AppAttestEnvironment) -> String {
        environment == .production ? "https://data.appattest.apple.com" : "https://data-development.appattest.apple.com"
    }
}

/// Retries of 429, 5xx and transport failures (never of other 4xx); shared with Google's clients.
public typealias AppleRetryPolicy = RetryPolicy

/// One attempt of one call, for logs and metrics. Holds no token, key, device token or receipt.
public struct AppleCall: Sendable {
    public let endpoint: AppleEndpoint
    /// 1 for the first attempt.
    public let attempt: Int
    /// nil when no HTTP answer arrived.
    public let status: Int?
    /// Seconds from sending to the whole answer (or the failure).
    public let latency: TimeInterval
    /// "ok", or the reason code this attempt failed with (an `AppleServiceError` code).
    public let outcome: String
    /// Whether another attempt follows.
    public let willRetry: Bool
}

public typealias AppleCallObserver = @Sendable (AppleCall) -> Void

/// Timeouts, retries and the observer, shared by the clients.
public struct AppleServiceOptions: Sendable {
    public var connectTimeoutMs: Int
    /// One attempt, from connect to the last body byte.
    public var timeoutMs: Int
    public var retry: AppleRetryPolicy
    /// Called after every attempt, on the calling thread.
    public var observer: AppleCallObserver?

    public init(connectTimeoutMs: Int = 3000, timeoutMs: Int = 10_000, retry: AppleRetryPolicy = .standard,
                observer: AppleCallObserver? = nil) {
        self.connectTimeoutMs = connectTimeoutMs
        self.timeoutMs = timeoutMs
        self.retry = retry
        self.observer = observer
    }
}

/// POSTs to one Apple base URL with the JWT, retrying and reporting each attempt.
final class AppleTransport: Sendable {
    enum Authorization {
        /// DeviceCheck: "Authorization: Bearer <JWT>".
        case bearer
        /// App Attest attestationData: "Authorization: <JWT>".
        case bare
    }

    /// Documented answers are small (a receipt is ~5 KB in base64).
    static let maxResponseBytes = 256 * 1024
    /// Calls to Apple are sparse and a new TLS connection costs a round trip or two; a connection Apple closed
    /// under a call costs only one of its attempts. curl's own default is 118 s.
    static let keepAliveMs = 60_000

    private let client: UpstreamClient
    private let jwt: AppleJWT
    private let options: AppleServiceOptions

    init(baseURL: String, jwt: AppleJWT, options: AppleServiceOptions) throws(AppleServiceError) {
        do throws(UpstreamError) {
            client = UpstreamClient(target: try UpstreamTarget(
                baseURL: baseURL, connectTimeoutMs: options.connectTimeoutMs, timeoutMs: options.timeoutMs,
                maxIdleConnections: 4, keepAliveMs: Self.keepAliveMs))
        } catch {
            throw .invalidConfiguration("Apple base URL or timeouts: \(error)")
        }
        self.jwt = jwt
        self.options = options
    }

    /// Sends until an answer that is not 429/5xx, a transport success, or the attempts run out. 400 and
    /// 401 become errors here (a 401 also drops the cached JWT); every other status goes to `decode`,
    /// which throws for the ones the endpoint does not document.
    func post<Value>(_ endpoint: AppleEndpoint, body: [UInt8], contentType: String?, authorization: Authorization,
                     decode: (Int, [UInt8]) throws(AppleServiceError) -> Value) throws(AppleServiceError) -> Value {
        var attempt = 1
        while true {
            let started = Date()
            let answer = Result { () throws(AppleServiceError) in
                try exchange(endpoint, body: body, contentType: contentType, authorization: authorization)
            }
            switch settle(endpoint, attempt, started, answer, decode: decode) {
            case .done(let value): return value
            case .failed(let error): throw error
            case .retry(let delay): Thread.sleep(forTimeInterval: delay)
            }
            attempt += 1
        }
    }

    /// The same without holding a thread: curl on the calling event loop, back-off as a suspension.
    func post<Value>(_ endpoint: AppleEndpoint, body: [UInt8], contentType: String?, authorization: Authorization,
                     decode: (Int, [UInt8]) throws(AppleServiceError) -> Value) async throws(AppleServiceError) -> Value {
        var attempt = 1
        while true {
            let started = Date()
            let answer: Result<(Int, [UInt8]), AppleServiceError>
            do throws(AppleServiceError) {
                let request = try message(endpoint, body: body, contentType: contentType, authorization: authorization)
                do throws(UpstreamError) {
                    let fetched = try await client.fetch(request, limit: Self.maxResponseBytes)
                    answer = .success((fetched.status, fetched.body))
                } catch {
                    throw Self.serviceError(error)
                }
            } catch {
                answer = .failure(error)
            }
            switch settle(endpoint, attempt, started, answer, decode: decode) {
            case .done(let value): return value
            case .failed(let error): throw error
            case .retry(let delay): try? await Task.sleep(nanoseconds: UInt64(max(0, delay) * 1e9))
            }
            attempt += 1
        }
    }

    private enum Settled<Value> {
        case done(Value)
        case failed(AppleServiceError)
        /// Another attempt after this many seconds.
        case retry(TimeInterval)
    }

    /// One attempt's answer judged and reported: the value, the error, or another attempt.
    private func settle<Value>(_ endpoint: AppleEndpoint, _ attempt: Int, _ started: Date, _ answer: Result<(Int, [UInt8]), AppleServiceError>,
                               decode: (Int, [UInt8]) throws(AppleServiceError) -> Value) -> Settled<Value> {
        var status: Int?
        do throws(AppleServiceError) {
            let (code, reply) = try answer.get()
            status = code
            let value = try classify(code, reply, decode: decode)
            report(endpoint, attempt, status, started, outcome: "ok", willRetry: false)
            return .done(value)
        } catch {
            let retry = attempt < options.retry.maxAttempts && Self.isRetryable(error)
            report(endpoint, attempt, status, started, outcome: error.reasonCode, willRetry: retry)
            return retry ? .retry(options.retry.delay(afterAttempt: attempt, random: Double.random(in: 0...1))) : .failed(error)
        }
    }

    private func message(_ endpoint: AppleEndpoint, body: [UInt8], contentType: String?,
                         authorization: Authorization) throws(AppleServiceError) -> UpstreamRequest {
        let token = try jwt.token()
        var headers = [HTTPField("Authorization", authorization == .bearer ? "Bearer \(token)" : token)]
        if let contentType { headers.append(HTTPField("Content-Type", contentType)) }
        return UpstreamRequest(method: "POST", pathAndQuery: endpoint.rawValue, headers: headers, body: body)
    }

    private func exchange(_ endpoint: AppleEndpoint, body: [UInt8], contentType: String?,
                          authorization: Authorization) throws(AppleServiceError) -> (Int, [UInt8]) {
        let request = try message(endpoint, body: body, contentType: contentType, authorization: authorization)
        do throws(UpstreamError) {
            let response = try client.send(request)
            let reply = try response.readAll(limit: Self.maxResponseBytes)
            return (response.status, reply)
        } catch {
            throw Self.serviceError(error)
        }
    }

    private func classify<Value>(_ status: Int, _ body: [UInt8],
                                 decode: (Int, [UInt8]) throws(AppleServiceError) -> Value) throws(AppleServiceError) -> Value {
        switch status {
        case 400:
            throw .rejectedToken("HTTP 400: \(Self.excerpt(body))")
        case 401:
            jwt.invalidate()
            throw .authFailed("HTTP 401 (check the team id, key id and key): \(Self.excerpt(body))")
        case 429, 500...599:
            throw .unavailable("HTTP \(status): \(Self.excerpt(body))")
        default:
            return try decode(status, body)
        }
    }

    private func report(_ endpoint: AppleEndpoint, _ attempt: Int, _ status: Int?, _ started: Date, outcome: String,
                        willRetry: Bool) {
        options.observer?(AppleCall(endpoint: endpoint, attempt: attempt, status: status,
                                    latency: Date().timeIntervalSince(started), outcome: outcome, willRetry: willRetry))
    }

    private static func isRetryable(_ error: AppleServiceError) -> Bool {
        switch error {
        case .unavailable, .timeout: true
        case .rejectedToken, .authFailed, .badResponse, .invalidConfiguration: false
        }
    }

    private static func serviceError(_ error: UpstreamError) -> AppleServiceError {
        switch error {
        case .timeout(let detail): .timeout(detail)
        case .unavailable(let detail), .tlsFailed(let detail), .protocolError(let detail): .unavailable(detail)
        case .responseTooLarge(let limit): .badResponse("answer larger than \(limit) bytes")
        case .invalidRequest(let detail), .invalidTarget(let detail): .invalidConfiguration(detail)
        }
    }

    /// Apple's error bodies are short plain text; keep a printable prefix for the message.
    static func excerpt(_ body: [UInt8]) -> String {
        let text = String(decoding: body.prefix(200), as: UTF8.self)
        let printable = String(text.unicodeScalars.map { $0.value >= 0x20 && $0.value != 0x7F ? Character($0) : " " })
        let trimmed = printable.trimmingCharacters(in: .whitespaces)
        return trimmed.isEmpty ? "(empty body)" : "\"\(trimmed)\""
    }
}
