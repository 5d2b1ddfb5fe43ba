import Foundation
import Synchronization

/// One JSON object per line on stdout: every request, and startup/config/connectivity events.
/// Lines are written whole with one write(2) so concurrent threads never interleave.
public final class EventLog: Sendable {
    public typealias Level = LogConfig.Level

    private let minimum: Atomic<Int>
    private let descriptor: Int32
    private let lock = Mutex(())

    public init(descriptor: Int32 = STDOUT_FILENO, level: Level = .info) {
        self.descriptor = descriptor
        self.minimum = Atomic(level.rank)
    }

    public func setLevel(_ level: Level) { minimum.store(level.rank, ordering: .relaxed) }

    /// A non-request event: `{"time":…,"level":…,"event":…, fields…}`.
    public func event(_ level: Level, _ event: String, _ fields: [String: Any] = [:]) {
        guard level.rank >= minimum.load(ordering: .relaxed) else { return }
        var object = fields
        object["time"] = EventLog.timestamp()
        object["level"] = level.rawValue
        object["event"] = event
        write(object)
    }

    /// A request line (always written: it is the audit trail); `fields` holds everything but time and event.
    func request(_ fields: JSONLine) {
        var line = JSONLine()
        line.string("time", EventLog.timestamp())
        line.string("event", "request")
        write(bytes: line.line.dropLast(2) + [UInt8(ascii: ",")] + fields.line.dropFirst())
    }

    private func write(_ object: [String: Any]) {
        write(bytes: Array((JSONOutput.line(object) + "\n").utf8))
    }

    private func write<Bytes: Collection<UInt8>>(bytes line: Bytes) {
        lock.withLock { _ in
            var bytes = Array(line)
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeMutableBytes { Foundation.write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
                if written <= 0 { if errno == EINTR { continue }; return }
                offset += written
            }
            bytes.removeAll()
        }
    }

    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, Int(now.tv_nsec / 1_000_000))
    }
}
