import RedisClient
import EventLoop
import AttestStore
import Foundation
import Synchronization

/// One JSON object per line on stdout: every request, and startup/config/connectivity events.
/// Lines are written whole, in order, so concurrent threads never interleave. A buffered log (the
/// server's) appends lines to memory and a writer thread writes them every few milliseconds in one
/// write(2): a write per request under a lock made hundreds of connection threads queue on it.
public final class EventLog: Sendable {
    public typealias Level = LogConfig.Level
    /// Past this much pending output the logging thread writes it itself (back-pressure, never loss).
    static let maxPendingBytes = 1 << 20

    private let minimum: Atomic<Int>
    private let descriptor: Int32
    private let buffered: Bool
    private let pending = Locked(Pending())

    /// Lines not yet written, and the clock their timestamps come from (both under one lock).
    private struct Pending {
        var lines: [UInt8] = []
        var clock = LogClock()
    }
    /// Held while a batch is written, so batches leave in the order their lines were logged; holds the
    /// buffer `pending` swaps with, so both keep their capacity (taking a copy of `pending` and emptying
    /// it allocated a buffer of its largest size every 5 ms: an mmap and munmap each time after a burst).
    private let writing = Locked<[UInt8]>([])
    private let stopped = Atomic<Bool>(false)

    public init(descriptor: Int32 = STDOUT_FILENO, level: Level = .info, buffered: Bool = false) {
        self.descriptor = descriptor
        self.minimum = Atomic(level.rank)
        self.buffered = buffered
        if buffered {
            Thread.detachNewThread { [self] in
                while !stopped.load(ordering: .relaxed) {
                    usleep(5_000)
                    flush()
                }
            }
        }
    }

    /// Writes what is pending now (at shutdown, and before a buffered log's process exits).
    public func flush() {
        writing.withLock { batch in
            pending.withLock { swap(&$0.lines, &batch) }
            writeAll(batch)
            batch.removeAll(keepingCapacity: true)
        }
    }

    /// Flushes and stops the writer thread.
    public func close() {
        stopped.store(true, ordering: .relaxed)
        flush()
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

    /// A request line (always written, whatever the level: it is the audit trail): time, level and event,
    /// then `fields`. A buffered log builds the line in its pending buffer, under its lock (formatting only:
    /// no I/O).
    func request(level: Level, _ fields: some JSONFields) {
        guard buffered else {
            var (line, clock) = ([UInt8](), LogClock())
            JSONLine.append(RequestLine(time: clock.now(), level: level, fields: fields), to: &line)
            return write(bytes: line)
        }
        let size = pending.withLock { state in
            JSONLine.append(RequestLine(time: state.clock.now(), level: level, fields: fields), to: &state.lines)
            return state.lines.count
        }
        if size > EventLog.maxPendingBytes { flush() }
    }

    /// `"time":…,"level":…,"event":"request"`, then the request's fields.
    private struct RequestLine<Fields: JSONFields>: JSONFields {
        let time: LogTime
        let level: Level
        let fields: Fields

        func write<Line: JSONLineWriter & ~Copyable & ~Escapable>(to line: inout Line) {
            line.time("time", time)
            line.fields(level.requestEvent)
            fields.write(to: &line)
        }
    }

    private func write(_ object: [String: Any]) {
        write(bytes: Array((JSONOutput.line(object) + "\n").utf8))
    }

    private func write<Bytes: Collection<UInt8>>(bytes line: Bytes) {
        guard buffered else {
            writing.withLock { _ in writeAll(Array(line)) }
            return
        }
        let size = pending.withLock { state in
            state.lines.append(contentsOf: line)
            return state.lines.count
        }
        if size > EventLog.maxPendingBytes { flush() }
    }

    private func writeAll(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
            if written <= 0 {
                if errno == EINTR { continue }
                return
            }
            offset += written
        }
    }

    /// RFC 3339 UTC with milliseconds, written digit by digit: String(format:) (CFString formatting with
    /// boxed varargs) cost 4 % of a pass-through request.
    static func timestamp() -> String {
        var (text, clock) = ([UInt8](), LogClock())
        clock.append(to: &text)
        return String(decoding: text, as: UTF8.self)
    }

    static func timestamp(secondsSinceEpoch: Int, milliseconds: Int) -> String {
        String(decoding: timestampBytes(secondsSinceEpoch: secondsSinceEpoch, milliseconds: milliseconds), as: UTF8.self)
    }

    static func timestampBytes(secondsSinceEpoch: Int, milliseconds: Int) -> [UInt8] {
        var parts = tm()
        var seconds = secondsSinceEpoch
        gmtime_r(&seconds, &parts)
        // Written into place in a template ("0000-00-00T00:00:00.000Z"): appending byte by byte cost twice as much.
        var text = Self.timestampTemplate
        func digits(_ value: Int, width: Int, at end: Int) {
            var value = value
            for index in stride(from: end - 1, through: end - width, by: -1) {
                text[index] = UInt8(ascii: "0") + UInt8(value % 10)
                value /= 10
            }
        }
        digits(Int(parts.tm_year) + 1900, width: 4, at: 4)
        digits(Int(parts.tm_mon) + 1, width: 2, at: 7)
        digits(Int(parts.tm_mday), width: 2, at: 10)
        digits(Int(parts.tm_hour), width: 2, at: 13)
        digits(Int(parts.tm_min), width: 2, at: 16)
        digits(Int(parts.tm_sec), width: 2, at: 19)
        digits(milliseconds, width: 3, at: 23)
        return text
    }

    private static let timestampTemplate = Array("0000-00-00T00:00:00.000Z".utf8)
}

extension LogConfig.Level {
    /// `"level":"<rawValue>","event":"request"`: the constant fields after a request line's time, written with
    /// one copy.
    var requestEvent: StaticString {
        switch self {
        case .debug: #""level":"debug","event":"request""#
        case .info: #""level":"info","event":"request""#
        case .warn: #""level":"warn","event":"request""#
        case .error: #""level":"error","event":"request""#
        }
    }
}

/// The time now as RFC 3339 UTC with milliseconds, the date and time of day formatted once a second (gmtime_r
/// and twenty digits per request line were a thousand instructions of a relayed request).
struct LogClock {
    /// Bytes of "YYYY-MM-DDTHH:MM:SS.mmmZ".
    static let width = 24
    private var second = Int.min
    /// "YYYY-MM-DDTHH:MM:SS." of `second`.
    private var prefix = LogTime.Prefix(0, 0, 0)

    mutating func append(to text: inout [UInt8]) {
        let time = now()
        text.append(addingCapacity: LogClock.width) { out in
            out.withUnsafeMutableBufferPointer { buffer, initialized in
                precondition(buffer.count - initialized >= LogClock.width)
                initialized += time.write(at: buffer.baseAddress! + initialized)
            }
        }
    }

    mutating func now() -> LogTime {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        if now.tv_sec != second {
            second = now.tv_sec
            prefix = EventLog.timestampBytes(secondsSinceEpoch: now.tv_sec, milliseconds: 0).withUnsafeBytes { bytes in
                (bytes.loadUnaligned(as: UInt64.self), bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                 bytes.loadUnaligned(fromByteOffset: 16, as: UInt32.self))
            }
        }
        return LogTime(prefix: prefix, milliseconds: UInt(now.tv_nsec / 1_000_000))
    }
}

/// A time read from a `LogClock`: its second formatted, and the milliseconds.
struct LogTime {
    /// The 20 bytes "YYYY-MM-DDTHH:MM:SS." as words: copied with three stores, no array to reference and copy.
    typealias Prefix = (UInt64, UInt64, UInt32)
    fileprivate let prefix: Prefix
    fileprivate let milliseconds: UInt

    /// Writes the time's `LogClock.width` bytes at `out`; returns how many.
    func write(at out: UnsafeMutablePointer<UInt8>) -> Int {
        let raw = UnsafeMutableRawPointer(out)
        raw.storeBytes(of: prefix.0, as: UInt64.self)
        raw.storeBytes(of: prefix.1, toByteOffset: 8, as: UInt64.self)
        raw.storeBytes(of: prefix.2, toByteOffset: 16, as: UInt32.self)
        out[20] = UInt8(ascii: "0") + UInt8(milliseconds / 100)
        out[21] = UInt8(ascii: "0") + UInt8(milliseconds / 10 % 10)
        out[22] = UInt8(ascii: "0") + UInt8(milliseconds % 10)
        out[23] = UInt8(ascii: "Z")
        return LogClock.width
    }
}
