import RedisClient
import AttestStore
import EventLoop
import Gateway
import HTTPServer
import AssertionCheck
import DeviceSimulator
import Foundation
import Synchronization
import Upstream

/// `gateway bench prepare`: registers simulated devices with a running gateway, then pre-signs requests
/// for wrk to replay, each usable exactly once, one per line:
///
///     # bench-requests devices=K rounds=M route=/assert/ client_data=json
///     <device>\t<counter>\t<method>\t<path>\t<body>\t<Header: value>\t<Header: value>…
///
/// A round is every device's request with the same sign counter. Lines are round-major (all counter-1
/// requests, then all counter-2 ones, …), so a replay reading them in order
/// sends each device's counters increasing, K requests apart. `client_data: json` requests carry a fresh
/// challenge each, fetched from the gateway's /assert/challenge; `client_data: body` requests sign their
/// body and need none. `--max-requests N` stops after the first N lines (a partial last round).
struct BenchPrepare: Sendable {
    struct Plan: Sendable {
        enum Registration: Sendable {
            /// GET /attest/challenge, attestKey, POST /attest/verify: the real flow.
            case attest
            /// The key record written straight into the gateway's Redis with its own store code (for
            /// key counts too large to attest in a bench's time).
            case store(redisURL: String, keyPrefix: String)
        }

        let gatewayURL: String
        let caDirectory: String
        let outPath: String
        let devices: Int
        let rounds: Int
        let route: String
        let clientData: ClientDataSource
        let threads: Int
        let app: AppID
        let registration: Registration
        let maxRequests: Int

        var requestCount: Int { min(maxRequests, devices * rounds) }

        init(_ options: inout Arguments) throws(UsageError) {
            gatewayURL = try options.required("gateway")
            caDirectory = try options.required("ca")
            outPath = try options.required("out")
            devices = try options.integer("devices", default: 1000)
            rounds = try options.integer("requests-per-device", default: 100)
            route = try options.optional("route") ?? "/assert/"
            threads = try options.integer("threads", default: 8)
            let clientDataText = try options.optional("client-data") ?? "json"
            let appText = try options.optional("app") ?? "BENCH12345.com.example.bench"
            let registrationText = try options.optional("register") ?? "attest"
            let redisURL = try options.optional("redis")
            let keyPrefix = try options.optional("key-prefix") ?? "aag"
            maxRequests = try options.integer("max-requests", default: Int.max)
            guard maxRequests > 0 else { throw UsageError("--max-requests must be positive") }
            guard (1...10_000_000).contains(devices) else { throw UsageError("--devices must be 1...10000000") }
            guard (1...100_000).contains(rounds) else { throw UsageError("--requests-per-device must be 1...100000") }
            guard (1...256).contains(threads) else { throw UsageError("--threads must be 1...256") }
            for (name, prefix) in [("route", route)] where !Self.isPlainPrefix(prefix) {
                throw UsageError("--\(name) must be a plain path prefix like /assert/ (starting and ending with /)")
            }
            guard let source = ClientDataSource(rawValue: clientDataText) else { throw UsageError("--client-data must be json or body") }
            clientData = source
            guard let parsedApp = AppID(appText) else { throw UsageError("--app must be TEAMID.bundle.id") }
            app = parsedApp
            switch (registrationText, redisURL) {
            case ("attest", nil): registration = .attest
            case ("store", let url?): registration = .store(redisURL: url, keyPrefix: keyPrefix)
            case ("store", nil): throw UsageError("--register store needs --redis URL (the gateway's Redis)")
            case ("attest", _?): throw UsageError("--redis only goes with --register store")
            default: throw UsageError("--register must be attest or store")
            }
        }

        private static func isPlainPrefix(_ path: String) -> Bool {
            path.hasPrefix("/") && path.hasSuffix("/")
                && path.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "%") }
        }
    }

    let plan: Plan
    private let client: UpstreamClient

    init(_ plan: Plan) throws {
        self.plan = plan
        client = UpstreamClient(target: try UpstreamTarget(baseURL: plan.gatewayURL, connectTimeoutMs: 2000, timeoutMs: 10_000,
                                                           maxIdleConnections: plan.threads))
    }

    func run() throws {
        let ca = try TestCA(directory: plan.caDirectory)
        var clock = Stopwatch()
        let devices = try makeDevices(ca: ca)
        try register(devices)
        let registerSeconds = clock.lap()
        let signed = try signAll(devices)
        let signSeconds = clock.lap()
        try write(signed)
        let registeredVia = if case .attest = plan.registration { "attest" } else { "store" }
        print(JSONOutput.line([
            "devices": plan.devices, "rounds": plan.rounds, "requests": plan.requestCount, "route": plan.route,
            "client_data": plan.clientData.rawValue, "registered_via": registeredVia, "out": plan.outPath,
            "register_seconds": registerSeconds, "sign_seconds": signSeconds, "write_seconds": clock.lap(),
        ]))
    }

    // MARK: - Devices

    private func makeDevices(ca: TestCA) throws -> [SimulatedDevice] {
        let (app, count) = (plan.app, plan.devices)
        let made = try Self.onThreads(min(plan.threads, 4)) { worker, workers in
            try stride(from: worker, to: count, by: workers).map { _ in try SimulatedDevice(ca: ca, appID: app) }
        }
        return (0..<count).map { made[$0 % made.count][$0 / made.count] }
    }

    private func register(_ devices: [SimulatedDevice]) throws {
        let store: AttestStore?
        switch plan.registration {
        case .attest: store = nil
        case .store(let url, let prefix):
            // A local, plain Redis the bench starts: redis://host:port.
            guard let parts = URLComponents(string: url), let host = parts.host else { throw UsageError("--redis must be redis://host:port, got \(url)") }
            let address = RedisAddress(host: host, port: parts.port ?? 6379)
            store = try AttestStore(redis: Redis(options: RedisOptions(topology: .single(address), timeoutMs: 5000)), keyPrefix: prefix)
        }
        let progress = Progress("registered", total: devices.count)
        _ = try Self.onThreads(plan.threads) { worker, workers in
            for index in stride(from: worker, to: devices.count, by: workers) {
                if let store {
                    try storeRecord(devices[index], in: store)
                } else {
                    try attest(devices[index])
                }
                progress.advance()
            }
        }
    }

    private func attest(_ device: SimulatedDevice) throws {
        let challenge = try exchange("attest challenge", UpstreamRequest(method: "GET", pathAndQuery: "/attest/challenge"))
        _ = try exchange("attest verify", UpstreamRequest(method: "POST", pathAndQuery: "/attest/verify",
                                                          headers: [HTTPField("Content-Type", "application/json")],
                                                          body: device.registrationBody(challenge: challenge)))
    }

    private func storeRecord(_ device: SimulatedDevice, in store: AttestStore) throws {
        let record = KeyRecord(keyId: device.keyId, environment: device.environment, appID: device.appID.description,
                               publicKeySPKI: device.publicKeySPKI, counter: 0, receipt: SimulatedDevice.placeholderReceipt,
                               createdAt: Date())
        guard try store.register(record) == .created else { throw BenchPrepareError.keyAlreadyRegistered(device.keyIdBase64) }
    }

    // MARK: - Requests

    /// Each worker signs every round of its own devices (those with device % workers == worker), round
    /// by round; the last round may be partial (`--max-requests`).
    private func signAll(_ devices: [SimulatedDevice]) throws -> [[String]] {
        let (plan, count) = (self.plan, devices.count)
        let progress = Progress("signed", total: plan.requestCount)
        return try Self.onThreads(plan.threads) { worker, workers in
            var lines: [String] = []
            for round in 0..<plan.rounds {
                for index in stride(from: worker, to: count, by: workers) where round * count + index < plan.requestCount {
                    lines.append(try signedLine(devices[index], index: index, counter: 1 + round,
                                                route: plan.route, clientData: plan.clientData))
                    progress.advance()
                }
            }
            return lines
        }
    }

    private func signedLine(_ device: SimulatedDevice, index: Int, counter: Int, route: String, clientData: ClientDataSource) throws -> String {
        let path = "\(route)items/\(index)"
        switch clientData {
        case .json:
            let challengeBytes = try exchange("assert challenge",
                                              UpstreamRequest(method: "GET", pathAndQuery: "/assert/challenge?" + device.assertChallengeQuery))
            let clientData = SimulatedDevice.requestClientData(challenge: String(decoding: challengeBytes, as: UTF8.self), method: "GET",
                                                               path: path, query: nil, body: [])
            let headers = try device.assertionHeaders(clientData: clientData, counter: UInt32(counter)).map { "\($0.name): \($0.value)" }
            return (["\(index)", "\(counter)", "GET", path, ""] + headers).joined(separator: "\t")
        case .body:
            let body = #"{"device":\#(index),"counter":\#(counter)}"#
            let assertion = try device.assert(clientData: Array(body.utf8), counter: UInt32(counter))
            return ["\(index)", "\(counter)", "POST", path, body, "Content-Type: application/json", "X-App-Attest-Key-Id: \(device.keyIdBase64)",
                    "X-App-Attest-Assertion: \(Base64.encode(assertion))"].joined(separator: "\t")
        }
    }

    /// One round trip to the gateway that must answer 200; returns the body.
    private func exchange(_ step: String, _ request: UpstreamRequest) throws -> [UInt8] {
        let response = try client.send(request)
        let body = try response.readAll(limit: 1 << 20)
        guard response.status == 200 else {
            throw BenchPrepareError.gatewayRefused(step: step, status: response.status, body: String(decoding: body.prefix(300), as: UTF8.self))
        }
        return body
    }

    // MARK: - Output

    /// Round-major: line (round, device) sits in the list of worker device % workers at position
    /// round × (that worker's device count) + device / workers.
    private func write(_ perWorker: [[String]]) throws {
        let (workers, devices) = (perWorker.count, plan.devices)
        let lines = (0..<plan.requestCount).lazy.map { position in
            let (round, index) = position.quotientAndRemainder(dividingBy: devices)
            let worker = index % workers
            let workerDevices = (devices - worker + workers - 1) / workers
            return perWorker[worker][round * workerDevices + index / workers]
        }
        try write(to: plan.outPath, header: "devices=\(devices) rounds=\(plan.rounds) route=\(plan.route) client_data=\(plan.clientData.rawValue)",
                  lines: lines)
    }

    private func write(to path: String, header: String, lines: some Sequence<String>) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil), let file = FileHandle(forWritingAtPath: path) else {
            throw BenchPrepareError.outputUnwritable(path)
        }
        defer { try? file.close() }
        var chunk = "# bench-requests \(header)\n"
        for line in lines {
            chunk += line
            chunk += "\n"
            if chunk.utf8.count >= 1 << 20 {
                try file.write(contentsOf: Data(chunk.utf8))
                chunk = ""
            }
        }
        try file.write(contentsOf: Data(chunk.utf8))
    }

    // MARK: - Threads

    /// Runs `body(worker, workers)` on `count` threads of their own (HTTP round trips block, so more
    /// threads than cores help) and returns their results in worker order; rethrows the first error.
    static func onThreads<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int, Int) throws -> T) throws -> [T] {
        let results = WorkerResults<T>(count: count)
        let group = DispatchGroup()
        for worker in 0..<count {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    results.set(worker, try body(worker, count))
                } catch {
                    results.fail(error)
                }
            }.start()
        }
        group.wait()
        return try results.collect()
    }
}

/// What the workers of `onThreads` hand back.
private final class WorkerResults<T: Sendable>: Sendable {
    private let state: Mutex<(values: [T?], error: (any Error)?)>

    init(count: Int) { state = Mutex((Array(repeating: nil, count: count), nil)) }

    func set(_ worker: Int, _ value: T) { state.withLock { $0.values[worker] = value } }
    func fail(_ error: any Error) { state.withLock { if $0.error == nil { $0.error = error } } }

    func collect() throws -> [T] {
        let (values, error) = state.withLock { ($0.values, $0.error) }
        if let error { throw error }
        return values.map { $0! }
    }
}

/// "signed 30000/300000" on stderr at every tenth of the way.
private final class Progress: Sendable {
    private let label: String
    private let total: Int
    private let done = Atomic<Int>(0)

    init(_ label: String, total: Int) {
        self.label = label
        self.total = total
    }

    func advance() {
        let now = done.add(1, ordering: .relaxed).newValue
        if now == total || now % max(1, total / 10) == 0 {
            FileHandle.standardError.write(Data("bench prepare: \(label) \(now)/\(total)\n".utf8))
        }
    }
}

private struct Stopwatch {
    private var last = DispatchTime.now().uptimeNanoseconds

    /// Seconds since the previous lap (or the start), rounded to milliseconds.
    mutating func lap() -> Double {
        let now = DispatchTime.now().uptimeNanoseconds
        defer { last = now }
        return (Double(now - last) / 1e6).rounded() / 1000
    }
}

enum BenchPrepareError: Error, CustomStringConvertible {
    case gatewayRefused(step: String, status: Int, body: String)
    case keyAlreadyRegistered(String)
    case outputUnwritable(String)

    var reasonCode: String {
        switch self {
        case .gatewayRefused: "gateway_refused"
        case .keyAlreadyRegistered: "key_already_registered"
        case .outputUnwritable: "output_unwritable"
        }
    }

    var description: String {
        switch self {
        case .gatewayRefused(let step, let status, let body): "\(reasonCode): \(step) answered \(status): \(body)"
        case .keyAlreadyRegistered(let keyId): "\(reasonCode): key \(keyId) already has a record"
        case .outputUnwritable(let path): "\(reasonCode): cannot write \(path)"
        }
    }
}
