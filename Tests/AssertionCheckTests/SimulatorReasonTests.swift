import AssertionCheck
import DeviceSimulator
import Foundation
import Synchronization
import XCTest

/// The device simulator against AssertionCheck's real verifiers: clean objects verify, and every fault
/// fails with exactly the reason code it is documented to produce.
final class SimulatorReasonTests: XCTestCase {
    /// One CA for the whole class: P-384 key generation and CA signing are the slow part.
    private static let sharedCA = Result<TestCA, SimulatorError> { () throws(SimulatorError) in try TestCA() }
    private static let appID = AppID(teamID: "SIMTEAM123", bundleID: "com.example.simulated")
    private static let challenge = Array("server-challenge-0001".utf8)

    override class func setUp() {
        super.setUp()
        _ = sharedCA
    }

    private var ca: TestCA {
        get throws { try Self.sharedCA.get() }
    }

    private func makeDevice(_ environment: AppAttestEnvironment = .development,
                            extensions: SimulatedExtensions? = nil) throws -> SimulatedDevice {
        try SimulatedDevice(ca: ca, appID: Self.appID, environment: environment, extensions: extensions)
    }

    private func policy(_ environments: Set<AppAttestEnvironment> = [.development]) throws -> AttestationPolicy {
        AttestationPolicy(apps: [Self.appID], environments: environments, trustAnchor: try ca.trustAnchor)
    }

    private func verify(_ attestation: [UInt8], of device: SimulatedDevice,
                        environments: Set<AppAttestEnvironment> = [.development]) throws -> AttestedKey {
        try AttestationVerifier.verify(attestation: attestation, keyId: device.keyId,
                                       clientData: .challenge(Self.challenge), policy: policy(environments))
    }

    private func verify(_ assertion: [UInt8], clientData: [UInt8], of device: SimulatedDevice,
                        previousCounter: UInt32?) throws -> VerifiedAssertion {
        try AssertionVerifier.verify(assertion: assertion, clientData: clientData, publicKey: device.publicKey,
                                     appID: Self.appID, previousCounter: previousCounter)
    }

    private func assertReason<T>(_ expected: VerificationError.Reason, _ expression: @autoclosure () throws -> T,
                                    _ context: String = "", file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try expression(), context, file: file, line: line) { error in
            XCTAssertEqual((error as? VerificationError)?.reason, expected, "\(context): \(error)", file: file, line: line)
        }
    }

    // MARK: Attestation

    func testCleanAttestationVerifiesWithTheTestCA() throws {
        let device = try makeDevice()
        let key = try verify(device.attest(challenge: Self.challenge), of: device)
        XCTAssertEqual(key.keyId, device.keyId)
        XCTAssertEqual(key.publicKey.spki, device.publicKeySPKI)
        XCTAssertEqual(key.environment, .development)
        XCTAssertEqual(key.appID, Self.appID)
        XCTAssertEqual(key.receipt, SimulatedDevice.placeholderReceipt)
        XCTAssertNil(key.extensions)
        XCTAssertEqual(Base64.decode(device.keyIdBase64), device.keyId)
        XCTAssertEqual(device.keyId, SHA256.hash(device.publicKey.point))
    }

    func testAttestationIsNotTrustedUnderApplesRoot() throws {
        let device = try makeDevice()
        let applePolicy = AttestationPolicy(apps: [Self.appID], environments: [.development])
        assertReason(.chainInvalid, try AttestationVerifier.verify(
            attestation: device.attest(challenge: Self.challenge), keyId: device.keyId,
            clientData: .challenge(Self.challenge), policy: applePolicy))
    }

    func testAttestationObjectHasApplesLayout() throws {
        let device = try makeDevice(.production)
        let object = try CBORDecoder.decode(device.attest(challenge: Self.challenge))
        guard case .map(let entries) = object, case .map(let statement)? = object["attStmt"],
              case .array(let chain)? = object["attStmt"]?["x5c"], let authData = object["authData"]?.bytes else {
            return XCTFail("not {fmt, attStmt: {x5c: [...], receipt}, authData}: \(object)")
        }
        XCTAssertEqual(entries.map(\.key), [.text("fmt"), .text("attStmt"), .text("authData")])
        XCTAssertEqual(statement.map(\.key), [.text("x5c"), .text("receipt")])
        XCTAssertEqual(object["fmt"], .text("apple-appattest"))
        XCTAssertEqual(chain.count, 2)
        // rpIdHash 32 | flags | counter 4 | aaguid 16 | length 2 | credentialId 32 | COSE key 77, like Apple's.
        XCTAssertEqual(authData.count, 164)
        XCTAssertEqual(Array(authData[0..<32]), Self.appID.rpIdHash)
        XCTAssertEqual(authData[32], 0x40)
        XCTAssertEqual(Array(authData[33..<37]), [0, 0, 0, 0])
        XCTAssertEqual(Array(authData[37..<53]), Array("appattest".utf8) + [UInt8](repeating: 0, count: 7))
        XCTAssertEqual(Array(authData[53..<55]), [0, 32])
        XCTAssertEqual(Array(authData[55..<87]), device.keyId)
        let coseKey = try CBORDecoder.decode(Array(authData[87...]))
        XCTAssertEqual(coseKey[intKey: 1], .unsigned(2))
        XCTAssertEqual(coseKey[intKey: 3], .negative(6))
        XCTAssertEqual(coseKey[intKey: -1], .unsigned(1))
        XCTAssertEqual(coseKey[intKey: -2], .bytes(Array(device.publicKey.point[1..<33])))
        XCTAssertEqual(coseKey[intKey: -3], .bytes(Array(device.publicKey.point[33..<65])))
    }

    func testProductionAttestationVerifiesOnlyWhereProductionIsAccepted() throws {
        let device = try makeDevice(.production)
        let attestation = try device.attest(challenge: Self.challenge)
        XCTAssertEqual(try verify(attestation, of: device, environments: [.production]).environment, .production)
        XCTAssertEqual(try verify(attestation, of: device, environments: [.development, .production]).environment, .production)
        assertReason(.environmentMismatch, try verify(attestation, of: device, environments: [.development]))
    }

    func testDevelopmentAttestationIsRejectedWhereOnlyProductionIsAccepted() throws {
        let device = try makeDevice(.development)
        assertReason(.environmentMismatch, try verify(device.attest(challenge: Self.challenge), of: device,
                                                         environments: [.production]))
    }

    func testRawClientDataHashLikeApplesSamples() throws {
        let device = try makeDevice()
        let raw = Array("example_server_challenge".utf8)
        let attestation = try device.attest(clientDataHash: raw)
        XCTAssertNoThrow(try AttestationVerifier.verify(attestation: attestation, keyId: device.keyId,
                                                        clientData: .clientDataHash(raw), policy: policy()))
        // Hashing the challenge again, as the guide's text says, misses the certified nonce.
        assertReason(.nonceMismatch, try AttestationVerifier.verify(attestation: attestation, keyId: device.keyId,
                                                                       clientData: .challenge(raw), policy: policy()))
    }

    func testEachAttestationFaultFailsWithItsReason() throws {
        let expected: [AttestationFault: VerificationError.Reason] = [
            .wrongFormat: .badFormat,
            .missingReceipt: .badFormat,
            .certificatesNotArray: .badFormat,
            .trailingBytesAfterCredential: .badFormat,
            .untrustedIssuer: .chainInvalid,
            .tamperedCertificateSignature: .chainInvalid,
            .expiredCertificate: .certExpired,
            .certificateNotYetValid: .certNotYetValid,
            .nonceOverOtherClientData: .nonceMismatch,
            .missingNonceExtension: .badCertificate,
            .malformedNonceExtension: .badCertificate,
            .certifiedKeyNotKeyId: .keyIdMismatch,
            .wrongAppID: .appIdMismatch,
            .nonZeroCounter: .counterNotZero,
            .unknownAAGUID: .environmentMismatch,
            .credentialIdNotKeyId: .credentialIdMismatch,
            .credentialKeyNotCertified: .credentialKeyMismatch,
        ]
        XCTAssertEqual(Set(expected.keys), Set(AttestationFault.allCases), "every fault has an expected reason")
        let device = try makeDevice()
        for fault in AttestationFault.allCases {
            let attestation = try device.attest(challenge: Self.challenge, faults: [fault])
            assertReason(expected[fault]!, try verify(attestation, of: device), "\(fault)")
        }
    }

    func testExtensionMapAfterTheCredentialIsValidAndExposed() throws {
        let extensions = SimulatedExtensions()
        let device = try makeDevice(extensions: extensions)
        let attestation = try device.attest(challenge: Self.challenge)
        let authData = try XCTUnwrap(CBORDecoder.decode(attestation)["authData"]?.bytes)
        XCTAssertEqual(authData.count, 226, "same length as Apple's 2026 sample")
        XCTAssertEqual(authData[32], 0x40, "ED flag stays clear, as in Apple's sample")
        let key = try verify(attestation, of: device)
        XCTAssertEqual(key.extensions?.bundleVersion, "1")
        XCTAssertEqual(key.extensions?.validationCategory, [0x01, 0x00, 0x00, 0x00])
    }

    func testCAOutsideItsValidityFailsWithCertExpired() throws {
        let expiredCA = try TestCA(validFrom: Date().addingTimeInterval(-10 * 86400), validFor: 86400)
        let device = try SimulatedDevice(ca: expiredCA, appID: Self.appID)
        assertReason(.certExpired, try AttestationVerifier.verify(
            attestation: device.attest(challenge: Self.challenge), keyId: device.keyId,
            clientData: .challenge(Self.challenge),
            policy: AttestationPolicy(apps: [Self.appID], environments: [.development], trustAnchor: expiredCA.trustAnchor)))
    }

    // MARK: Assertion

    func testCleanAssertionsVerifyWithIncreasingCounters() throws {
        let device = try makeDevice()
        let clientData = Array(#"{"challenge":"assertion-test"}"#.utf8)
        let first = try device.assert(clientData: clientData)
        let second = try device.assert(clientData: clientData)
        XCTAssertEqual(try verify(first, clientData: clientData, of: device, previousCounter: 0).counter, 1)
        let verified = try verify(second, clientData: clientData, of: device, previousCounter: 1)
        XCTAssertEqual(verified.counter, 2)
        XCTAssertEqual(verified.flags, 0x40)
        XCTAssertNil(verified.extensions)
        XCTAssertEqual(device.counter, 2)
        let authenticatorData = try XCTUnwrap(CBORDecoder.decode(second)["authenticatorData"]?.bytes)
        XCTAssertEqual(authenticatorData.count, 37)
    }

    func testReplayedOrOldCounterIsNotIncreasing() throws {
        let device = try makeDevice()
        let clientData = Array("replay".utf8)
        let assertion = try device.assert(clientData: clientData, counter: 5)
        XCTAssertEqual(device.counter, 0, "an explicit counter leaves the device counter alone")
        XCTAssertEqual(try verify(assertion, clientData: clientData, of: device, previousCounter: 4).counter, 5)
        assertReason(.counterNotIncreasing, try verify(assertion, clientData: clientData, of: device, previousCounter: 5))
        assertReason(.counterNotIncreasing, try verify(assertion, clientData: clientData, of: device, previousCounter: 9))
    }

    func testAssertionOverOtherClientDataFails() throws {
        let device = try makeDevice()
        let assertion = try device.assert(clientData: Array("wurzelpfropf".utf8))
        assertReason(.signatureInvalid, try verify(assertion, clientData: Array("fporfplezruw".utf8), of: device,
                                                      previousCounter: 0))
    }

    func testEachAssertionFaultFailsWithItsReason() throws {
        let expected: [AssertionFault: VerificationError.Reason] = [
            .signedByOtherKey: .signatureInvalid,
            .corruptedSignature: .signatureInvalid,
            .wrongAppID: .appIdMismatch,
            .trailingBytesAfterAuthenticatorData: .badAssertion,
            .notAMap: .badAssertion,
            .missingSignature: .badAssertion,
        ]
        XCTAssertEqual(Set(expected.keys), Set(AssertionFault.allCases), "every fault has an expected reason")
        let device = try makeDevice()
        let clientData = Array("fault".utf8)
        for fault in AssertionFault.allCases {
            let assertion = try device.assert(clientData: clientData, faults: [fault])
            assertReason(expected[fault]!, try verify(assertion, clientData: clientData, of: device, previousCounter: 0),
                            "\(fault)")
        }
    }

    func testAssertionExtensionMapIsValidAndExposed() throws {
        let device = try makeDevice(extensions: SimulatedExtensions(bundleVersion: "42", validationCategory: [2, 0, 0, 0]))
        let clientData = Array("ios27".utf8)
        let verified = try verify(device.assert(clientData: clientData), clientData: clientData, of: device, previousCounter: 0)
        XCTAssertEqual(verified.extensions?.bundleVersion, "42")
        XCTAssertEqual(verified.extensions?.validationCategory, [2, 0, 0, 0])
        XCTAssertEqual(verified.flags, 0x40)
    }

    func testConcurrentAssertionsTakeDistinctCounters() throws {
        let device = try makeDevice()
        let clientData = Array("parallel".utf8)
        let counters = Mutex<[UInt32]>([])
        DispatchQueue.concurrentPerform(iterations: 64) { _ in
            guard let assertion = try? device.assert(clientData: clientData),
                  let verified = try? AssertionVerifier.verify(assertion: assertion, clientData: clientData,
                                                               publicKey: device.publicKey, appID: Self.appID,
                                                               previousCounter: 0) else { return }
            counters.withLock { $0.append(verified.counter) }
        }
        XCTAssertEqual(counters.withLock { $0.sorted() }, Array(1...64))
        XCTAssertEqual(device.counter, 64)
    }

    // MARK: Request binding

    func testRequestClientDataBindsTheRequest() throws {
        let body = Array(#"{"amount":5}"#.utf8)
        let clientData = SimulatedDevice.requestClientData(challenge: "c-1", method: "POST", path: "/v1/transfer",
                                                           query: "dry=1", body: body)
        let device = try makeDevice()
        XCTAssertNoThrow(try verify(device.assert(clientData: clientData), clientData: clientData, of: device, previousCounter: 0))
        let parsed = try ClientData.parse(clientData)
        XCTAssertEqual(parsed.challenge, "c-1")
        XCTAssertEqual(parsed.bodySHA256, SHA256.hash(body))
        XCTAssertNoThrow(try RequestBinding.check(parsed, against: BoundRequest(method: "POST", path: "/v1/transfer",
                                                                               query: "dry=1", body: body)))
        assertReason(.methodMismatch, try RequestBinding.check(parsed, against: BoundRequest(
            method: "PUT", path: "/v1/transfer", query: "dry=1", body: body)))
        assertReason(.pathMismatch, try RequestBinding.check(parsed, against: BoundRequest(
            method: "POST", path: "/v1/transfers", query: "dry=1", body: body)))
        assertReason(.queryMismatch, try RequestBinding.check(parsed, against: BoundRequest(
            method: "POST", path: "/v1/transfer", query: "dry=0", body: body)))
        assertReason(.queryMismatch, try RequestBinding.check(parsed, against: BoundRequest(
            method: "POST", path: "/v1/transfer", query: nil, body: body)))
        assertReason(.bodyHashMismatch, try RequestBinding.check(parsed, against: BoundRequest(
            method: "POST", path: "/v1/transfer", query: "dry=1", body: Array(#"{"amount":500}"#.utf8))))
    }

    func testRequestClientDataWithoutQueryOmitsIt() throws {
        let clientData = SimulatedDevice.requestClientData(challenge: "c-2", method: "GET", path: "/v1/items",
                                                           query: nil, body: [])
        XCTAssertFalse(String(decoding: clientData, as: UTF8.self).contains("query"))
        let parsed = try ClientData.parse(clientData)
        XCTAssertNil(parsed.query)
        XCTAssertNoThrow(try RequestBinding.check(parsed, against: BoundRequest(method: "GET", path: "/v1/items", query: nil, body: [])))
        assertReason(.queryMismatch, try RequestBinding.check(parsed, against: BoundRequest(
            method: "GET", path: "/v1/items", query: "page=2", body: [])))
    }

    func testRequestClientDataEscapesJSONSpecialCharacters() throws {
        let path = "/v1/\"odd\"\\path\n\u{1}/é"
        let parsed = try ClientData.parse(SimulatedDevice.requestClientData(
            challenge: "c\"3", method: "DELETE", path: path, query: "q=\"x\"", body: [1, 2, 3]))
        XCTAssertEqual(parsed.challenge, "c\"3")
        XCTAssertEqual(parsed.path, path)
        XCTAssertEqual(parsed.query, "q=\"x\"")
    }

    func testInvalidClientDataIsRejected() {
        assertReason(.clientDataInvalid, try ClientData.parse(SimulatedDevice.requestClientData(
            challenge: "", method: "GET", path: "/", query: nil, body: [])), "empty challenge")
        assertReason(.clientDataInvalid, try ClientData.parse(Array("not json".utf8)), "not JSON")
        assertReason(.clientDataInvalid, try ClientData.parse(Array(#"{"challenge":"c","method":"GET"}"#.utf8)),
                        "missing fields")
        let hash = SHA256.hash([]).base64EncodedForTest
        func object(path: [UInt8], extra: String = "") -> [UInt8] {
            Array(#"{"challenge":"c","method":"GET","bodySHA256":"\#(hash)","path":""#.utf8) + path + Array("\"\(extra)}".utf8)
        }
        XCTAssertEqual(try ClientData.parse(object(path: Array("/a".utf8))).path, "/a")
        XCTAssertEqual(try ClientData.parse(object(path: Array(#"/a\u00e9b"#.utf8))).path, "/a\u{e9}b", "an escape after plain bytes")
        assertReason(.clientDataInvalid, try ClientData.parse(object(path: [0x2F, 0x01])), "a raw control character")
        assertReason(.clientDataInvalid, try ClientData.parse(object(path: [0x2F, 0xC3, 0x28])), "invalid UTF-8")
        assertReason(.clientDataInvalid, try ClientData.parse(object(path: Array("/a".utf8), extra: #","path":"/b""#)), "a repeated member")
        assertReason(.clientDataInvalid, try ClientData.parse(Array(object(path: Array("/a".utf8)).dropLast(2))), "an unterminated string")
        // Past the members found by a scan the names go into a set: a repeat there, or spelled with an escape, is still one.
        let many = (0..<40).map { #","m\#($0)":\#($0)"# }.joined()
        XCTAssertEqual(try ClientData.parse(object(path: Array("/a".utf8), extra: many)).path, "/a")
        assertReason(.clientDataInvalid, try ClientData.parse(object(path: Array("/a".utf8), extra: many + #","m7":1"#)), "a repeat among many")
        assertReason(.clientDataInvalid, try ClientData.parse(object(path: Array("/a".utf8), extra: many + #","p\u0061th":"/b""#)),
                     "an escaped repeat among many")
        assertReason(.clientDataInvalid, try ClientData.parse(object(path: Array("/a".utf8), extra: #","m":1,"\u006d":2"#)), "an escaped repeat")
    }

    /// Fields are read as bytes and compared with the request as bytes, yet text that Swift takes for the same
    /// String still is: a name or value spelled with a decomposed accent, or with U+212A KELVIN SIGN for "K".
    func testClientDataComparesTextAsStringsDo() throws {
        let hash = SHA256.hash([]).base64EncodedForTest
        let decomposed = Array(#"{"ch\u0061llenge":"c","method":"GET","bodySHA256":"\#(hash)","path":"/cafe\u0301"}"#.utf8)
        let parsed = try ClientData.parse(decomposed)
        XCTAssertEqual(Array(parsed.challengeBytes), Array("c".utf8), "a name spelled with an escape is found")
        XCTAssertEqual(Array(parsed.path.utf8), Array("/cafe\u{301}".utf8), "kept as sent")
        XCTAssertNoThrow(try RequestBinding.check(parsed, against: BoundRequest(method: "GET", path: "/caf\u{e9}", query: nil, body: [])),
                         "precomposed and decomposed é are one String")
        assertReason(.pathMismatch, try RequestBinding.check(parsed, against: BoundRequest(method: "GET", path: "/cafe", query: nil, body: [])))
        assertReason(.methodMismatch, try RequestBinding.check(parsed, against: BoundRequest(method: "GE", path: "/cafe\u{301}", query: nil, body: [])))
        let fields = #""challenge":"c","method":"GET","bodySHA256":"\#(hash)","path":"/a""#
        XCTAssertNoThrow(try ClientData.parse(Array("{\(fields),\"e\":1,\"K\":2}".utf8)))
        assertReason(.clientDataInvalid, try ClientData.parse(Array(#"{\#(fields),"\u212A":1,"K":2}"#.utf8)), "the Kelvin sign repeats K")
        assertReason(.clientDataInvalid, try ClientData.parse(Array(#"{\#(fields),"\u00e9":1,"e\u0301":2}"#.utf8)), "é repeated, decomposed")
    }

    /// Strings are scanned eight bytes at a time: whatever ends or spoils the plain run (an escape, a raw control
    /// character, a non-ASCII byte, valid or not) is found at every offset in and across those words.
    func testClientDataStringsAreReadAtEveryOffset() throws {
        let hash = SHA256.hash([]).base64EncodedForTest
        func parse(_ path: [UInt8]) throws -> ClientData {
            try ClientData.parse(Array(#"{"challenge":"c","method":"GET","bodySHA256":"\#(hash)","path":""#.utf8) + path + Array("\"}".utf8))
        }
        for offset in 0..<20 {
            let before = [UInt8](repeating: UInt8(ascii: "a"), count: offset), after = [UInt8](repeating: UInt8(ascii: "b"), count: 11)
            XCTAssertEqual(try parse(before + Array(#"\"x"#.utf8) + after).path, String(decoding: before + Array("\"x".utf8) + after, as: UTF8.self))
            XCTAssertEqual(try parse(before + Array(#"\\"#.utf8) + after).path, String(decoding: before + [0x5C] + after, as: UTF8.self))
            XCTAssertEqual(try parse(before + Array("é".utf8) + after).path, String(decoding: before + Array("é".utf8) + after, as: UTF8.self))
            XCTAssertEqual(try parse(before + [0x7F, 0x20] + after).path, String(decoding: before + [0x7F, 0x20] + after, as: UTF8.self))
            assertReason(.clientDataInvalid, try parse(before + [0x1F] + after), "a control character at \(offset)")
            assertReason(.clientDataInvalid, try parse(before + [0xFF] + after), "invalid UTF-8 at \(offset)")
            assertReason(.clientDataInvalid, try parse(before + [0x22] + after), "an unescaped quote at \(offset)")
        }
    }

    // MARK: TestCA persistence

    func testSavedCALoadsAndIssuesUnderTheSameRoot() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("testca-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try ca.save(to: directory)
        let keyMode = try FileManager.default.attributesOfItem(atPath: directory + "/intermediate-key.pem")[.posixPermissions] as? Int
        XCTAssertEqual(keyMode, 0o600)

        let loaded = try TestCA(directory: directory)
        XCTAssertEqual(loaded.rootPEM, try ca.rootPEM)
        let device = try SimulatedDevice(ca: loaded, appID: Self.appID)
        XCTAssertEqual(try verify(device.attest(challenge: Self.challenge), of: device).keyId, device.keyId)
    }

    func testBrokenCADirectoriesFailWithTypedErrors() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("testca-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        XCTAssertThrowsError(try TestCA(directory: directory)) { error in
            XCTAssertEqual((error as? SimulatorError)?.reasonCode, "ca_unreadable")
        }
        try ca.save(to: directory)
        // Another CA's intermediate key does not belong to this intermediate certificate.
        let other = directory + "-other"
        defer { try? FileManager.default.removeItem(atPath: other) }
        try TestCA().save(to: other)
        try FileManager.default.removeItem(atPath: directory + "/intermediate-key.pem")
        try FileManager.default.copyItem(atPath: other + "/intermediate-key.pem", toPath: directory + "/intermediate-key.pem")
        XCTAssertThrowsError(try TestCA(directory: directory)) { error in
            XCTAssertEqual((error as? SimulatorError)?.reasonCode, "ca_invalid")
        }
        // The other CA's intermediate, with its own key, is not signed by this root.
        try FileManager.default.removeItem(atPath: directory + "/intermediate.pem")
        try FileManager.default.copyItem(atPath: other + "/intermediate.pem", toPath: directory + "/intermediate.pem")
        XCTAssertThrowsError(try TestCA(directory: directory)) { error in
            XCTAssertEqual((error as? SimulatorError)?.description.contains("not signed by its root"), true, "\(error)")
        }
        try Data("not a PEM".utf8).write(to: URL(fileURLWithPath: directory + "/root.pem"))
        XCTAssertThrowsError(try TestCA(directory: directory)) { error in
            XCTAssertEqual((error as? SimulatorError)?.reasonCode, "ca_invalid")
        }
    }
}

private extension Array where Element == UInt8 {
    var base64EncodedForTest: String { Data(self).base64EncodedString() }
}
