import EventLoop
import Foundation
@testable import RedisClient
import TLS
import TestSupport
import XCTest

/// TLS to a real `redis-server --tls-port` with a CA made for the test: handshake, verification, client
/// certificates, big payloads both ways, writes queued during the handshake, the server hanging up.
final class TLSStreamTests: XCTestCase {
    private var loop: EventLoop!

    override func setUpWithError() throws {
        signal(SIGPIPE, SIG_IGN)
        loop = try EventLoop(name: "tls-test")
        loop.start()
    }

    override func tearDown() {
        loop.stop()
    }

    // MARK: Handshake and verification

    func testHandshakeThenPingGetsPong() throws {
        let server = try RedisTLSTestServer()
        defer { server.stop() }
        for host in ["localhost", "127.0.0.1"] {
            let stream = try connected(server, RedisTLSSettings(caFile: server.certificates.caFile), host: host)
            let recorder = listen(stream)
            send(stream, ["PING"])
            XCTAssertEqual(try recorder.replies(1), [.status("PONG")], "via \(host)")
            close(stream)
        }
    }

    func testWithoutTLSTheStreamIsPlainTCP() throws {
        let server = try RedisTestServer()
        defer { server.stop() }
        let loop: EventLoop = self.loop
        let result = Locked<Result<Unchecked<any RedisStream>, RedisClientError>?>(nil)
        loop.executeOnLoop {
            connectRedisStream(loop, host: "127.0.0.1", port: server.port, tls: nil) { outcome in
                result.withLock { $0 = outcome.map { Unchecked($0) } }
            }
        }
        try waitUntil(timeout: 10, "the TCP connection") { result.withLock { $0 } != nil }
        let stream = try result.withLock { $0 }!.get()
        XCTAssertTrue(stream.value is TCPConnection)
        let recorder = listen(stream)
        send(stream, ["PING"])
        XCTAssertEqual(try recorder.replies(1), [.status("PONG")])
        close(stream)
    }

    func testAuthWithPassword() throws {
        let server = try RedisTLSTestServer(password: "s3cret")
        defer { server.stop() }
        let stream = try connected(server, RedisTLSSettings(caFile: server.certificates.caFile))
        let recorder = listen(stream)
        send(stream, ["PING"], ["AUTH", "s3cret"], ["PING"])
        let replies = try recorder.replies(3)
        guard case .error(let refused) = replies[0] else { return XCTFail("PING before AUTH must be refused: \(replies)") }
        XCTAssertTrue(refused.hasPrefix("NOAUTH"), refused)
        XCTAssertEqual(Array(replies[1...]), [.status("OK"), .status("PONG")])
        close(stream)
    }

    func testAClientCertificateTheServerRequiresIsPresented() throws {
        let server = try RedisTLSTestServer(requireClientCertificate: true)
        defer { server.stop() }
        let certificates = server.certificates
        let stream = try connected(server, RedisTLSSettings(caFile: certificates.caFile, certFile: certificates.clientCertFile,
                                                            keyFile: certificates.clientKeyFile))
        let recorder = listen(stream)
        send(stream, ["PING"])
        XCTAssertEqual(try recorder.replies(1), [.status("PONG")])
        close(stream)
    }

    func testWithoutTheRequiredClientCertificateTheConnectionFailsClearly() throws {
        let server = try RedisTLSTestServer(requireClientCertificate: true)
        defer { server.stop() }
        // TLS 1.3: the client's side of the handshake completes before the server checks its certificate, so the
        // refusal (an alert) may arrive with the first read rather than fail the handshake.
        let message: String
        switch try connect(server, RedisTLSSettings(caFile: server.certificates.caFile)) {
        case .failure(let error):
            message = "\(error)"
        case .success(let stream):
            // Let the refusal arrive before anyone reads: it must wait for the reader, not be lost.
            usleep(300_000)
            let recorder = listen(stream)
            send(stream, ["PING"])
            let ended = try recorder.waitForEnd()
            XCTAssertTrue(recorder.replies.isEmpty, "no reply without the client certificate")
            message = ended.map { "\($0)" } ?? "the server closed the connection without a reason"
            close(stream)
        }
        XCTAssertTrue(message.contains("certificate required"), message)
        XCTAssertTrue(message.contains("the server requires a client certificate"), message)
    }

    func testAServerCertificateFromAnotherCAIsRefused() throws {
        let server = try RedisTLSTestServer()
        defer { server.stop() }
        let message = try failure(server, RedisTLSSettings(caFile: server.certificates.wrongCAFile))
        XCTAssertTrue(message.contains("TLS handshake with localhost:\(server.port) failed"), message)
        // redis-server sends its CA along with its certificate: that root is what the other CA does not know.
        XCTAssertTrue(message.contains("certificate verify failed (self-signed certificate in certificate chain)"), message)
        // The system's CA store does not know the test CA either.
        let system = try failure(server, RedisTLSSettings())
        XCTAssertTrue(system.contains("certificate verify failed (self-signed certificate in certificate chain)"), system)
    }

    func testAServerNameTheCertificateDoesNotCarryIsRefused() throws {
        let server = try RedisTLSTestServer()
        defer { server.stop() }
        let ca = server.certificates.caFile
        let wrongName = try failure(server, RedisTLSSettings(caFile: ca, serverName: "wrong.example"))
        XCTAssertTrue(wrongName.contains("certificate verify failed"), wrongName)
        XCTAssertTrue(wrongName.contains("hostname mismatch"), wrongName)
        let wrongAddress = try failure(server, RedisTLSSettings(caFile: ca, serverName: "127.0.0.2"), host: "127.0.0.1")
        XCTAssertTrue(wrongAddress.contains("IP address mismatch"), wrongAddress)
        // A partial wildcard or a suffix is no match either.
        let suffix = try failure(server, RedisTLSSettings(caFile: ca, serverName: "host"), host: "127.0.0.1")
        XCTAssertTrue(suffix.contains("hostname mismatch"), suffix)
    }

    func testAStalledHandshakeTimesOutOnce() throws {
        // A listener that accepts and never answers: the server side of a handshake that never comes.
        let loop: EventLoop = self.loop
        let silent = Unchecked(loop.sync { () -> (TCPListener, Unchecked<NSMutableArray>)? in
            let held = NSMutableArray()
            guard let listener = try? TCPListener(loop, host: "127.0.0.1", port: 0, ipv6: false, exclusive: false,
                                                  accepted: { held.add($0) }) else { return nil }
            return (listener, Unchecked(held))
        })
        guard let (listener, _) = silent.value else { return XCTFail("no listener") }
        defer { loop.sync { listener.close() } }
        let context = try RedisTLSContext(RedisTLSSettings())
        let calls = Locked(0)
        let result = Locked<Result<Unchecked<any RedisStream>, RedisClientError>?>(nil)
        let started = Date()
        loop.executeOnLoop {
            connectRedisStream(loop, host: "127.0.0.1", port: listener.port, tls: context, handshakeTimeoutMs: 300) { outcome in
                calls.withLock { $0 += 1 }
                result.withLock { $0 = outcome.map { Unchecked($0) } }
            }
        }
        try waitUntil(timeout: 5, "the handshake timeout") { calls.withLock { $0 } > 0 }
        XCTAssertLessThan(Date().timeIntervalSince(started), 3)
        guard case .failure(.timeout(let message))? = result.withLock({ $0 }) else {
            return XCTFail("expected a timeout, got \(String(describing: result.withLock { $0 }))")
        }
        XCTAssertTrue(message.contains("did not complete within 300 ms"), message)
        usleep(500_000)
        XCTAssertEqual(calls.withLock { $0 }, 1, "done is called exactly once")
    }

    // MARK: Data

    func testAOneMegabyteValueRoundTripsIntact() throws {
        let server = try RedisTLSTestServer()
        defer { server.stop() }
        let stream = try connected(server, RedisTLSSettings(caFile: server.certificates.caFile))
        let recorder = listen(stream)
        // Binary, with CR LF and every byte value: many TLS records each way.
        let value = (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255) }
        send(stream, [Array("SET".utf8), Array("big".utf8), value], [Array("GET".utf8), Array("big".utf8)])
        let replies = try recorder.replies(2, timeout: 20)
        XCTAssertEqual(replies.first, .status("OK"))
        guard case .string(let read) = replies.last else { return XCTFail("no bulk reply: \(replies.last.map(\.kind) ?? "none")") }
        XCTAssertEqual(read.count, value.count)
        XCTAssertTrue(read == value, "the value came back altered")
        close(stream)
    }

    func testCommandsWrittenBeforeTheHandshakeFinishedAreDelivered() throws {
        let server = try RedisTLSTestServer()
        defer { server.stop() }
        let context = try RedisTLSContext(RedisTLSSettings(caFile: server.certificates.caFile))
        let loop: EventLoop = self.loop
        let recorder = Recorder()
        let handshake = Locked<RedisClientError??>(nil)
        let writtenBeforeHandshake = Locked(false)
        let stream = Locked<Unchecked<TLSStream>?>(nil)
        loop.executeOnLoop {
            TCPConnection.connect(loop, host: "localhost", port: server.port) { connected in
                guard case .success(let connection) = connected else { return handshake.withLock { $0 = .some(.unavailable("no TCP")) } }
                let tls = TLSStream.start(over: connection, loop: loop, context: context, host: "localhost", port: server.port) { result in
                    handshake.withLock { $0 = .some(result.failure) }
                }
                guard let tls else { return }
                stream.withLock { $0 = Unchecked(tls) }
                tls.delegate = recorder
                tls.startReading()
                writtenBeforeHandshake.withLock { $0 = handshake.withLock { $0 } == nil }
                var bytes: [UInt8] = []
                RESP.encode([Array("SET".utf8), Array("early".utf8), Array("bird".utf8)], into: &bytes)
                tls.write(bytes)
                bytes = []
                RESP.encode([Array("GET".utf8), Array("early".utf8)], into: &bytes)
                tls.write(bytes)
            }
        }
        XCTAssertEqual(try recorder.replies(2), [.status("OK"), .string(Array("bird".utf8))])
        XCTAssertTrue(writtenBeforeHandshake.withLock { $0 }, "the writes must have happened before the handshake completed")
        XCTAssertEqual(handshake.withLock { $0 }, .some(nil), "the handshake succeeded")
        if let tls = stream.withLock({ $0 }) { loop.sync { tls.value.close() } }
    }

    func testTheServerClosingTheConnectionEndsReading() throws {
        let server = try RedisTLSTestServer()
        defer { server.stop() }
        let stream = try connected(server, RedisTLSSettings(caFile: server.certificates.caFile))
        let recorder = listen(stream)
        send(stream, ["CLIENT", "SETNAME", "doomed"])
        XCTAssertEqual(try recorder.replies(1), [.status("OK")])
        XCTAssertEqual(try server.node.query("CLIENT", "KILL", "TYPE", "normal"), "1")
        let ended = try recorder.waitForEnd()
        XCTAssertNil(ended, "a server hanging up is a clean end, not \(String(describing: ended))")
        // Writing after the end is harmless.
        send(stream, ["PING"])
        close(stream)
    }

    func testAStoppedServerEndsReading() throws {
        let server = try RedisTLSTestServer()
        let stream = try connected(server, RedisTLSSettings(caFile: server.certificates.caFile))
        let recorder = listen(stream)
        send(stream, ["PING"])
        XCTAssertEqual(try recorder.replies(1), [.status("PONG")])
        server.stop()
        _ = try recorder.waitForEnd()
        close(stream)
    }

    // MARK: Context errors

    func testContextErrorsNameTheFileAndTheReason() throws {
        let certificates = try TestCertificates()
        defer { try? FileManager.default.removeItem(atPath: certificates.directory) }
        XCTAssertEqual(contextError(RedisTLSSettings(caFile: "/nonexistent/ca.crt")),
                       "cannot read CA file /nonexistent/ca.crt: No such file or directory")
        let notACA = contextError(RedisTLSSettings(caFile: certificates.clientKeyFile))
        XCTAssertTrue(notACA?.hasPrefix("cannot load CA file \(certificates.clientKeyFile): ") == true, notACA ?? "accepted")
        XCTAssertEqual(contextError(RedisTLSSettings(certFile: certificates.clientCertFile, keyFile: certificates.serverKeyFile)),
                       "key file \(certificates.serverKeyFile) does not match certificate file \(certificates.clientCertFile)")
        XCTAssertEqual(contextError(RedisTLSSettings(certFile: certificates.clientCertFile, keyFile: "/nonexistent/client.key")),
                       "cannot read key file /nonexistent/client.key: No such file or directory")
        let onlyCertificate = contextError(RedisTLSSettings(certFile: certificates.clientCertFile))
        XCTAssertTrue(onlyCertificate?.contains("without a key file") == true, onlyCertificate ?? "accepted")
        let onlyKey = contextError(RedisTLSSettings(keyFile: certificates.clientKeyFile))
        XCTAssertTrue(onlyKey?.contains("without a certificate file") == true, onlyKey ?? "accepted")
        let notACertificate = contextError(RedisTLSSettings(certFile: certificates.clientKeyFile, keyFile: certificates.clientKeyFile))
        XCTAssertTrue(notACertificate?.hasPrefix("cannot load certificate file") == true, notACertificate ?? "accepted")
        XCTAssertNotNil(contextError(RedisTLSSettings(serverName: "")), "an empty server name would turn the name check off")
        XCTAssertEqual(contextError(RedisTLSSettings(caFile: certificates.directory)),
                       "cannot read CA file \(certificates.directory): Is a directory")
        // A passphrase-protected key fails at once instead of prompting on the terminal.
        let encryptedKey = certificates.directory + "/encrypted.key"
        let encrypted = try Command.run("openssl", ["pkey", "-in", certificates.clientKeyFile, "-aes256", "-passout", "pass:secret",
                                                    "-out", encryptedKey])
        XCTAssertEqual(encrypted.status, 0, encrypted.output)
        let locked = contextError(RedisTLSSettings(certFile: certificates.clientCertFile, keyFile: encryptedKey))
        XCTAssertEqual(locked, "cannot load key file \(encryptedKey): it is passphrase-protected, which is not supported")
        XCTAssertNil(contextError(RedisTLSSettings(caFile: certificates.caFile, certFile: certificates.clientCertFile,
                                                   keyFile: certificates.clientKeyFile)))
    }

    // MARK: Helpers

    private func contextError(_ settings: RedisTLSSettings) -> String? {
        do {
            _ = try RedisTLSContext(settings)
            return nil
        } catch {
            return error.message
        }
    }

    /// `connectRedisStream` with TLS, waited for from the test thread.
    private func connect(_ server: RedisTLSTestServer, _ settings: RedisTLSSettings, host: String = "localhost")
        throws -> Result<Unchecked<any RedisStream>, RedisClientError> {
        let context = try RedisTLSContext(settings)
        let loop: EventLoop = self.loop
        let result = Locked<Result<Unchecked<any RedisStream>, RedisClientError>?>(nil)
        loop.executeOnLoop {
            connectRedisStream(loop, host: host, port: server.port, tls: context, handshakeTimeoutMs: 5_000) { outcome in
                result.withLock { $0 = outcome.map { Unchecked($0) } }
            }
        }
        try waitUntil(timeout: 10, "the TLS connection") { result.withLock { $0 } != nil }
        return result.withLock { $0 }!
    }

    private func connected(_ server: RedisTLSTestServer, _ settings: RedisTLSSettings, host: String = "localhost")
        throws -> Unchecked<any RedisStream> {
        try connect(server, settings, host: host).get()
    }

    /// The handshake's error message; fails the test when it succeeded.
    private func failure(_ server: RedisTLSTestServer, _ settings: RedisTLSSettings, host: String = "localhost") throws -> String {
        switch try connect(server, settings, host: host) {
        case .success(let stream):
            close(stream)
            XCTFail("the handshake must fail")
            return ""
        case .failure(let error):
            return error.message
        }
    }

    private func listen(_ stream: Unchecked<any RedisStream>) -> Recorder {
        let recorder = Recorder()
        loop.sync {
            stream.value.delegate = recorder
            stream.value.startReading()
        }
        return recorder
    }

    private func send(_ stream: Unchecked<any RedisStream>, _ commands: [String]...) {
        send(stream, commands.map { $0.map { Array($0.utf8) } })
    }

    private func send(_ stream: Unchecked<any RedisStream>, _ commands: [[UInt8]]...) {
        send(stream, commands)
    }

    private func send(_ stream: Unchecked<any RedisStream>, _ commands: [[[UInt8]]]) {
        var bytes: [UInt8] = []
        for command in commands { RESP.encode(command, into: &bytes) }
        let carried = Unchecked(bytes)
        loop.sync { stream.value.write(carried.value) }
    }

    private func close(_ stream: Unchecked<any RedisStream>) {
        loop.sync { stream.value.close() }
    }
}

/// What a stream tells its delegate (on the loop), read from the test thread.
private final class Recorder: TCPConnectionDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var bytes: [UInt8] = []
    /// nil: still reading; .some(nil): a clean end.
    private var ended: LoopError??

    func received(_ chunk: UnsafeRawBufferPointer) { lock.withLock { bytes.append(contentsOf: chunk) } }
    func readEnded(error: LoopError?) { lock.withLock { ended = .some(error) } }
    func drained() {}

    /// Every complete reply so far.
    var replies: [RedisReply] {
        let received = lock.withLock { bytes }
        var replies: [RedisReply] = []
        var offset = 0
        while let (reply, end) = try? RESP.parse(received, from: offset) {
            replies.append(reply)
            offset = end
        }
        return replies
    }

    /// Waits for `count` replies.
    func replies(_ count: Int, timeout: TimeInterval = 10) throws -> [RedisReply] {
        try waitUntil(timeout: timeout, "\(count) replies") { replies.count >= count || lock.withLock { ended != nil } }
        return replies
    }

    /// Waits for the end of reading; its error.
    func waitForEnd(timeout: TimeInterval = 10) throws -> LoopError? {
        try waitUntil(timeout: timeout, "the end of reading") { lock.withLock { ended != nil } }
        return lock.withLock { ended! }
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
