import DeviceSimulator
import Gateway
import AssertionCheck
import Dispatch
import EventLoop
import Foundation
import HTTPServer
import Synchronization
import Upstream

/// `gateway demo apple --listen ADDR --key FILE`: a stand-in for Apple's DeviceCheck and App Attest data
/// servers, for `make run` and the demo only. It checks the gateway's ES256 JWT with the public half of the
/// demo key and keeps two bits per device (the device is a token's bytes up to the first ":").
enum DemoAppleCommand {
    static func run(_ options: inout Arguments) throws -> Int32 {
        let listen = try options.optional("listen") ?? "127.0.0.1:9100"
        let keyFile = try options.required("key")
        try options.rejectUnknown()
        guard let pem = try? String(contentsOfFile: keyFile, encoding: .utf8) else { throw UsageError("cannot read \(keyFile)") }
        let handler = DemoAppleHandler(publicKey: try P256PrivateKey(pem: pem).publicKey)
        let loop = try EventLoop(name: "demo-apple")
        loop.start()
        let server = try HTTPServer(address: listen, limits: ServerLimits(workers: 1, connectionLimit: 64, maxBodyBytes: 64 * 1024),
                                    handler: handler, loops: [loop])
        let host = listen.split(separator: ":").dropLast().joined(separator: ":")
        FileHandle.standardOutput.write(Data("demo Apple stand-in listening on http://\(host):\(server.port)\n".utf8))
        let stop = DispatchSemaphore(value: 0)
        let sources = [SIGTERM, SIGINT].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { stop.signal() }
            source.resume()
            return source
        }
        stop.wait()
        sources.forEach { $0.cancel() }
        server.closeAll()
        loop.stop()
        return 0
    }
}

final class DemoAppleHandler: WholeRequestHandler, @unchecked Sendable {
    private let publicKey: P256PublicKey
    private let bits = Mutex<[String: (bit0: Bool, bit1: Bool)]>([:])

    init(publicKey: P256PublicKey) {
        self.publicKey = publicKey
    }

    func maxBodyBytes(for head: RequestHead) -> Int { 64 * 1024 }

    func respond(to request: HTTPRequest) async -> HTTPResponse {
        let authorization = request.headers.first(named: "Authorization") ?? ""
        let token = authorization.hasPrefix("Bearer ") ? String(authorization.dropFirst(7)) : authorization
        guard request.method == "POST", isSigned(token) else { return text(401, "Unable to verify authorization token") }
        if request.path == "/v1/attestationData" { return text(304, "") }  // no receipts to hand out here
        guard let object = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any],
              let deviceToken = object["device_token"] as? String, let raw = Base64.decode(deviceToken), !raw.isEmpty else {
            return text(400, "Missing or incorrectly formatted device token payload")
        }
        let device = String(decoding: raw.prefix { $0 != UInt8(ascii: ":") }, as: UTF8.self)
        switch request.path {
        case "/v1/validate_device_token":
            return text(200, "")
        case "/v1/query_two_bits":
            guard let state = bits.withLock({ $0[device] }) else { return text(200, "Failed to find bit state") }
            return text(200, JSONOutput.line(["bit0": state.bit0, "bit1": state.bit1, "last_update_time": "2026-12"]))
        case "/v1/update_two_bits":
            bits.withLock { table in
                let old = table[device] ?? (false, false)
                table[device] = ((object["bit0"] as? Bool) ?? old.bit0, (object["bit1"] as? Bool) ?? old.bit1)
            }
            return text(200, "")
        default:
            return text(404, "Not Found")
        }
    }

    /// header.claims.signature, signed ES256 (raw R||S) by the demo key.
    private func isSigned(_ jwt: String) -> Bool {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let raw = Base64.decode(parts[2]), let der = ECDSASignature.der(fromRaw: raw) else { return false }
        return publicKey.isValidSignature(der, for: Array("\(parts[0]).\(parts[1])".utf8))
    }

    private func text(_ status: Int, _ body: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: [HTTPField("Content-Type", "text/plain")], body: .bytes(Array(body.utf8)))
    }
}
