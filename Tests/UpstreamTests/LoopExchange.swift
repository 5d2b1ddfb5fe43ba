import EventLoop
import Upstream

/// What one exchange on an event loop gave: the head, every body byte, and how the body ended.
struct Exchanged: @unchecked Sendable {
    var status = 0
    var headers: [HTTPField] = []
    var body: [UInt8] = []
    var timing: UpstreamTiming?
    var remoteAddress: String?
    /// Why `open` or the body failed.
    var error: UpstreamError?
    var text: String { String(decoding: body, as: UTF8.self) }
    /// The body's text, or the reason the exchange failed.
    var outcome: String { error?.reasonCode ?? text }

    /// One whole exchange, on the loop the caller runs on: `open`, then the body relayed to its end.
    static func run(_ client: UpstreamClient, _ request: UpstreamRequest, upload: UpstreamUpload? = nil) async -> Exchanged {
        var result = Exchanged()
        do throws(UpstreamError) {
            guard let multi = try LoopMulti.current() else { return Exchanged(error: .unavailable("not on a loop")) }
            let stream = try await client.open(request, on: multi, upload: upload)
            (result.status, result.headers, result.timing, result.remoteAddress) = (stream.status, stream.headers, stream.timing, stream.remoteAddress)
            let body = await withCheckedContinuation { (continuation: CheckedContinuation<Unchecked<([UInt8], UpstreamError?)>, Never>) in
                var bytes: [UInt8] = []
                stream.relay(body: { bytes += $0; return true }, end: { continuation.resume(returning: Unchecked((bytes, $0))) })
            }
            (result.body, result.error) = body.value
        } catch {
            result.error = error
        }
        return result
    }
}
