import Foundation

/// Apple's App Attest as `AttestClient` uses it: `DCAppAttestService` on a device
/// (`AppleAppAttestService`), a simulated iPhone in the tests.
public protocol AppAttestService: Sendable {
    /// False on the Simulator, older devices and some Macs: the client then uses DeviceCheck or a debug token.
    var isSupported: Bool { get }
    /// A new Secure Enclave key; its id is standard base64 of SHA-256 of the public key.
    func generateKey() async throws -> String
    /// Apple's attestation object for `keyId` over `clientDataHash`.
    func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data
    /// A CBOR assertion over `clientDataHash` with the key's next counter value.
    func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data
}

/// The two App Attest failures the client recovers from; implementations throw these for
/// `DCError.invalidKey` and `DCError.serverUnavailable`, and anything else as it is.
public enum AppAttestServiceError: Error, Sendable, Equatable {
    /// The key is gone or was never attested (a reinstall that kept the stored id): make a new one.
    case invalidKey
    /// Apple's attestation server could not be reached: try again later with the same key and hash.
    case serverUnavailable
}

/// DeviceCheck's `DCDevice` as the client uses it: a fresh, single-use token for devices without App Attest
/// (routes with `fallback: devicecheck`) and for routes that read the device's bits.
public protocol DeviceCheckTokenProvider: Sendable {
    var isSupported: Bool { get }
    /// A new token for exactly one request.
    func generateToken() async throws -> Data
}

/// Where the registered key id is kept between launches (only the id: the key never leaves the Secure Enclave).
public protocol KeyIdStore: Sendable {
    func load() -> String?
    func save(_ keyId: String) throws
    func delete()
}

/// A key id kept for the life of the process: for tests, and for apps that keep it elsewhere.
public final class InMemoryKeyIdStore: KeyIdStore, @unchecked Sendable {
    private let lock = NSLock()
    private var keyId: String?

    public init(keyId: String? = nil) { self.keyId = keyId }

    // lock()/unlock(): NSLocking.withLock needs iOS 16.
    public func load() -> String? {
        lock.lock()
        defer { lock.unlock() }
        return keyId
    }

    public func save(_ keyId: String) {
        lock.lock()
        self.keyId = keyId
        lock.unlock()
    }

    public func delete() {
        lock.lock()
        keyId = nil
        lock.unlock()
    }
}
