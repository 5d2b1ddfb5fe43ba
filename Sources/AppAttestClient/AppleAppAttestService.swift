#if canImport(DeviceCheck)
@preconcurrency import DeviceCheck
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// Not compiled on the Linux machines that test this package (DeviceCheck is Apple-only): documented API only.

/// `DCAppAttestService.shared`, with `DCError.invalidKey` and `.serverUnavailable` as `AppAttestServiceError`.
public struct AppleAppAttestService: AppAttestService {
    public init() {}

    public var isSupported: Bool { DCAppAttestService.shared.isSupported }

    public func generateKey() async throws -> String {
        try await mapped { try await DCAppAttestService.shared.generateKey() }
    }

    public func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data {
        try await mapped { try await DCAppAttestService.shared.attestKey(keyId, clientDataHash: clientDataHash) }
    }

    public func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data {
        try await mapped { try await DCAppAttestService.shared.generateAssertion(keyId, clientDataHash: clientDataHash) }
    }

    private func mapped<T: Sendable>(_ call: () async throws -> T) async throws -> T {
        do {
            return try await call()
        } catch let error as DCError where error.code == .invalidKey {
            throw AppAttestServiceError.invalidKey
        } catch let error as DCError where error.code == .serverUnavailable {
            throw AppAttestServiceError.serverUnavailable
        }
    }
}

/// `DCDevice.current`: a fresh DeviceCheck token per request.
public struct AppleDeviceCheckTokens: DeviceCheckTokenProvider {
    public init() {}

    public var isSupported: Bool { DCDevice.current.isSupported }

    public func generateToken() async throws -> Data { try await DCDevice.current.generateToken() }
}

extension AttestClient {
    /// The client an app uses: App Attest and DeviceCheck from the device, the key id in the Keychain.
    /// `debug`: pass `DebugProvider.fromEnvironment()` in debug builds to run on the Simulator.
    public init(gateway: URL, prefix: String = "", debug: DebugProvider? = nil, session: URLSession = .shared) {
        self.init(gateway: gateway, prefix: prefix, service: AppleAppAttestService(), keyStore: KeychainKeyIdStore(),
                  deviceCheck: AppleDeviceCheckTokens(), debug: debug, session: session)
    }
}
#endif
