#if canImport(Security)
import Foundation
@preconcurrency import Security

// Not compiled on the Linux machines that test this package (Security is Apple-only): documented API only.

/// The key id as a generic password item, on this device only (never synced or restored elsewhere, where
/// the Secure Enclave key does not exist).
public struct KeychainKeyIdStore: KeyIdStore {
    public struct KeychainError: Error, Equatable {
        public let status: OSStatus
    }

    public let service: String
    public let account: String

    public init(service: String = "app-attest-gateway", account: String = "key-id") {
        self.service = service
        self.account = account
    }

    private var query: [String: Any] {
        [kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service, kSecAttrAccount as String: account]
    }

    public func load() -> String? {
        var query = query
        query[kSecReturnData as String] = true
        query[kSecMatchLimit as String] = kSecMatchLimitOne
        var item: CFTypeRef?
        guard SecItemCopyMatching(query as CFDictionary, &item) == errSecSuccess, let data = item as? Data else { return nil }
        return String(data: data, encoding: .utf8)
    }

    public func save(_ keyId: String) throws {
        delete()
        var attributes = query
        attributes[kSecValueData as String] = Data(keyId.utf8)
        attributes[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
        let status = SecItemAdd(attributes as CFDictionary, nil)
        guard status == errSecSuccess else { throw KeychainError(status: status) }
    }

    public func delete() {
        SecItemDelete(query as CFDictionary)
    }
}
#endif
