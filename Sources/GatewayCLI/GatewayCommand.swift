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
      serve --config gateway.yaml [--trust-anchor PEM]   run the proxy (SIGHUP reloads, SIGTERM drains and stops);
                                       --trust-anchor replaces Apple's root: tests and demos only
      check-config gateway.yaml        validate a configuration file without starting
      keys show|revoke KEY_ID --config gateway.yaml   inspect or revoke a registered key
      devicecheck query|set --config gateway.yaml --token B64 [--bit0 B] [--bit1 B]   a device's DeviceCheck bits
      demo ca DIR | apple --key K      the demo's CA and its stand-in for Apple's servers (the story: make demo)
      verify attestation|assertion …   check an App Attest object offline (prints JSON)
      bench verify [--seconds N]       assertions verified per second on one thread
      bench ca|prepare …               test CA and pre-signed requests for load tests (bench/run.sh)
      help                             this text; `gateway <command> --help`: that command's usage
    """

    /// Each command's usage, printed on stdout for `gateway <command> --help`.
    static let commandUsages: [String: String] = [
        "serve": ServeCommand.usage, "check-config": CheckConfigCommand.usage, "keys": KeysCommand.usage,
        "demo": DemoCommand.usage, "devicecheck": DeviceCheckCommand.usage, "verify": VerifyCommand.usage,
        "bench": BenchCommand.usage,
    ]

    public static func run(_ arguments: [String]) -> Int32 {
        guard let command = arguments.first else {
            FileHandle.standardError.write(Data((usage + "\n").utf8))
            return 2
        }
        let rest = Array(arguments.dropFirst())
        if let usage = commandUsages[command], rest.contains(where: { $0 == "--help" || $0 == "-h" }) {
            print(usage)
            return 0
        }
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
