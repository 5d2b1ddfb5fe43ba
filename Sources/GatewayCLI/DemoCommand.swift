import EventLoop
import Gateway
import HTTPServer
import Upstream
import AssertionCheck
import DeviceSimulator
import Foundation

/// `gateway demo ca DIR` makes the demo CA whose root `make run` passes to `serve --trust-anchor`;
/// `gateway demo apple` runs the stand-in for Apple's servers; `gateway demo play-integrity DIR` makes (or
/// keeps) the test keys that stand in for the Play Console's, which the demo app's token maker shares. The story itself is told by the app's
/// side: `app-demo` (`make demo`), which runs AppAttestClient as an app would.
enum DemoCommand {
    static let usage = """
    usage: gateway demo ca DIR
           gateway demo apple --key AuthKey.p8 [--listen 127.0.0.1:9100]
           gateway demo play-integrity DIR
    (the story of the README is `make demo`: .build/release/app-demo, the iOS client library against this gateway)
    """

    static func run(_ arguments: [String]) -> Int32 {
        CommandRunner.run("demo", usage: usage) {
            var options = try Arguments(arguments)
            if options.positionals.first == "apple" {
                return try DemoAppleCommand.run(&options)
            }
            guard ["ca", "play-integrity"].contains(options.positionals.first), options.positionals.count == 2 else {
                throw UsageError("expected `demo ca DIR`, `demo apple` or `demo play-integrity DIR`")
            }
            try options.rejectUnknown()
            if options.positionals[0] == "play-integrity" {
                _ = try PlayIntegrityTokenMaker(directory: options.positionals[1])
                print("Play Integrity test keys in \(options.positionals[1]) (decryption.key, verification.key: never on a production gateway)")
                return 0
            }
            try TestCA().save(to: options.positionals[1])
            print("demo CA written to \(options.positionals[1]) (trust it only in demos: serve --trust-anchor \(options.positionals[1])/root.pem)")
            return 0
        }
    }
}
