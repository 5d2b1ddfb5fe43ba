import AppleServices
import Foundation

/// `gateway devicecheck query|set --config FILE --token B64 [--bit0 true|false] [--bit1 true|false]`:
/// an operator's view of a device's two bits, with the gateway's own Apple credentials.
public enum DeviceCheckCommand {
    public static let usage = "usage: gateway devicecheck query|set --config gateway.yaml --token <base64 device token> [--bit0 true|false] [--bit1 true|false]"

    public static func run(_ arguments: [String]) -> Int32 {
        do {
            var options = try Arguments(arguments)
            guard options.positionals.count == 1, let action = options.positionals.first, ["query", "set"].contains(action) else {
                throw UsageError("expected query or set")
            }
            let path = try options.required("config")
            let token = try options.required("token")
            let bit0 = try flag(&options, "bit0")
            let bit1 = try flag(&options, "bit1")
            try options.rejectUnknown()
            if action == "set", bit0 == nil, bit1 == nil { throw UsageError("set needs --bit0 and/or --bit1") }
            let config: GatewayConfig
            do { config = try GatewayConfig.load(path: path) } catch { throw UsageError("\(path): \(error)") }
            guard let appleConfig = config.apple else { throw UsageError("\(path) has no apple: section") }
            let apple = try AppleRuntime(config: appleConfig, log: EventLog(descriptor: STDERR_FILENO), metrics: Metrics())
            let current = try apple.deviceCheck.query(deviceToken: token)
            if action == "set" {
                try apple.deviceCheck.update(deviceToken: token, bit0: bit0 ?? current.bit0, bit1: bit1 ?? current.bit1)
                print(JSONOutput.line(["bit0": bit0 ?? current.bit0, "bit1": bit1 ?? current.bit1, "updated": true]))
            } else {
                print(JSONOutput.line(["bit0": current.bit0, "bit1": current.bit1, "last_update_time": current.lastUpdate ?? NSNull()]))
            }
            return 0
        } catch let error as UsageError {
            FileHandle.standardError.write(Data("gateway devicecheck: \(error)\n\(usage)\n".utf8))
            return 2
        } catch let error as AppleServiceError {
            print(JSONOutput.line(["error": error.reasonCode, "message": error.description]))
            return 1
        } catch {
            print(JSONOutput.line(["error": "devicecheck_failed", "message": "\(error)"]))
            return 1
        }
    }

    private static func flag(_ options: inout Arguments, _ name: String) throws(UsageError) -> Bool? {
        guard let text = try options.optional(name) else { return nil }
        guard text == "true" || text == "false" else { throw UsageError("--\(name) must be true or false") }
        return text == "true"
    }
}
