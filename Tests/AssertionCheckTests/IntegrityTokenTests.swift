import AssertionCheck
import DeviceSimulator
import Foundation
import TestSupport
import XCTest

/// Classic Play Integrity tokens: the token maker against the gateway's decryption, each fault with its
/// reason, each verdict rule, and both against Python's `cryptography` (so the JWE is the standard one).
final class IntegrityTokenTests: XCTestCase {
    static let package = "com.example.android"
    static let digest = Base64.encodeURLSafe(SHA256.hash(Array("signing certificate".utf8)))
    static let challenge = String(repeating: "A", count: 72)

    private func makeKeys(_ maker: PlayIntegrityTokenMaker) throws -> IntegrityKeys {
        try IntegrityKeys(decryptionKey: maker.decryptionKey,
                          verificationKey: P256PublicKey(bytes: XCTUnwrap(Base64.decode(maker.verificationKeyBase64))))
    }

    private func verdict(now: Date = Date()) -> PlayIntegrityVerdict {
        PlayIntegrityVerdict(packageName: Self.package, nonce: Self.challenge, certificateDigests: [Self.digest], timestamp: now)
    }

    private func policy(device: [String] = ["MEETS_DEVICE_INTEGRITY"], licensed: Bool = false, certificates: [String]? = nil) -> IntegrityPolicy {
        IntegrityPolicy(packageNames: [Self.package], certificateDigests: (certificates ?? [Self.digest]).compactMap { Base64.decode($0) },
                        maxTokenAgeSeconds: 300, clockSkewSeconds: 5, requireAppRecognized: true, requireDevice: device,
                        requireLicensed: licensed)
    }

    func testCleanTokenDecryptsToItsVerdictAndPasses() throws {
        let maker = try PlayIntegrityTokenMaker()
        let token = try maker.classicToken(verdict())
        XCTAssertTrue(IntegrityToken.isCompactJWE(token))
        let payload = try IntegrityToken.decrypt(token, keys: makeKeys(maker))
        let parsed = try IntegrityVerdict(json: payload)
        XCTAssertEqual(parsed.requestPackageName, Self.package)
        XCTAssertEqual(parsed.nonce, Self.challenge)
        XCTAssertEqual(parsed.deviceRecognitionVerdict, ["MEETS_DEVICE_INTEGRITY"])
        XCTAssertEqual(parsed.versionCode, 42)
        XCTAssertNoThrow(try policy().judge(parsed, challenge: Self.challenge, binding: .nonce, now: Date()))
    }

    func testEveryFaultFailsWithItsReason() throws {
        let maker = try PlayIntegrityTokenMaker()
        let keys = try makeKeys(maker)
        for fault in IntegrityTokenFault.allCases {
            let token = try maker.classicToken(verdict(), fault: fault)
            XCTAssertThrowsError(try IntegrityToken.decrypt(token, keys: keys), "\(fault)") { error in
                XCTAssertEqual((error as? IntegrityError)?.reason, fault.expectedReason, "\(fault): \(error)")
            }
        }
        let stranger = try PlayIntegrityTokenMaker()
        XCTAssertThrowsError(try IntegrityToken.decrypt(maker.classicToken(verdict()), keys: makeKeys(stranger))) { error in
            XCTAssertEqual((error as? IntegrityError)?.reason, .undecryptable)
        }
        let padded = try maker.classicToken(verdict()).split(separator: ".").map { $0 + "=" }.joined(separator: ".")
        XCTAssertThrowsError(try IntegrityToken.decrypt(padded, keys: keys)) { XCTAssertEqual(($0 as? IntegrityError)?.reason, .tokenMalformed) }
        let huge = String(repeating: "A.", count: 4) + String(repeating: "A", count: IntegrityToken.maxBytes)
        XCTAssertThrowsError(try IntegrityToken.decrypt(huge, keys: keys)) { XCTAssertEqual(($0 as? IntegrityError)?.reason, .tokenMalformed) }
    }

    func testEachVerdictRuleRefusesWithItsReason() throws {
        let now = Date()
        var cases: [(String, PlayIntegrityVerdict, IntegrityPolicy, IntegrityError.Reason)] = []
        var other = verdict(now: now)
        other.nonce = String(repeating: "B", count: 72)
        cases.append(("another nonce", other, policy(), .nonceMismatch))
        other = verdict(now: now)
        other.requestPackageName = "com.example.other"
        cases.append(("request package", other, policy(), .packageNotAllowed))
        other = verdict(now: now)
        other.packageName = "com.example.other"
        cases.append(("app package", other, policy(), .packageNotAllowed))
        cases.append(("certificate", verdict(now: now), policy(certificates: [Base64.encodeURLSafe(SHA256.hash([1]))]), .certificateNotAllowed))
        cases.append(("too old", verdict(now: now.addingTimeInterval(-301)), policy(), .tokenTooOld))
        cases.append(("future", verdict(now: now.addingTimeInterval(60)), policy(), .tokenFromFuture))
        other = verdict(now: now)
        other.appRecognitionVerdict = "UNRECOGNIZED_VERSION"
        cases.append(("unrecognized", other, policy(), .appNotRecognized))
        other = verdict(now: now)
        other.deviceRecognitionVerdict = ["MEETS_BASIC_INTEGRITY"]
        cases.append(("basic only", other, policy(), .deviceNotTrusted))
        other.deviceRecognitionVerdict = []
        cases.append(("no label", other, policy(device: ["MEETS_BASIC_INTEGRITY", "MEETS_DEVICE_INTEGRITY"]), .deviceNotTrusted))
        other = verdict(now: now)
        other.appLicensingVerdict = "UNLICENSED"
        cases.append(("unlicensed", other, policy(licensed: true), .unlicensed))
        for (what, verdict, policy, reason) in cases {
            let parsed = try IntegrityVerdict(json: verdict.json)
            XCTAssertThrowsError(try policy.judge(parsed, challenge: Self.challenge, binding: .nonce, now: now), what) { error in
                XCTAssertEqual((error as? IntegrityError)?.reason, reason, "\(what): \(error)")
            }
        }
        // Within the skew and the age, unlicensed when not required, any listed label: accepted.
        var fine = verdict(now: now.addingTimeInterval(3))
        fine.appLicensingVerdict = "UNLICENSED"
        fine.deviceRecognitionVerdict = ["MEETS_BASIC_INTEGRITY"]
        XCTAssertNoThrow(try policy(device: ["MEETS_STRONG_INTEGRITY", "MEETS_BASIC_INTEGRITY"])
            .judge(IntegrityVerdict(json: fine.json), challenge: Self.challenge, binding: .nonce, now: now))
        var standard = verdict(now: now)
        standard.nonce = nil
        standard.requestHash = Self.challenge
        let parsed = try IntegrityVerdict(json: standard.json)
        XCTAssertNoThrow(try policy().judge(parsed, challenge: Self.challenge, binding: .requestHash, now: now))
        XCTAssertThrowsError(try policy().judge(parsed, challenge: Self.challenge, binding: .nonce, now: now), "a classic token needs the nonce")
    }

    func testMalformedVerdictsArePayloadInvalid() {
        for json in ["[]", "{}", #"{"requestDetails":{"requestPackageName":"a"}}"#,
                     #"{"requestDetails":{"requestPackageName":"a","timestampMillis":"12x"}}"#,
                     #"{"requestDetails":{"requestPackageName":"a","timestampMillis":"1"},"deviceIntegrity":{"deviceRecognitionVerdict":"MEETS_DEVICE_INTEGRITY"}}"#,
                     #"{"requestDetails":{"requestPackageName":"a","timestampMillis":"1","nonce":5}}"#,
                     #"{"requestDetails":{"requestPackageName":"a","timestampMillis":"1"},"appIntegrity":[]}"#] {
            XCTAssertThrowsError(try IntegrityVerdict(json: Array(json.utf8)), json) { error in
                XCTAssertEqual((error as? IntegrityError)?.reason, .payloadInvalid, json)
            }
        }
    }

    /// Python's `cryptography` opens our maker's token, and makes one our decryption opens.
    func testTokensInteroperateWithPythonCryptography() throws {
        let maker = try PlayIntegrityTokenMaker()
        let payload = verdict().json
        let token = try maker.classicToken(payload: payload)
        guard let opened = try PythonJWE.run("open", maker.decryptionKeyBase64, maker.verificationKeyBase64, token) else {
            throw XCTSkip("Python's cryptography is not installed (scripts/test.sh installs it)")
        }
        XCTAssertEqual(opened, Base64.encode(payload), "Python decrypts and verifies our token to the same verdict")

        let made = try XCTUnwrap(PythonJWE.run("make", Base64.encode(payload)))
        let lines = made.split(separator: " ").map(String.init)
        XCTAssertEqual(lines.count, 3, made)
        let keys = try IntegrityKeys(decryptionKey: XCTUnwrap(Base64.decode(lines[0])),
                                     verificationKey: P256PublicKey(bytes: XCTUnwrap(Base64.decode(lines[1]))))
        XCTAssertEqual(try IntegrityToken.decrypt(lines[2], keys: keys), payload, "our decryption opens Python's token")
        var tampered = Array(lines[2].utf8)
        tampered[tampered.count - 2] = tampered[tampered.count - 2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        XCTAssertThrowsError(try IntegrityToken.decrypt(String(decoding: tampered, as: UTF8.self), keys: keys))
    }
}

/// A256KW + A256GCM + ES256 written from RFC 7516/7518 with Python's `cryptography`: nothing of ours.
enum PythonJWE {
    static let script = """
    import base64, json, os, sys
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.keywrap import aes_key_unwrap, aes_key_wrap
    except ImportError:
        print("missing"); sys.exit(0)
    def b64(text): return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    def enc(data): return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    mode = sys.argv[1]
    if mode == "open":
        kek, spki, token = base64.b64decode(sys.argv[2]), base64.b64decode(sys.argv[3]), sys.argv[4]
        head, wrapped, iv, ciphertext, tag = token.split(".")
        header = json.loads(b64(head))
        assert header["alg"] == "A256KW" and header["enc"] == "A256GCM", header
        cek = aes_key_unwrap(kek, b64(wrapped))
        jws = AESGCM(cek).decrypt(b64(iv), b64(ciphertext) + b64(tag), head.encode()).decode()
        jhead, body, signature = jws.split(".")
        assert json.loads(b64(jhead))["alg"] == "ES256"
        raw = b64(signature)
        der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        serialization.load_der_public_key(spki).verify(der, (jhead + "." + body).encode(), ec.ECDSA(hashes.SHA256()))
        print(base64.b64encode(b64(body)).decode())
    else:
        payload = base64.b64decode(sys.argv[2])
        kek, key = os.urandom(32), ec.generate_private_key(ec.SECP256R1())
        jhead = enc(json.dumps({"alg": "ES256"}).encode())
        signing_input = jhead + "." + enc(payload)
        r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        jws = signing_input + "." + enc(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
        head = enc(json.dumps({"alg": "A256KW", "enc": "A256GCM"}).encode())
        cek, iv = os.urandom(32), os.urandom(12)
        sealed = AESGCM(cek).encrypt(iv, jws.encode(), head.encode())
        token = ".".join([head, enc(aes_key_wrap(kek, cek)), enc(iv), enc(sealed[:-16]), enc(sealed[-16:])])
        spki = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        print(base64.b64encode(kek).decode(), base64.b64encode(spki).decode(), token)
    """

    /// The script's last line; nil when `cryptography` is not importable.
    static func run(_ arguments: String...) throws -> String? {
        let python = try ChildProcess(executable: "/usr/bin/env", arguments: ["python3", "-c", script] + arguments)
        XCTAssertEqual(python.waitForExit(timeout: 20), 0, python.lines.joined(separator: "\n"))
        usleep(50_000)
        let answer = python.lines.last ?? ""
        return answer == "missing" ? nil : answer
    }
}
