import AssertionCheck
import DeviceSimulator
import EventLoop
import Gateway
import HTTPServer
import Upstream
import Foundation

/// `gateway <command> …`: the one entry point of the executable.
public enum GatewayCommand {
    static let usage = """
    usage: gateway <command> [options]
      serve --config gateway.yaml      run the proxy (SIGHUP reloads, SIGTERM drains and stops)
      check-config gateway.yaml        validate a configuration file without starting
      keys show|revoke KEY_ID --config gateway.yaml   inspect or revoke a registered key
      devicecheck query|set --config gateway.yaml --token B64 [--bit0 B] [--bit1 B]   a device's DeviceCheck bits
      demo [--gateway URL]             the whole story against a running gateway (simulated iPhone)
      verify attestation|assertion …   check an App Attest object offline (prints JSON)
      bench verify [--seconds N]       assertions verified per second on one thread
      bench ca|prepare …               test CA and pre-signed requests for load tests (bench/run.sh)
      help                             this text
    """

    public static func run(_ arguments: [String]) -> Int32 {
        guard let command = arguments.first else {
            FileHandle.standardError.write(Data((usage + "\n").utf8))
            return 2
        }
        let rest = Array(arguments.dropFirst())
        switch command {
        case "serve": return ServeCommand.run(rest)
        case "check-config": return CheckConfigCommand.run(rest)
        case "keys": return KeysCommand.run(rest)
        case "demo": return DemoCommand.run(rest)
        case "devicecheck": return DeviceCheckCommand.run(rest)
        case "verify": return VerifyCommand.run(rest)
        case "bench": return BenchCommand.run(rest)
        case "help", "--help", "-h":
            print(usage)
            return 0
        default:
            FileHandle.standardError.write(Data("gateway: unknown command \"\(command)\"\n\(usage)\n".utf8))
            return 2
        }
    }
}
