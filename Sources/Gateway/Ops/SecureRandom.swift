import EventLoop
import Glibc

/// Unpredictable bytes from the kernel's CSPRNG in one call. `UInt8.random(using: &SystemRandomNumberGenerator)`
/// made one getrandom(2) per byte: a request id and a challenge cost 44 system calls (a third of the
/// pass route's syscalls in an strace).
enum SecureRandom {
    static func bytes(_ count: Int) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            if let base = buffer.baseAddress { arc4random_buf(base, count) }  // never fails: glibc aborts instead
            initialized = count
        }
    }
}

/// CSPRNG bytes taken a few at a time from a 4 KiB buffer refilled from the kernel: for values that must be
/// unpredictable but are no secret (request ids), one getrandom(2) per few hundred requests instead of
/// one per request (glibc's arc4random is a system call each time).
final class SecureRandomPool: Sendable {
    private let state = Locked((bytes: [UInt8](), used: 0))

    func bytes(_ count: Int) -> [UInt8] {
        state.withLock { state in
            if state.used + count > state.bytes.count {
                state = (SecureRandom.bytes(max(4096, count)), 0)
            }
            defer { state.used += count }
            return Array(state.bytes[state.used..<(state.used + count)])
        }
    }
}
