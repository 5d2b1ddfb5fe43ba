import RedisClient
import EventLoop
import AttestStore
import AssertionCheck
import Foundation

/// `gateway check-config FILE`: validates without starting; every problem on its own line.
public enum CheckConfigCommand {
    public static let usage = "usage: gateway check-config gateway.yaml"

    public static func run(_ arguments: [String]) -> Int32 {
        guard arguments.count == 1, let path = arguments.first else {
            FileHandle.standardError.write(Data((usage + "\n").utf8))
            return 2
        }
        do {
            let config = try GatewayConfig.load(path: path)
            print("\(path): ok (\(config.routes.count) routes, \(config.upstreams.count) upstreams, apps \(config.appAttest.apps.map(\.description).joined(separator: ", ")))")
            if !config.appAttest.trustAnchor.isApple {
                print("warning: app_attest.trust_anchor is not Apple's root: simulated devices would be accepted")
            }
            if let token = config.appAttest.token {
                print("app_attest.token: signing key \(token.signingKey.file), kid \(token.signingKey.kid)"
                      + (token.previousKey.map { "; previous key \($0.file), kid \($0.kid) (still accepted)" } ?? ""))
            }
            if let play = config.playIntegrity {
                let ways = [play.localKeys.map { _ in "classic tokens decrypted here" },
                            play.serviceAccount.map { "other tokens decoded by \(play.apiURL) as \($0.clientEmail)" }].compactMap { $0 }
                print("play_integrity: packages \(play.packageNames.joined(separator: ", ")); \(ways.joined(separator: "; "))")
            }
            if let warning = config.debugTokenWarning { print("warning: \(warning)") }
            for warning in config.nearMissWarnings { print("warning: \(warning)") }
            do throws(StoreError) {
                _ = try config.redis.options()
            } catch {
                print("\(path): \(error.message)")
                return 1
            }
            if let apple = config.apple {
                if let pem = try? String(contentsOfFile: apple.privateKeyPath, encoding: .utf8) {
                    do { _ = try P256PrivateKey(pem: pem) } catch {
                        print("\(path): apple.private_key_path: \(apple.privateKeyPath) is not a P-256 private key (\(error.message))")
                        return 1
                    }
                } else {
                    print("warning: apple.private_key_path \(apple.privateKeyPath) cannot be read yet: serve will refuse to start without it")
                }
            }
            return 0
        } catch {
            for issue in error.issues { print("\(path): \(issue)") }
            return 1
        }
    }
}

/// `gateway keys show|revoke KEY_ID --config FILE [--reason TEXT]`: the stored key records.
/// `gateway keys revoke SUB --token-subject --config FILE`: the tokens minted for one Play Integrity verdict
/// (their `sub`), which has no key record.
public enum KeysCommand {
    public static let usage = "usage: gateway keys show|revoke <key_id> --config gateway.yaml [--reason TEXT] | revoke <sub> --token-subject --config gateway.yaml"

    public static func run(_ arguments: [String]) -> Int32 {
        do {
            var options = try Arguments(arguments, flagNames: ["token-subject"])
            guard options.positionals.count == 2, let action = options.positionals.first, ["show", "revoke"].contains(action) else {
                throw UsageError("expected show or revoke and a key id")
            }
            guard let keyId = Base64.decode(options.positionals[1]), keyId.count == 32 else {
                throw UsageError("the key id must be base64 of 32 bytes")
            }
            let path = try options.required("config")
            let reason = try options.optional("reason") ?? "revoked by operator"
            let subjectOnly = options.flag("token-subject")
            try options.rejectUnknown()
            if subjectOnly, action != "revoke" { throw UsageError("--token-subject goes with revoke") }
            let config: GatewayConfig
            do { config = try GatewayConfig.load(path: path) } catch { throw UsageError("\(path): \(error)") }
            let store = try GatewayRuntime.makeStore(config.redis)
            if subjectOnly { return try revokeSubject(keyId, store: store) }
            return action == "show" ? try show(keyId, store: store) : try revoke(keyId, reason: reason, store: store)
        } catch let error as UsageError {
            FileHandle.standardError.write(Data("gateway keys: \(error)\n\(usage)\n".utf8))
            return 2
        } catch {
            print(JSONOutput.line(["error": (error as? StoreError)?.reasonCode ?? "store_error", "message": "\(error)"]))
            return 1
        }
    }

    private static func show(_ keyId: [UInt8], store: AttestStore) throws -> Int32 {
        guard let record = try store.loadKey(keyId: keyId) else {
            print(JSONOutput.line(["error": "key_unknown", "message": "no record for this key id"]))
            return 1
        }
        var object: [String: Any] = [
            "key_id": Base64.encode(record.keyId), "environment": record.environment.rawValue, "app_id": record.appID,
            "counter": record.counter, "public_key": Base64.encode(record.publicKeySPKI), "receipt_bytes": record.receipt.count,
            "created_at": ISO8601DateFormatter().string(from: record.createdAt), "revoked": record.revoked,
        ]
        if let reason = record.revokedReason { object["revoked_reason"] = reason }
        if let used = record.lastUsedAt { object["last_used_at"] = ISO8601DateFormatter().string(from: used) }
        if let risk = record.riskMetric { object["risk_metric"] = risk }
        if let refreshed = record.receiptRefreshedAt { object["receipt_refreshed_at"] = ISO8601DateFormatter().string(from: refreshed) }
        print(JSONOutput.line(object))
        return 0
    }

    private static func revoke(_ keyId: [UInt8], reason: String, store: AttestStore) throws -> Int32 {
        guard try store.revoke(keyId: keyId, reason: reason) else {
            print(JSONOutput.line(["error": "key_unknown", "message": "no record for this key id"]))
            return 1
        }
        // The record stops assertions and new tokens; the announcement stops tokens already minted.
        try store.announceRevocation(keyId: keyId)
        print(JSONOutput.line(["key_id": Base64.encode(keyId), "revoked": true, "reason": reason]))
        return 0
    }

    /// No record to mark: the announcement alone stops the subject's tokens (they live at most a day).
    private static func revokeSubject(_ subject: [UInt8], store: AttestStore) throws -> Int32 {
        try store.announceRevocation(keyId: subject)
        print(JSONOutput.line(["token_subject": Base64.encode(subject), "revoked": true]))
        return 0
    }
}
