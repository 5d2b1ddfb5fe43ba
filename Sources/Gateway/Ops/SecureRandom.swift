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
