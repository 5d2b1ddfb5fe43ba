import AppAttestClient
import AssertionCheck
import DeviceSimulator
import Foundation
import Synchronization

/// `AppAttestService` played by the project's simulated iPhone: keys certified by a `TestCA` the gateway is
/// told to trust, objects byte-compatible with Apple's. For the client's tests and the demo, never an app.
/// The switches below make it fail the way a real device does, so the client's recovery can be driven.
public final class SimulatedAppAttestService: AppAttestService, @unchecked Sendable {
    public let ca: TestCA
    public let appID: AppID
    public let environment: AppAttestEnvironment
    private let state = Mutex(State())

    private struct State {
        var supported = true
        var devices: [String: SimulatedDevice] = [:]
        var serverUnavailableLeft = 0
        var assertionDelays: [TimeInterval] = []
        var attestations: [(keyId: String, clientDataHash: Data)] = []
        var counters: [UInt32] = []
    }

    public init(ca: TestCA, appID: AppID, environment: AppAttestEnvironment = .development) {
        self.ca = ca
        self.appID = appID
        self.environment = environment
    }

    public var isSupported: Bool {
        get { state.withLock { $0.supported } }
        set { state.withLock { $0.supported = newValue } }
    }

    /// Every `attestKey` call so far, failed ones included.
    public var attestations: [(keyId: String, clientDataHash: Data)] { state.withLock { $0.attestations } }
    /// The counter of every assertion made, in the order they were made.
    public var counters: [UInt32] { state.withLock { $0.counters } }
    public var keyIds: [String] { state.withLock { Array($0.devices.keys) } }

    /// The next `count` attestations fail with `serverUnavailable` (Apple's server down).
    public func failAttestations(_ count: Int) { state.withLock { $0.serverUnavailableLeft = count } }

    /// The next assertions wait this long each before signing (a slow Secure Enclave, a suspended app).
    public func delayAssertions(_ delays: [TimeInterval]) { state.withLock { $0.assertionDelays = delays } }

    /// The key disappears from the device (a restore): its assertions fail with `invalidKey`.
    public func forget(_ keyId: String) { state.withLock { _ = $0.devices.removeValue(forKey: keyId) } }

    public func generateKey() async throws -> String {
        let device = try SimulatedDevice(ca: ca, appID: appID, environment: environment)
        state.withLock { $0.devices[device.keyIdBase64] = device }
        return device.keyIdBase64
    }

    public func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data {
        let (device, unavailable) = state.withLock { state -> (SimulatedDevice?, Bool) in
            state.attestations.append((keyId, clientDataHash))
            let unavailable = state.serverUnavailableLeft > 0
            if unavailable { state.serverUnavailableLeft -= 1 }
            return (state.devices[keyId], unavailable)
        }
        if unavailable { throw AppAttestServiceError.serverUnavailable }
        guard let device else { throw AppAttestServiceError.invalidKey }
        return Data(try device.attest(clientDataHash: Array(clientDataHash)))
    }

    public func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data {
        let delay = state.withLock { $0.assertionDelays.isEmpty ? 0 : $0.assertionDelays.removeFirst() }
        if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
        guard let device = state.withLock({ $0.devices[keyId] }) else { throw AppAttestServiceError.invalidKey }
        return try state.withLock { state in
            let assertion = try device.assert(clientDataHash: Array(clientDataHash))
            state.counters.append(device.counter)
            return Data(assertion)
        }
    }
}
