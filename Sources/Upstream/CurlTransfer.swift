import CCurl

// The only file of Upstream that touches libcurl: every CURL*, CURLM* and curl_slist is owned by a
// CurlTransfer and freed in its deinit; the rest of the module sees Swift values and UpstreamError.

/// curl's process-wide setup; Swift runs a global's initialiser exactly once, thread-safely.
/// What curl's read callback answers to fail the transfer.
let ccurlAbortCode = ccurl_readfunc_abort()

let curlGlobalInit: CURLcode = curl_global_init(Int(CURL_GLOBAL_DEFAULT))

/// One reusable exchange slot: an easy handle driven either by a multi handle of its own (blocking mode:
/// the calling thread drives it; Apple's APIs and the CLI) or by its event loop's `LoopMulti` (loop mode:
/// events arrive as callbacks on the loop). The multi handle holds the connection cache, so the
/// connection outlives each exchange (keep-alive).
///
/// Used by one thread at a time; `TransferPool` hands ownership from thread to thread.
final class CurlTransfer: @unchecked Sendable, UploadConsumer {
    let easy: UnsafeMutableRawPointer
    private let multi: UnsafeMutableRawPointer?

    // Loop mode: what the loop's multi handle reports, on the loop's thread.
    /// The final response's status line and headers are in.
    var onHeaders: (() -> Void)?
    /// Body bytes; false pauses the transfer until `resume()`.
    var onBody: ((UnsafeRawBufferPointer) -> Bool)?
    /// The exchange ended (cleanly or not).
    var onDone: ((Result<Void, UpstreamError>) -> Void)?
    /// Loop mode: a request body sent as it arrives from the client.
    var upload: UpstreamUpload?
    /// Loop mode: the first-byte and idle clock, kept for the handle's next exchange (closed in deinit, on
    /// the loop: a loop-mode transfer lives and goes there).
    var watchdog: Watchdog?
    private(set) var paused = false
    /// The receiver took the last bytes but is full: the next ones stay with curl until `resume()`.
    private var receiverFull = false
    private let errorBuffer: UnsafeMutablePointer<CChar>
    private var headerList: UnsafeMutablePointer<curl_slist>?
    /// CURLOPT_CONNECT_TO's one entry (curl keeps the pointer, not a copy).
    private var connectToList: UnsafeMutablePointer<curl_slist>?
    private var attached = false

    // Filled in by the callbacks while curl runs.
    private(set) var status = 0
    private(set) var responseHeaders: [HTTPField] = []
    private(set) var headersComplete = false
    private var pendingBody: [UInt8] = []
    /// nil while the exchange runs.
    private var outcome: Result<Void, UpstreamError>?
    /// Whether curl may send this exchange's request again on a new connection.
    private var resendGuard = CurlResendGuard()

    /// Loop mode: the `LoopMulti` that closes this handle's sockets (its watches must go first).
    private let socketCloser: UnsafeMutableRawPointer?

    /// `ownMulti` false: loop mode, the easy handle is added to a `LoopMulti`, `socketCloser`.
    init(ownMulti: Bool = true, socketCloser: UnsafeMutableRawPointer? = nil) throws(UpstreamError) {
        self.socketCloser = socketCloser
        guard curlGlobalInit == CURLE_OK else {
            throw .unavailable("curl_global_init failed: \(String(cString: curl_easy_strerror(curlGlobalInit)))")
        }
        guard let easy = curl_easy_init() else { throw .unavailable("curl_easy_init failed") }
        var multi: UnsafeMutableRawPointer?
        if ownMulti {
            guard let created = curl_multi_init() else {
                curl_easy_cleanup(easy)
                throw .unavailable("curl_multi_init failed")
            }
            // One cached connection per transfer: the pool's size is then the idle-connection bound.
            _ = ccurl_multi_setopt_long(created, CURLMOPT_MAXCONNECTS, 1)
            multi = created
        }
        self.easy = easy
        self.multi = multi
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    deinit {
        watchdog?.close()
        detach()
        curl_easy_cleanup(easy)
        curl_slist_free_all(connectToList)
        if let multi { curl_multi_cleanup(multi) }  // closes the cached connection
        errorBuffer.deallocate()
    }

    /// Whether the exchange ran to its end without error, so its connection may serve the next one.
    var finishedCleanly: Bool {
        if case .success = outcome { true } else { false }
    }

    var timing: UpstreamTiming {
        var connect: curl_off_t = 0
        var firstByte: curl_off_t = 0
        var newConnections = 0
        _ = ccurl_easy_getinfo_off_t(easy, CURLINFO_CONNECT_TIME_T, &connect)
        _ = ccurl_easy_getinfo_off_t(easy, CURLINFO_STARTTRANSFER_TIME_T, &firstByte)
        _ = ccurl_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &newConnections)
        return UpstreamTiming(
            connectMs: Double(connect) / 1000, firstByteMs: Double(firstByte) / 1000,
            reusedConnection: newConnections == 0)
    }

    /// The connected peer (CURLINFO_PRIMARY_IP / _PORT), for access logs; the text is made again only when
    /// the peer changed (a kept-alive connection has the same one every time).
    var remoteAddress: String? {
        var ip: UnsafePointer<CChar>?
        var port = 0
        guard ccurl_easy_getinfo_string(easy, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK, let ip, ip.pointee != 0,
              ccurl_easy_getinfo_long(easy, CURLINFO_PRIMARY_PORT, &port) == CURLE_OK else { return nil }
        let host = String(cString: ip)
        if let last = lastPeer, last.host == host, last.port == port { return last.text }
        let text = host.utf8.contains(UInt8(ascii: ":")) ? "[" + host + "]:" + String(port) : host + ":" + String(port)
        lastPeer = (host, port, text)
        return text
    }

    private var lastPeer: (host: String, port: Int, text: String)?

    /// Configures a fresh exchange (keeping the cached connection) and hands it to the multi handle.
    func start(url: String, request: UpstreamRequest, target: UpstreamTarget) throws(UpstreamError) {
        guard let multi else { throw .unavailable("a loop-mode transfer is started by its LoopMulti") }
        try prepare(url: url, request: request, target: target)
        let added = curl_multi_add_handle(multi, easy)
        guard added == CURLM_OK else { throw .unavailable(Self.describe(added)) }
        attached = true
    }

    /// A fresh exchange's options, before it is added to a multi handle. curl keeps options from one
    /// transfer to the next, so what every exchange shares is set once and the rest only when it changes
    /// (a curl_easy_reset and every option again cost ~3 % of a relayed request).
    func prepare(url: String, request: UpstreamRequest, target: UpstreamTarget, timeouts: UpstreamTimeouts? = nil,
                 upload: UpstreamUpload? = nil) throws(UpstreamError) {
        detach()
        self.upload = upload
        resendGuard = CurlResendGuard(method: request.method, idempotent: request.isIdempotent, streamed: upload != nil)
        errorBuffer[0] = 0
        if configured, target.tls != configuredTLS || target.curlAddressing != configuredAddressing {
            // Another upstream's TLS settings: back to curl's defaults (its system CAs) rather than undo each option.
            // The connection cache stays; curl reuses a connection only for matching TLS settings.
            curl_easy_reset(easy)
            (configured, configuredTimeouts, configuredMaxIdleSeconds, messageOptionsSet) = (false, nil, 0, false)
        }
        if !configured {
            try configureHandle()
            try configureTLS(target.tls, addressing: target.curlAddressing)
            (configuredTLS, configuredAddressing) = (target.tls, target.curlAddressing)
            configured = true
        }
        try set(CURLOPT_URL, url)
        let timeouts = timeouts ?? target.timeouts
        if timeouts != configuredTimeouts {
            configuredTimeouts = nil
            try set(CURLOPT_CONNECTTIMEOUT_MS, timeouts.connectMs)
            try set(CURLOPT_TIMEOUT_MS, timeouts.totalMs)  // 0: none
            configuredTimeouts = timeouts
        }
        // curl counts a connection's idle age in whole seconds (and reads no Keep-Alive hint).
        let maxIdleSeconds = max(1, target.keepAliveMs / 1000)
        if maxIdleSeconds != configuredMaxIdleSeconds {
            try set(CURLOPT_MAXAGE_CONN, maxIdleSeconds)
            configuredMaxIdleSeconds = maxIdleSeconds
        }
        try configureMessage(request, host: target.curlAddressing?.hostHeader)
    }

    /// The options every exchange of this handle shares are set.
    private var configured = false
    private var configuredTimeouts: UpstreamTimeouts?
    private var configuredMaxIdleSeconds = 0
    private var configuredTLS: UpstreamTLSSettings?
    private var configuredAddressing: CurlAddressing?
    /// The last exchange was not a plain GET (HEAD, a body, another method): the next one undoes that.
    private var messageOptionsSet = false

    /// Loop mode: the multi handle finished this exchange.
    func finished(_ code: CURLcode) {
        let result: Result<Void, UpstreamError> = code == CURLE_OK ? .success(()) : .failure(error(for: code))
        outcome = result
        let done = onDone
        onDone = nil
        done?(result)
    }

    /// Loop mode: the upload has more bytes (or its end) for curl's read callback.
    func uploadReady() { resume() }

    /// Loop mode: lets a paused transfer deliver again (curl may call back from inside this call).
    func resume() {
        receiverFull = false
        guard paused else { return }
        paused = false
        curl_easy_pause(easy, ccurl_pause_cont())
    }

    /// Runs the exchange until the final response's status line and headers are in. A failure after
    /// them (even within the same read) belongs to the body and is thrown by `nextBodyChunk()`.
    func waitForHeaders() throws(UpstreamError) {
        drive { headersComplete }
        if headersComplete { return }
        if case .failure(let error) = outcome { throw error }
        throw .protocolError("the upstream sent no response headers")
    }

    /// The body bytes that arrived since the last call, waiting for some if none did; nil at the end.
    func nextBodyChunk() throws(UpstreamError) -> [UInt8]? {
        drive { !pendingBody.isEmpty }
        if !pendingBody.isEmpty {
            let chunk = pendingBody
            pendingBody = []
            return chunk
        }
        if case .failure(let error) = outcome { throw error }
        return nil
    }

    /// Ends the exchange and forgets its state; a finished connection stays in the multi handle's cache,
    /// an unfinished one is closed by curl.
    func detach() {
        if attached, let multi {
            _ = curl_multi_remove_handle(multi, easy)
            attached = false
        }
        paused = false
        receiverFull = false
        onHeaders = nil
        onBody = nil
        onDone = nil
        upload = nil
        if headerList != nil {
            // The handle keeps its options between exchanges: it must not point at the freed list.
            _ = ccurl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, nil)
            curl_slist_free_all(headerList)
            headerList = nil
        }
        status = 0
        responseHeaders = []
        headersComplete = false
        pendingBody = []
        outcome = nil
    }

    // MARK: - Options

    private func configureHandle() throws(UpstreamError) {
        try set(CURLOPT_PROTOCOLS_STR, "http,https")
        try set(CURLOPT_PROXY, "")  // never a proxy from the environment
        try set(CURLOPT_NOSIGNAL, 1)
        try set(CURLOPT_TCP_NODELAY, 1)
        try set(CURLOPT_FOLLOWLOCATION, 0)  // redirects go back to the client
        try set(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))
        try set(CURLOPT_HTTP_CONTENT_DECODING, 0)  // compressed bodies pass through untouched
        try set(CURLOPT_PATH_AS_IS, 1)  // forward "/a/../b" as given, not squashed
        try check(ccurl_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer), CURLOPT_ERRORBUFFER)
        let context = Unmanaged.passUnretained(self).toOpaque()  // self owns the handle, so outlives it
        try check(ccurl_easy_setopt_data_callback(easy, CURLOPT_HEADERFUNCTION, onHeaderLine), CURLOPT_HEADERFUNCTION)
        try check(ccurl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context), CURLOPT_HEADERDATA)
        try check(ccurl_easy_setopt_data_callback(easy, CURLOPT_WRITEFUNCTION, onBodyBytes), CURLOPT_WRITEFUNCTION)
        try check(ccurl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context), CURLOPT_WRITEDATA)
        if let socketCloser {
            try check(ccurl_easy_setopt_closesocket(easy, loopMultiCloseSocket, socketCloser), CURLOPT_CLOSESOCKETFUNCTION)
        }
        try check(ccurl_easy_setopt_pointer(easy, CURLOPT_PRIVATE, context), CURLOPT_PRIVATE)
        try check(ccurl_easy_setopt_prereq(easy, onSending, context), CURLOPT_PREREQFUNCTION)
    }

    /// Certificate checks stay on whatever the settings (curl's defaults, stated); TLS 1.2 at least, as for Redis.
    private func configureTLS(_ tls: UpstreamTLSSettings?, addressing: CurlAddressing?) throws(UpstreamError) {
        try set(CURLOPT_SSL_VERIFYPEER, 1)
        try set(CURLOPT_SSL_VERIFYHOST, 2)
        try set(CURLOPT_SSLVERSION, Int(CURL_SSLVERSION_TLSv1_2))
        if let caFile = tls?.caFile {
            // Only this CA: without clearing CAPATH, curl would trust the system's directory of CAs as well.
            try set(CURLOPT_CAINFO, caFile)
            try check(ccurl_easy_setopt_string(easy, CURLOPT_CAPATH, nil), CURLOPT_CAPATH)
        }
        if let certFile = tls?.certFile, let keyFile = tls?.keyFile {
            try set(CURLOPT_SSLCERT, certFile)
            try set(CURLOPT_SSLKEY, keyFile)
        }
        curl_slist_free_all(connectToList)
        connectToList = nil
        if let addressing {
            guard let list = curl_slist_append(nil, addressing.connectTo) else { throw .unavailable("curl_slist_append failed") }
            connectToList = list
        }
        try check(ccurl_easy_setopt_slist(easy, CURLOPT_CONNECT_TO, connectToList), CURLOPT_CONNECT_TO)
    }

    /// `host`: the Host the upstream gets when the URL curl is given names another host (CurlAddressing).
    private func configureMessage(_ request: UpstreamRequest, host: String?) throws(UpstreamError) {
        if messageOptionsSet {
            // Back to a plain GET: no copied body (clearing it selects POST, so HTTPGET comes after), no body
            // size, no custom method; HTTPGET also ends HEAD's NOBODY.
            try check(ccurl_easy_setopt_pointer(easy, CURLOPT_POSTFIELDS, nil), CURLOPT_POSTFIELDS)
            try check(ccurl_easy_setopt_off_t(easy, CURLOPT_POSTFIELDSIZE_LARGE, -1), CURLOPT_POSTFIELDSIZE_LARGE)
            try check(ccurl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, nil), CURLOPT_CUSTOMREQUEST)
            try set(CURLOPT_HTTPGET, 1)
            messageOptionsSet = false
        }
        let sendsBody = upload != nil || request.sendsBody
        if request.method != "GET" || sendsBody { messageOptionsSet = true }
        if request.method == "HEAD" {
            try set(CURLOPT_NOBODY, 1)
        } else if let upload {
            // Streamed: curl pulls the body through the read callback, with the client's length or chunked.
            try set(CURLOPT_POST, 1)
            try check(ccurl_easy_setopt_off_t(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(upload.length ?? -1)), CURLOPT_POSTFIELDSIZE_LARGE)
            try check(ccurl_easy_setopt_read_callback(easy, onUploadRead), CURLOPT_READFUNCTION)
            try check(ccurl_easy_setopt_pointer(easy, CURLOPT_READDATA, Unmanaged.passUnretained(self).toOpaque()), CURLOPT_READDATA)
            if request.method != "POST" { try set(CURLOPT_CUSTOMREQUEST, request.method) }
        } else if request.sendsBody {
            let bodySet = request.body.withUnsafeBytes {
                ccurl_easy_set_request_body(easy, $0.baseAddress, curl_off_t($0.count))
            }
            try check(bodySet, CURLOPT_COPYPOSTFIELDS)
            if request.method != "POST" { try set(CURLOPT_CUSTOMREQUEST, request.method) }
        } else if request.method != "GET" {
            try set(CURLOPT_CUSTOMREQUEST, request.method)
        }
        var lines = request.curlHeaderLines(sendsBody: sendsBody)
        if let host, !request.headers.contains(where: { $0.hasName("Host") }) { lines += "Host: \(host)\0".utf8 }
        try lines.withUnsafeBufferPointer { (buffer) throws(UpstreamError) in
            var start = 0
            while start < buffer.count, let base = buffer.baseAddress {
                // curl copies each line up to its NUL.
                guard let extended = (base + start).withMemoryRebound(to: CChar.self, capacity: 1, { curl_slist_append(headerList, $0) }) else {
                    throw .unavailable("curl_slist_append failed")
                }
                headerList = extended
                start = (buffer[start...].firstIndex(of: 0) ?? buffer.count - 1) + 1
            }
        }
        try check(ccurl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList), CURLOPT_HTTPHEADER)
    }

    private func set(_ option: CURLoption, _ value: Int) throws(UpstreamError) {
        try check(ccurl_easy_setopt_long(easy, option, value), option)
    }

    private func set(_ option: CURLoption, _ value: String) throws(UpstreamError) {
        try check(ccurl_easy_setopt_string(easy, option, value), option)  // curl copies the string
    }

    private func check(_ code: CURLcode, _ option: CURLoption) throws(UpstreamError) {
        guard code == CURLE_OK else {
            throw .unavailable("curl refused option \(option.rawValue): \(String(cString: curl_easy_strerror(code)))")
        }
    }

    // MARK: - Driving

    /// Lets curl work until `ready` holds or the exchange ends. Every wait is bounded by the transfer's
    /// total timeout, which curl enforces inside perform/poll.
    private func drive(until ready: () -> Bool) {
        guard let multi else { return fail("a loop-mode transfer is driven by its loop") }
        while outcome == nil, !ready() {
            var running: Int32 = 0
            let performed = curl_multi_perform(multi, &running)
            guard performed == CURLM_OK else { return fail(Self.describe(performed)) }
            collectOutcome()
            if outcome != nil || ready() { return }
            let polled = curl_multi_poll(multi, nil, 0, 1000, nil)
            guard polled == CURLM_OK else { return fail(Self.describe(polled)) }
        }
    }

    private func collectOutcome() {
        var queued: Int32 = 0
        while let message = curl_multi_info_read(multi, &queued) {
            guard message.pointee.msg == CURLMSG_DONE else { continue }
            let result = ccurl_msg_result(message)
            outcome = result == CURLE_OK ? .success(()) : .failure(error(for: result))
        }
    }

    private func fail(_ detail: String) {
        outcome = .failure(.unavailable(detail))
    }

    func error(for code: CURLcode) -> UpstreamError {
        let detail = errorBuffer[0] == 0 ? String(cString: curl_easy_strerror(code)) : String(cString: errorBuffer)
        switch code {
        case CURLE_SEND_FAIL_REWIND:
            return resendGuard.refusal  // a streamed body's bytes went out: curl cannot send it again
        case CURLE_ABORTED_BY_CALLBACK where resendGuard.refused:
            return resendGuard.refusal
        case CURLE_OPERATION_TIMEDOUT:
            return .timeout(detail)
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
             CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_CLIENTCERT, CURLE_SSL_CRL_BADFILE,
             CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_ENGINE_NOTFOUND,
             CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED, CURLE_USE_SSL_FAILED:
            return .tlsFailed(detail)
        case CURLE_SEND_ERROR where detail.contains("SSL routines"), CURLE_RECV_ERROR where detail.contains("SSL routines"):
            // An alert from the peer's TLS (not a socket error): under TLS 1.3 a server refuses a missing or
            // untrusted client certificate after the handshake, so curl meets it on the first read.
            return .tlsFailed(detail)
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_CONNECT, CURLE_SEND_ERROR, CURLE_RECV_ERROR,
             CURLE_GOT_NOTHING, CURLE_OUT_OF_MEMORY:
            return .unavailable(detail)
        case CURLE_URL_MALFORMAT:
            return .invalidRequest(detail)
        default:
            return .protocolError(detail)
        }
    }

    private static func describe(_ code: CURLMcode) -> String {
        "curl multi: \(String(cString: curl_multi_strerror(code)))"
    }

    // MARK: - Callback targets

    /// One raw header line as curl delivers it (CRLF included), parsed as bytes: building a String per
    /// line and trimming it by Characters cost 3 % of a pass-through request.
    fileprivate func receiveHeader(_ line: UnsafeRawBufferPointer) {
        guard !headersComplete else { return }  // trailers after a chunked body
        var bytes = line[...]
        while let last = bytes.last, last == 0x0A || last == 0x0D { bytes = bytes.dropLast() }
        if bytes.isEmpty {
            endHeaderBlock()
        } else if bytes.starts(with: "HTTP/".utf8) {
            responseHeaders = []  // status line of a new (possibly interim) response
            responseHeaders.reserveCapacity(16)
        } else if let first = bytes.first, first == 0x20 || first == 0x09, !responseHeaders.isEmpty {
            responseHeaders[responseHeaders.count - 1].value += " " + Self.trimmedText(bytes)  // obs-fold
        } else if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
            responseHeaders.append(HTTPField(Self.trimmedText(bytes[..<colon]), Self.trimmedText(bytes[(colon + 1)...])))
        }
    }

    /// The bytes without surrounding spaces and tabs, as text (invalid UTF-8 becomes U+FFFD).
    private static func trimmedText(_ bytes: Slice<UnsafeRawBufferPointer>) -> String {
        var trimmed = bytes
        while let first = trimmed.first, first == 0x20 || first == 0x09 { trimmed = trimmed.dropFirst() }
        while let last = trimmed.last, last == 0x20 || last == 0x09 { trimmed = trimmed.dropLast() }
        return String(decoding: trimmed, as: UTF8.self)
    }

    /// A blank line ends a header block; interim 1xx blocks are dropped and the final one awaited.
    private func endHeaderBlock() {
        var code = 0
        _ = ccurl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &code)
        if code >= 200 {
            status = code
            headersComplete = true
            onHeaders?()
        } else {
            responseHeaders = []
        }
    }

    /// False: curl pauses the transfer and delivers the same bytes again after `resume()`.
    fileprivate func receiveBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if let onBody {
            // Bytes handed to the receiver are consumed even when it then reports full: only the next
            // delivery is refused (paused), or curl would hand the same bytes over again.
            if receiverFull {
                paused = true
                return false
            }
            if !onBody(bytes) { receiverFull = true }
            return true
        }
        // Loop mode before anyone relays the body: a bounded amount waits, then curl pauses.
        if multi == nil && pendingBody.count >= 64 * 1024 {
            paused = true
            return false
        }
        pendingBody.append(contentsOf: bytes)
        return true
    }

    /// Loop mode: the next upload bytes for curl; nil = none yet (curl pauses until `resume()`).
    fileprivate func readUpload(_ buffer: UnsafeMutableRawBufferPointer) -> Int? {
        guard let upload else { return 0 }
        guard let count = upload.take(into: buffer) else {
            paused = true
            return nil
        }
        return count
    }

    /// curl is about to send the request (again, after a reused connection died): false stops it.
    fileprivate func admitSending() -> Bool { resendGuard.admitSending() }

    /// Loop mode: body bytes that arrived before anyone took them (read once, by whoever relays the body).
    func takePendingBody() -> [UInt8] {
        defer { pendingBody = [] }
        return pendingBody
    }
}

private func onHeaderLine(buffer: UnsafeMutablePointer<CChar>?, size: Int, count: Int, context: UnsafeMutableRawPointer?) -> Int {
    guard let context else { return 0 }
    Unmanaged<CurlTransfer>.fromOpaque(context).takeUnretainedValue()
        .receiveHeader(UnsafeRawBufferPointer(start: buffer, count: size * count))
    return size * count
}

private func onBodyBytes(buffer: UnsafeMutablePointer<CChar>?, size: Int, count: Int, context: UnsafeMutableRawPointer?) -> Int {
    guard let context else { return 0 }
    let accepted = Unmanaged<CurlTransfer>.fromOpaque(context).takeUnretainedValue()
        .receiveBody(UnsafeRawBufferPointer(start: buffer, count: size * count))
    return accepted ? size * count : ccurl_writefunc_pause()
}

private func onUploadRead(buffer: UnsafeMutablePointer<CChar>?, size: Int, count: Int, context: UnsafeMutableRawPointer?) -> Int {
    guard let context, let buffer else { return 0 }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(context).takeUnretainedValue()
    return transfer.readUpload(UnsafeMutableRawBufferPointer(start: buffer, count: size * count)) ?? ccurl_readfunc_pause()
}

private func onSending(context: UnsafeMutableRawPointer?, _: UnsafeMutablePointer<CChar>?, _: UnsafeMutablePointer<CChar>?,
                       _: Int32, _: Int32) -> Int32 {
    guard let context else { return CURL_PREREQFUNC_ABORT }
    return Unmanaged<CurlTransfer>.fromOpaque(context).takeUnretainedValue().admitSending() ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT
}
