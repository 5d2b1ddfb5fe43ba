import RedisClient
import EventLoop
import AttestStore
import AppleServices
import AssertionCheck

/// DeviceCheck on an `assert` route: the fallback for devices without App Attest, refusing flagged devices
/// (`deny_if_bits`), and once-per-device actions (`once_per_device`). The device token comes in
/// `X-Apple-Device-Token` (DCDevice.generateToken, base64).
struct DeviceGate {
    static let tokenHeader = "X-Apple-Device-Token"
    /// How long a used token is remembered (Apple's tokens are short-lived; a day covers them).
    static let usedTokenSeconds = 86_400

    let apple: AppleRuntime
    let store: AttestStore

    /// A device whose bits were read for this request; `bits` is nil when they were not needed, or Apple
    /// could not be asked and the route fails open.
    struct Device {
        let token: String
        let bits: TwoBits?
    }

    /// The fallback: the device token is the only proof, so it is single-use and Apple must vouch for it
    /// (never fail-open here: an unchecked token proves nothing).
    func authenticate(token: String, policy: DeviceCheckPolicy) async throws(GatewayError) -> Device {
        guard let raw = Base64.decode(token), !raw.isEmpty else { throw .deviceTokenInvalid("the token is not base64") }
        let fresh: Bool
        do {
            fresh = try await store.consumeDeviceToken(raw, ttlSeconds: DeviceGate.usedTokenSeconds)
        } catch {
            throw GatewayError(error)
        }
        guard fresh else { throw .deviceTokenReused }
        return try await inspect(token: token, policy: policy, mayFailOpen: false)
    }

    /// Reads the bits when the route needs them and applies `deny_if_bits` and `once_per_device`.
    func inspect(token: String, policy: DeviceCheckPolicy, mayFailOpen: Bool = true) async throws(GatewayError) -> Device {
        let needsBits = !policy.denyIfBits.isEmpty || policy.oncePerDevice != nil
        let bits: TwoBits?
        do throws(AppleServiceError) {
            if needsBits {
                bits = try await apple.deviceCheck.query(deviceToken: token)
            } else {
                try await apple.deviceCheck.validate(deviceToken: token)
                bits = nil
            }
        } catch {
            let mapped = GatewayError(error)
            if mayFailOpen, policy.unreachable == .open, case .appleUnavailable = mapped { return Device(token: token, bits: nil) }
            throw mapped
        }
        guard let bits else { return Device(token: token, bits: nil) }
        let flagged = policy.denyIfBits.filter { bit, value in bits.value(of: bit) == value }.keys.map(\.rawValue).sorted()
        guard flagged.isEmpty else { throw .deviceFlagged(flagged.map { "\($0) set" }.joined(separator: ", ")) }
        if let claim = policy.oncePerDevice, bits.value(of: claim) { throw .alreadyClaimed }
        return Device(token: token, bits: bits)
    }

    /// `once_per_device`: after the upstream's 2xx, set the bit (the other bit kept as read).
    func claim(_ device: Device, policy: DeviceCheckPolicy) async throws(GatewayError) {
        guard let bit = policy.oncePerDevice, let bits = device.bits else { return }
        do {
            try await apple.deviceCheck.update(deviceToken: device.token, bit0: bit == .bit0 ? true : bits.bit0,
                                         bit1: bit == .bit1 ? true : bits.bit1)
        } catch {
            throw GatewayError(error)
        }
    }
}

extension TwoBits {
    func value(of bit: DeviceCheckPolicy.Bit) -> Bool { bit == .bit0 ? bit0 : bit1 }
}
