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
        take(count) { Array($0) }
    }

    /// `count` bytes as lower-case hex, written straight into the string (a request id per request: the
    /// byte array, digit table and hex array in between were 2,500 instructions of a relayed request).
    func hex(_ count: Int) -> String {
        take(count) { bytes in
            String(unsafeUninitializedCapacity: count * 2) { text in
                for (index, byte) in bytes.enumerated() {
                    text[2 * index] = Self.hexDigit(byte >> 4)
                    text[2 * index + 1] = Self.hexDigit(byte & 0x0F)
                }
                return count * 2
            }
        }
    }

    @inline(__always)
    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }

    private func take<T>(_ count: Int, _ body: (ArraySlice<UInt8>) -> T) -> T {
        state.withLock { state in
            if state.used + count > state.bytes.count {
                state = (SecureRandom.bytes(max(4096, count)), 0)
            }
            defer { state.used += count }
            return body(state.bytes[state.used..<(state.used + count)])
        }
    }
}
