/// How long an upstream exchange may take, phase by phase, so a ten-minute stream that keeps talking is
/// fine while a silent one is not.
public struct UpstreamTimeouts: Sendable, Equatable {
    /// Until the TCP (and TLS) connection is up.
    public var connectMs: Int
    /// From sending the request until the response's status line and headers.
    public var firstByteMs: Int
    /// Longest silence between two pieces of the response body (not counted while the client is the
    /// one not reading: that is the server's send timeout).
    public var idleMs: Int
    /// The whole exchange; 0 = no total limit.
    public var totalMs: Int

    public init(connectMs: Int, firstByteMs: Int, idleMs: Int, totalMs: Int = 0) {
        self.connectMs = connectMs
        self.firstByteMs = firstByteMs
        self.idleMs = idleMs
        self.totalMs = totalMs
    }

    func validate() throws(UpstreamError) {
        guard connectMs > 0, firstByteMs > 0, idleMs > 0, totalMs >= 0 else {
            throw .invalidTarget("timeouts must be positive (connect \(connectMs) ms, first byte \(firstByteMs) ms, "
                                 + "idle \(idleMs) ms, total \(totalMs) ms)")
        }
    }
}
