/// An upstream exchange on an event loop whose status and headers have arrived; the body follows through
/// `relay`, paced by whoever receives it. `http://` targets run on the loop's own HTTP/1.1 client, `https://`
/// ones on curl's multi handle: the backend does the work, this is what callers see.
public final class UpstreamStream: @unchecked Sendable {
    public let status: Int
    public let headers: [HTTPField]
    public let timing: UpstreamTiming
    /// The upstream's address and port as connected, for access logs.
    public let remoteAddress: String?
    private let backend: any UpstreamStreamBackend

    init(status: Int, headers: [HTTPField], timing: UpstreamTiming, remoteAddress: String?, backend: any UpstreamStreamBackend) {
        self.status = status
        self.headers = headers
        self.timing = timing
        self.remoteAddress = remoteAddress
        self.backend = backend
    }

    /// Hands every body byte to `body` (false: the receiver is full; call `resume()` when it drained),
    /// then calls `end` once: nil after the last byte, or why the body broke off.
    public func relay(body: @escaping (UnsafeRawBufferPointer) -> Bool, end: @escaping (UpstreamError?) -> Void) {
        backend.relay(body: body, end: end)
    }

    /// The receiver drained: the upstream is read again.
    public func resume() { backend.resume() }

    /// The receiver went away: the upstream connection is closed, `end` is not called.
    public func cancel() { backend.cancel() }
}

/// What carries one exchange's body after its head (curl, or the loop's own client).
protocol UpstreamStreamBackend: AnyObject {
    func relay(body: @escaping (UnsafeRawBufferPointer) -> Bool, end: @escaping (UpstreamError?) -> Void)
    func resume()
    func cancel()
}

/// Who sends an `UpstreamUpload`'s bytes on to the upstream: told there is more to take (or its end).
protocol UploadConsumer: AnyObject {
    func uploadReady()
}
