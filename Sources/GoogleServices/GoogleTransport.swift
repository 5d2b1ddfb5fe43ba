import Foundation
import Upstream

/// The Google calls this module makes; `rawValue` is the metric label.
public enum GoogleEndpoint: String, Sendable, CaseIterable {
    /// The OAuth token endpoint (the service account's `token_uri`): assertion in, access token out.
    case token
    /// Play Integrity's decodeIntegrityToken.
    case decode
}

/// One attempt of one call, for logs and metrics. Holds no key, assertion, access token or integrity token.
public struct GoogleCall: Sendable {
    public let endpoint: GoogleEndpoint
    /// 1 for the first attempt.
    public let attempt: Int
    /// nil when no HTTP answer arrived.
    public let status: Int?
    /// Seconds from sending to the whole answer (or the failure).
    public let latency: TimeInterval
    /// "ok", or the reason code this attempt failed with (a `GoogleServiceError` code).
    public let outcome: String
    /// Whether another attempt follows.
    public let willRetry: Bool
}

public typealias GoogleCallObserver = @Sendable (GoogleCall) -> Void

/// Timeouts, retries, the observer and the clock, shared by the token exchange and the API calls.
public struct GoogleServiceOptions: Sendable {
    public var connectTimeoutMs: Int
    /// One attempt, from connect to the last body byte.
    public var timeoutMs: Int
    public var retry: RetryPolicy
    /// How long a call waits for an access-token exchange another call started before it gives up
    /// (`unavailable`); at least 1 ms.
    public var tokenWaitTimeoutMs: Int
    /// Called after every attempt, on the calling thread.
    public var observer: GoogleCallObserver?
    /// The assertion's `iat` and the access token's lifetime are reckoned with it (injectable for tests).
    public var clock: @Sendable () -> Date

    public init(connectTimeoutMs: Int = 3000, timeoutMs: Int = 10_000, retry: RetryPolicy = .standard,
                tokenWaitTimeoutMs: Int = 15_000, observer: GoogleCallObserver? = nil,
                clock: @escaping @Sendable () -> Date = { Date() }) {
        self.connectTimeoutMs = connectTimeoutMs
        self.timeoutMs = timeoutMs
        self.retry = retry
        self.tokenWaitTimeoutMs = tokenWaitTimeoutMs
        self.observer = observer
        self.clock = clock
    }
}

/// POSTs to one Google host, retrying 429, 5xx and transport failures, and reporting each attempt.
final class GoogleTransport: Sendable {
    /// Documented answers are a few KB (an access token, a verdict).
    static let maxResponseBytes = 64 * 1024
    /// Calls are sparse and a new TLS connection costs a round trip or two (curl's own default is 118 s).
    static let keepAliveMs = 60_000

    private let client: UpstreamClient
    private let options: GoogleServiceOptions

    init(baseURL: String, options: GoogleServiceOptions) throws(GoogleServiceError) {
        do throws(UpstreamError) {
            client = UpstreamClient(target: try UpstreamTarget(
                baseURL: baseURL, connectTimeoutMs: options.connectTimeoutMs, timeoutMs: options.timeoutMs,
                maxIdleConnections: 4, keepAliveMs: Self.keepAliveMs))
        } catch {
            throw .invalidConfiguration("Google URL or timeouts: \(error)")
        }
        self.options = options
    }

    /// Sends until an answer that is not 429/5xx, or the attempts run out; `decode` judges every other answer.
    func post<Value>(_ endpoint: GoogleEndpoint, path: String, headers: [HTTPField], body: [UInt8],
                     decode: (Int, [UInt8]) throws(GoogleServiceError) -> Value) async throws(GoogleServiceError) -> Value {
        let request = UpstreamRequest(method: "POST", pathAndQuery: path, headers: headers, body: body)
        var attempt = 1
        while true {
            let started = Date()
            var status: Int?
            do throws(GoogleServiceError) {
                let (code, reply) = try await fetch(request)
                status = code
                if code == 429 || (500...599).contains(code) { throw .unavailable("HTTP \(code) from \(endpoint.rawValue): \(Self.excerpt(reply))") }
                let value = try decode(code, reply)
                report(endpoint, attempt, status, started, outcome: "ok", willRetry: false)
                return value
            } catch {
                let retry: Bool
                if case .unavailable = error { retry = attempt < options.retry.maxAttempts } else { retry = false }
                report(endpoint, attempt, status, started, outcome: error.reasonCode, willRetry: retry)
                guard retry else { throw error }
            }
            let delay = options.retry.delay(afterAttempt: attempt, random: Double.random(in: 0...1))
            try? await Task.sleep(nanoseconds: UInt64(max(0, delay) * 1e9))
            attempt += 1
        }
    }

    private func fetch(_ request: UpstreamRequest) async throws(GoogleServiceError) -> (Int, [UInt8]) {
        do throws(UpstreamError) {
            let fetched = try await client.fetch(request, limit: Self.maxResponseBytes)
            return (fetched.status, fetched.body)
        } catch {
            switch error {
            case .timeout(let detail): throw .unavailable("timed out: \(detail)")
            case .unavailable(let detail), .tlsFailed(let detail), .protocolError(let detail): throw .unavailable(detail)
            case .responseTooLarge(let limit): throw .badResponse("answer larger than \(limit) bytes")
            case .invalidRequest(let detail), .invalidTarget(let detail): throw .invalidConfiguration(detail)
            }
        }
    }

    private func report(_ endpoint: GoogleEndpoint, _ attempt: Int, _ status: Int?, _ started: Date, outcome: String, willRetry: Bool) {
        options.observer?(GoogleCall(endpoint: endpoint, attempt: attempt, status: status,
                                     latency: Date().timeIntervalSince(started), outcome: outcome, willRetry: willRetry))
    }

    /// Google's error bodies are JSON (`{"error": {"status", "message"}}` from the API, `{"error",
    /// "error_description"}` from OAuth): those fields when present, else a printable prefix; bounded either way.
    static func excerpt(_ body: [UInt8]) -> String {
        var text = String(decoding: body.prefix(4096), as: UTF8.self)
        if let object = try? JSONSerialization.jsonObject(with: Data(body.prefix(4096))) as? [String: Any] {
            if let error = object["error"] as? [String: Any] {
                text = [error["status"], error["message"]].compactMap { $0 as? String }.joined(separator: ": ")
            } else if let error = object["error"] as? String {
                text = [error, object["error_description"] as? String].compactMap { $0 }.joined(separator: ": ")
            }
        }
        let printable = String(text.prefix(200).unicodeScalars.map { $0.value >= 0x20 && $0.value != 0x7F ? Character($0) : " " })
        let trimmed = printable.trimmingCharacters(in: .whitespaces)
        return trimmed.isEmpty ? "(empty body)" : "\"\(trimmed)\""
    }
}
