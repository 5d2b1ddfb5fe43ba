/// Why the simulator could not mint something. `reasonCode` is stable; the associated text is for humans.
public enum SimulatorError: Error, Equatable, Sendable, CustomStringConvertible {
    /// OpenSSL refused an operation (key generation, signing, certificate building).
    case cryptoFailure(String)
    /// A saved CA file is missing or unreadable.
    case caUnreadable(path: String)
    /// A saved CA file is not the expected PEM, or a key does not belong to its certificate.
    case caInvalid(String)
    /// The CA directory or one of its files cannot be written.
    case caUnwritable(path: String)
    /// The device already signed with counter UInt32.max; a real key would be unusable too.
    case counterExhausted

    public var reasonCode: String {
        switch self {
        case .cryptoFailure: return "crypto_failure"
        case .caUnreadable: return "ca_unreadable"
        case .caInvalid: return "ca_invalid"
        case .caUnwritable: return "ca_unwritable"
        case .counterExhausted: return "counter_exhausted"
        }
    }

    public var description: String {
        switch self {
        case .cryptoFailure(let detail), .caInvalid(let detail): return "\(reasonCode): \(detail)"
        case .caUnreadable(let path), .caUnwritable(let path): return "\(reasonCode): \(path)"
        case .counterExhausted: return "\(reasonCode): the signature counter reached UInt32.max"
        }
    }
}
