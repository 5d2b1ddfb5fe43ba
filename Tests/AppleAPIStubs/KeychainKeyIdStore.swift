// Stands in for Sources/AppAttestClient/KeychainKeyIdStore.swift, whose Security calls need Apple's SDK.
public struct KeychainKeyIdStore: KeyIdStore {
    public init() {}
    public func load() -> String? { nil }
    public func save(_ keyId: String) throws {}
    public func delete() {}
}
