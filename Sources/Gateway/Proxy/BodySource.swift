import EventLoop
import HTTPServer
import Upstream

/// The request body, read from the client once and only when first needed: on assert routes after every
/// header-only check (client data, binding, key, signature), so an unsigned request never makes the
/// gateway take in its body.
final class BodySource {
    private let exchange: HTTPExchange
    private let limit: Int
    private let record: RequestRecord
    private var bytes: [UInt8]?

    init(_ exchange: HTTPExchange, limit: Int, record: RequestRecord) {
        self.exchange = exchange
        self.limit = limit
        self.record = record
    }

    /// A body already in hand (the built-in endpoints read theirs first).
    init(bytes: [UInt8], exchange: HTTPExchange, record: RequestRecord) {
        self.exchange = exchange
        self.limit = bytes.count
        self.record = record
        self.bytes = bytes
    }

    /// Why a streamed body broke off, once it did.
    private(set) var streamFailure: GatewayError?

    /// Relays the body to the upstream as it arrives (pass routes): never held whole, read no faster than
    /// the upstream takes it.
    func stream(into upload: UpstreamUpload) {
        let exchange = self.exchange
        upload.onDrained = { exchange.loop.executeOnLoop { exchange.resumeBody() } }
        exchange.streamBody(limit: limit, sink: { [record] bytes in
            record.bytesIn += bytes.count
            return upload.write(bytes)
        }, end: { [self] error in
            guard let error else { return upload.finish() }
            if case .tooLarge(let limit) = error { streamFailure = .bodyTooLarge(limit: limit) } else { streamFailure = .body(error) }
            // The upstream exchange fails (and the forward answers) on the loop's next turn: this is called from
            // inside the connection's handling of the failure, which it finishes first.
            exchange.loop.executeOnLoop { upload.abort() }
        })
    }

    /// The whole body to `done`: at once when it is in hand or there is none, else once it has arrived.
    func read(_ done: @escaping (Result<[UInt8], GatewayError>) -> Void) {
        if let result = readAtOnce() { return done(result) }
        exchange.readBody(limit: limit) { [self] result in done(took(result)) }
    }

    /// What `read` gives at once (the body in hand, or none to read); nil when it has to be waited for.
    func readAtOnce() -> Result<[UInt8], GatewayError>? {
        if let bytes { return .success(bytes) }
        return exchange.bodyAtOnce(limit: limit).map(took)
    }

    private func took(_ result: Result<[UInt8], BodyReadError>) -> Result<[UInt8], GatewayError> {
        switch result {
        case .success(let body):
            record.bytesIn = body.count
            bytes = body
            return .success(body)
        case .failure(.tooLarge(let limit)):
            return .failure(.bodyTooLarge(limit: limit))
        case .failure(let error):
            return .failure(.body(error))
        }
    }

    /// `read` for async callers (assert routes, built-in endpoints).
    nonisolated(nonsending) func read() async throws(GatewayError) -> [UInt8] {
        // Nothing to wait for: no suspension either.
        if let result = readAtOnce() { return try result.get() }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<Result<[UInt8], GatewayError>>, Never>) in
            read { continuation.resume(returning: Unchecked($0)) }
        }
        return try result.value.get()
    }
}
