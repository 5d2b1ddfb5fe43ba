import Foundation
// The DeviceCheck API as Apple documents it (signatures only), so that scripts/typecheck-apple-client.sh can
// type-check Sources/AppAttestClient/AppleAppAttestService.swift on Linux. Not a test target: nothing runs it.
public struct DCError: Error, Hashable {
    public enum Code: Int, Sendable { case unknownSystemFailure, featureUnsupported, invalidInput, invalidKey, serverUnavailable }
    public var code: Code
}
open class DCAppAttestService: NSObject {
    open class var shared: DCAppAttestService { fatalError() }
    open var isSupported: Bool { false }
    open func generateKey() async throws -> String { fatalError() }
    open func attestKey(_ keyId: String, clientDataHash: Data) async throws -> Data { fatalError() }
    open func generateAssertion(_ keyId: String, clientDataHash: Data) async throws -> Data { fatalError() }
}
open class DCDevice: NSObject {
    open class var current: DCDevice { fatalError() }
    open var isSupported: Bool { false }
    open func generateToken() async throws -> Data { fatalError() }
}
