import EventLoop
import Gateway
import HTTPServer
import Upstream
import AssertionCheck
import DeviceSimulator
import Foundation

/// `gateway demo ca DIR` makes the demo CA whose root `make run` passes to `serve --trust-anchor`;
/// `gateway demo apple` runs the stand-in for Apple's servers. The story itself is told by the app's
/// side: `app-demo` (`make demo`), which runs AppAttestClient as an app would.
enum DemoCommand {
    static let usage = """
    usage: gateway demo ca DIR
           gateway demo apple --key AuthKey.p8 [--listen 127.0.0.1:9100]
    (the story of the README is `make demo`: .build/release/app-demo, the iOS client library against this gateway)
    """

    static func run(_ arguments: [String]) -> Int32 {
        CommandRunner.run("demo", usage: usage) {
            var options = try Arguments(arguments)
            if options.positionals.first == "apple" {
                return try DemoAppleCommand.run(&options)
            }
            guard options.positionals.first == "ca", options.positionals.count == 2 else {
                throw UsageError("expected `demo ca DIR` or `demo apple`")
            }
            try options.rejectUnknown()
            try TestCA().save(to: options.positionals[1])
            print("demo CA written to \(options.positionals[1]) (trust it only in demos: serve --trust-anchor \(options.positionals[1])/root.pem)")
            return 0
        }
    }
}
