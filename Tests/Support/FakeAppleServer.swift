import AssertionCheck
import Foundation
import Synchronization

/// Apple's DeviceCheck and App Attest data servers as a test sees them: real HTTP/1.1 on 127.0.0.1 (a free
/// port, `LoopbackHTTPServer`), which verifies every JWT's ES256 signature with the public half of the test key, checks request
/// bodies like Apple documents, keeps two bits per device token, and can be told to answer otherwise.
public final class FakeAppleServer: @unchecked Sendable {
    /// A scripted answer, used once, for the next request to a path (before any check).
    public enum Answer: Sendable {
        case status(Int, String)
        /// Wait this long, then answer normally.
        case slow(TimeInterval)
    }

    public struct Request: Sendable {
        public let path: String
        public let headers: [(name: String, value: String)]
        public let body: [UInt8]
        public let receivedAt: Date
        /// Whether the Authorization header held a JWT signed by the test key with the expected claims.
        public let jwtVerified: Bool

        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }

    public static let invalidPayload = "Missing or incorrectly formatted device token payload"
    public static let invalidJWT = "Unable to verify authorization token"

    public var port: Int { server.port }
    public var baseURL: String { server.baseURL }
    /// What attestationData answers with 200, base64-encoded: a real receipt Apple once returned.
    public let refreshedReceipt = RealRefreshedReceipt.bytes

    private let server: LoopbackHTTPServer
    private let teamID: String
    private let keyID: String
    private let publicKey: P256PublicKey
    private let state = Mutex(State())

    private struct State {
        var scripts: [String: [Answer]] = [:]
        var requests: [Request] = []
        var bits: [String: (bit0: Bool, bit1: Bool, month: String)] = [:]
    }

    public init(teamID: String, keyID: String, publicKey: P256PublicKey) throws {
        self.teamID = teamID
        self.keyID = keyID
        self.publicKey = publicKey
        server = try LoopbackHTTPServer()
        server.start { [weak self] request in
            guard let self else { return LoopbackHTTPServer.Response(503, "stopped") }
            let (status, text) = answer(path: request.path, headers: request.headers, body: request.body)
            return LoopbackHTTPServer.Response(status, text)
        }
    }

    deinit { stop() }

    /// Stops accepting and closes every open connection.
    public func stop() { server.stop() }

    public func script(_ path: String, _ answers: [Answer]) {
        state.withLock { $0.scripts[path, default: []] += answers }
    }

    public var requests: [Request] { state.withLock { $0.requests } }

    public func requests(to path: String) -> [Request] { requests.filter { $0.path == path } }

    // MARK: - Apple's behaviour

    private func answer(path: String, headers: [(name: String, value: String)], body: [UInt8]) -> (Int, String) {
        let authorization = headers.first { $0.name.lowercased() == "authorization" }?.value ?? ""
        let isDeviceCheck = path != "/v1/attestationData"
        let bearer = "Bearer "
        let token = isDeviceCheck ? (authorization.hasPrefix(bearer) ? String(authorization.dropFirst(bearer.count)) : "") : authorization
        let verified = verifyJWT(token)
        let scripted: Answer? = state.withLock { state in
            state.requests.append(Request(path: path, headers: headers, body: body, receivedAt: Date(), jwtVerified: verified))
            return state.scripts[path]?.isEmpty == false ? state.scripts[path]!.removeFirst() : nil
        }
        switch scripted {
        case .status(let status, let text)?: return (status, text)
        case .slow(let seconds)?: Thread.sleep(forTimeInterval: seconds)
        case nil: break
        }
        guard verified else { return (401, Self.invalidJWT) }
        switch path {
        case "/v1/attestationData":
            guard let receipt = Base64.decode(String(decoding: body, as: UTF8.self)), !receipt.isEmpty else {
                return (400, "Bad receipt")
            }
            return (200, Base64.encode(refreshedReceipt))
        case "/v1/validate_device_token", "/v1/query_two_bits", "/v1/update_two_bits":
            return deviceCheck(path: path, body: body)
        default:
            return (404, "Not Found")
        }
    }

    private func deviceCheck(path: String, body: [UInt8]) -> (Int, String) {
        guard let payload = try? JSONDecoder().decode(Payload.self, from: Data(body)),
              let token = Base64.decode(payload.device_token), !token.isEmpty, !token.starts(with: Array("bad".utf8)),
              UUID(uuidString: payload.transaction_id) != nil,
              abs(Double(payload.timestamp) / 1000 - Date().timeIntervalSince1970) < 300 else {
            return (400, Self.invalidPayload)
        }
        // Apple keeps bits per device, and a device makes a new token each time: here the device is the
        // token's bytes up to the first ":" (the whole token when there is none).
        let device = String(decoding: token.prefix { $0 != UInt8(ascii: ":") }, as: UTF8.self)
        switch path {
        case "/v1/query_two_bits":
            guard let bits = state.withLock({ $0.bits[device] }) else { return (200, "Failed to find bit state") }
            return (200, #"{"bit0":\#(bits.bit0),"bit1":\#(bits.bit1),"last_update_time":"\#(bits.month)"}"#)
        case "/v1/update_two_bits":
            guard payload.bit0 != nil || payload.bit1 != nil else { return (400, Self.invalidPayload) }
            let month = String(ISO8601DateFormatter().string(from: Date()).prefix(7))
            state.withLock { state in
                let old = state.bits[device]
                state.bits[device] = (payload.bit0 ?? old?.bit0 ?? false, payload.bit1 ?? old?.bit1 ?? false, month)
            }
            return (200, "")
        default:
            return (200, "")
        }
    }

    /// The JWT Apple expects: {"alg":"ES256","kid":…} . {"iss":…,"iat":…} . raw R||S, base64url unpadded.
    private func verifyJWT(_ token: String) -> Bool {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, parts.allSatisfy({ !$0.contains("=") && !$0.contains("+") && !$0.contains("/") }),
              let headerBytes = Base64.decode(parts[0]), let claimsBytes = Base64.decode(parts[1]),
              let signature = Base64.decode(parts[2]), signature.count == 64,
              let header = try? JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: String],
              header == ["alg": "ES256", "kid": keyID],
              let claims = try? JSONDecoder().decode(Claims.self, from: Data(claimsBytes)), claims.iss == teamID,
              abs(Double(claims.iat) - Date().timeIntervalSince1970) < 3600,
              let der = ECDSASignature.der(fromRaw: signature) else { return false }
        return publicKey.isValidSignature(der, for: Array("\(parts[0]).\(parts[1])".utf8))
    }

    private struct Claims: Decodable {
        let iss: String
        let iat: Int64
    }

    // Apple's own field names.
    private struct Payload: Decodable {
        let device_token: String
        let transaction_id: String
        let timestamp: Int64
        let bit0: Bool?
        let bit1: Bool?
    }
}
