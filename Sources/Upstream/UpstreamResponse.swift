/// Where the time of one exchange went, as curl measured it.
public struct UpstreamTiming: Sendable, Equatable {
    /// Until the TCP connection was up (0 on a reused connection).
    public let connectMs: Double
    /// Until the first response byte arrived.
    public let firstByteMs: Double
    /// Whether a kept-alive connection carried the request.
    public let reusedConnection: Bool
}

/// One in-flight exchange whose status and headers have arrived. Read the body with `readBody()` from
/// one thread at a time; the connection returns to the pool once the body was read to its end.
public final class UpstreamResponse {
    public let status: Int
    /// All header fields of the final response in order, repeats included (1xx responses are skipped).
    /// Values are decoded as UTF-8 (invalid bytes replaced). The body handed out is de-chunked, so
    /// Transfer-Encoding describes the upstream hop only.
    public let headers: [HTTPField]
    public let timing: UpstreamTiming
    /// The address of the connection that carried the exchange, "ip:port" ("[ip]:port" for IPv6).
    public let remoteAddress: String?
    private var transfer: CurlTransfer?
    private let pool: TransferPool
    private var failure: UpstreamError?

    init(transfer: CurlTransfer, pool: TransferPool) {
        status = transfer.status
        headers = transfer.responseHeaders
        timing = transfer.timing
        remoteAddress = transfer.remoteAddress
        self.transfer = transfer
        self.pool = pool
    }

    deinit { finish() }

    /// The next body bytes as they arrive; nil once the body is complete (or after `finish()`).
    /// A timeout, reset or truncation while streaming is thrown here, and again on later calls.
    public func readBody() throws(UpstreamError) -> [UInt8]? {
        if let failure { throw failure }
        guard let transfer else { return nil }
        do throws(UpstreamError) {
            if let chunk = try transfer.nextBodyChunk() { return chunk }
            finish()
            return nil
        } catch {
            failure = error
            self.transfer = nil  // its connection is in an unknown state: closed with the transfer
            throw error
        }
    }

    /// The whole remaining body; throws `.responseTooLarge` (and closes the connection) past `limit` bytes.
    public func readAll(limit: Int) throws(UpstreamError) -> [UInt8] {
        var body: [UInt8] = []
        while let chunk = try readBody() {
            guard body.count + chunk.count <= limit else {
                failure = .responseTooLarge(limit: limit)
                transfer = nil
                throw .responseTooLarge(limit: limit)
            }
            body += chunk
        }
        return body
    }

    /// Ends the exchange: a fully read connection goes back to the pool, an unfinished one is closed.
    /// Idempotent; deinit calls it too.
    public func finish() {
        guard let transfer else { return }
        self.transfer = nil
        if transfer.finishedCleanly { pool.checkIn(transfer) }
    }
}
