import Upstream

/// A route's `connect_timeout_ms`, `first_byte_timeout_ms`, `idle_timeout_ms` and `timeout_ms`: each, when
/// set, replaces its upstream's for requests of this route.
public struct RouteTimeouts: Sendable, Equatable {
    public var connectMs: Int?
    public var firstByteMs: Int?
    public var idleMs: Int?
    public var totalMs: Int?

    public init(connectMs: Int? = nil, firstByteMs: Int? = nil, idleMs: Int? = nil, totalMs: Int? = nil) {
        (self.connectMs, self.firstByteMs, self.idleMs, self.totalMs) = (connectMs, firstByteMs, idleMs, totalMs)
    }

    /// The upstream's timeouts with this route's in their place; nil when the route sets none.
    public func applied(to base: UpstreamTimeouts) -> UpstreamTimeouts? {
        guard self != RouteTimeouts() else { return nil }
        return UpstreamTimeouts(connectMs: connectMs ?? base.connectMs, firstByteMs: firstByteMs ?? base.firstByteMs,
                                idleMs: idleMs ?? base.idleMs, totalMs: totalMs ?? base.totalMs)
    }

    /// The same keys and ranges as an upstream's.
    static func read(_ section: ConfigMapping) -> RouteTimeouts {
        func key(_ name: String, _ range: ClosedRange<Int>) -> Int? {
            section.optional(name).map { _ in section.int(name, default: range.lowerBound, in: range) }
        }
        return RouteTimeouts(connectMs: key("connect_timeout_ms", UpstreamConfig.connectRange),
                             firstByteMs: key("first_byte_timeout_ms", UpstreamConfig.phaseRange),
                             idleMs: key("idle_timeout_ms", UpstreamConfig.phaseRange),
                             totalMs: key("timeout_ms", UpstreamConfig.totalRange))
    }
}
