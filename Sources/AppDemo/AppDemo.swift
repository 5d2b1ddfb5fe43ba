import AppAttestClient
import DeviceSimulator
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Gateway
import SimulatedAppAttest

/// `app-demo` (`make demo`): the story of the README against a running gateway, told by what an app runs —
/// AppAttestClient's `AttestClient` — with the simulated iPhone in place of the Secure Enclave, plus the
/// requests an attacker would send.
@main
struct AppDemo {
    static let usage = "usage: app-demo [--gateway URL] [--ca DIR] [--config gateway.yaml] [--log FILE] [--path /v1/ai/generate] [--play-keys run/demo-play]"

    static func main() async {
        do {
            let options = try Options(Array(CommandLine.arguments.dropFirst()))
            let story = try Story(options)
            exit(try await story.play() ? 0 : 1)
        } catch let error as Options.UsageError {
            FileHandle.standardError.write(Data("app-demo: \(error.message)\n\(usage)\n".utf8))
            exit(2)
        } catch {
            FileHandle.standardError.write(Data("app-demo: \(error) (is the gateway running? start it with `make run`)\n".utf8))
            exit(1)
        }
    }
}

/// `--name value` pairs, each known name at most once.
struct Options {
    struct UsageError: Error { let message: String }

    let gateway: String
    let caDirectory: String
    let configPath: String
    let logPath: String
    let path: String
    let playKeyDirectory: String

    init(_ arguments: [String]) throws {
        var values: [String: String] = [:]
        var remaining = arguments[...]
        while let name = remaining.popFirst() {
            guard name.hasPrefix("--"), let value = remaining.popFirst() else { throw UsageError(message: "unexpected \(name)") }
            let key = String(name.dropFirst(2))
            guard ["gateway", "ca", "config", "log", "path", "play-keys"].contains(key), values[key] == nil else {
                throw UsageError(message: "unknown or repeated option \(name)")
            }
            values[key] = value
        }
        gateway = values["gateway"] ?? "http://127.0.0.1:8080"
        caDirectory = values["ca"] ?? "run/demo-ca"
        configPath = values["config"] ?? "gateway.yaml"
        logPath = values["log"] ?? "run/gateway.log"
        path = values["path"] ?? "/v1/ai/generate"
        playKeyDirectory = values["play-keys"] ?? "run/demo-play"
    }
}
