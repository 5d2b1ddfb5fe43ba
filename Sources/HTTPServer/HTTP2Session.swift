import CNGHTTP2
import Upstream

// The only file that touches libnghttp2: `HTTP2Session` owns one server session (framing, HPACK, flow control,
// the protocol's own checks) and turns its C callbacks into calls on its delegate. Loop thread only.

/// What a session reports while it reads frames (`receive`) or writes them (`send`).
protocol HTTP2SessionDelegate: AnyObject {
    /// A request stream begins; false refuses it (RST_STREAM REFUSED_STREAM: the client may retry it).
    func streamOpened(_ stream: Int32) -> Bool
    /// A request header (pseudo-headers included); false resets the stream (its list grew past the limit).
    func header(_ stream: Int32, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Bool
    /// The request's header block is complete; `endStream`: no body follows.
    func headersDone(_ stream: Int32, endStream: Bool)
    func data(_ stream: Int32, _ bytes: UnsafeRawBufferPointer)
    /// The request body ended (END_STREAM on DATA or trailers).
    func bodyDone(_ stream: Int32)
    func streamClosed(_ stream: Int32, errorCode: UInt32)
    /// A frame that carries no request progress: what floods are made of.
    func controlFrame(_ kind: HTTP2Session.ControlFrame)
    /// Response body bytes for `stream` copied into `buffer`.
    func responseData(_ stream: Int32, into buffer: UnsafeMutableRawBufferPointer) -> HTTP2Session.DataChunk
}

final class HTTP2Session {
    enum ControlFrame { case settings, ping, reset, other }

    enum DataChunk {
        /// `count` bytes copied; `last`: the body ends with them.
        case bytes(Int, last: Bool)
        /// Nothing yet: `resumeData` when there is.
        case deferred
    }

    /// RFC 9113 error codes the gateway sends.
    enum ErrorCode: UInt32 {
        case noError = 0x0, protocolError = 0x1, internalError = 0x2, refusedStream = 0x7, cancel = 0x8, compressionError = 0x9, enhanceYourCalm = 0xB
    }

    struct Settings {
        var maxConcurrentStreams: Int
        var maxHeaderListBytes: Int
        /// What nghttp2 itself allows before it ends the connection (GOAWAY): the streams past `maxConcurrentStreams`
        /// are refused one by one (the delegate's `streamOpened`), and nghttp2 counts a refused stream until its
        /// RST_STREAM is out — a read of many HEADERS frames at once. Past this margin a client is not retrying.
        var hardStreamLimit: Int { maxConcurrentStreams + 100 }
        /// Per stream: what a client may send ahead of the consumer.
        var streamWindow = 64 * 1024
        /// All streams of a connection together: what one connection can make the gateway hold in request bodies
        /// not yet taken (16,384 connections × 256 KiB = 4 GiB at worst; HTTP/1.1 holds 64 KiB of pipelined bytes).
        var connectionWindow = 256 * 1024
    }

    private var session: OpaquePointer?
    /// `max_concurrent_streams` as the client is told it, written into the first SETTINGS frame on its way out
    /// (nghttp2 is given `hardStreamLimit`: it answers a stream past its own limit with GOAWAY, ending the admitted
    /// streams too, where the limit wants only the extra ones refused).
    private var advertisedStreams: UInt32?
    weak var delegate: (any HTTP2SessionDelegate)?

    init(settings: Settings) throws(HTTPServerError) {
        var callbacks: OpaquePointer?
        var option: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, nghttp2_option_new(&option) == 0 else {
            throw .startFailed("HTTP/2", "out of memory")
        }
        defer {
            nghttp2_session_callbacks_del(callbacks)
            nghttp2_option_del(option)
        }
        Self.install(callbacks)
        // Windows open only as the consumer takes the bytes (`consumed`): back-pressure per stream.
        nghttp2_option_set_no_auto_window_update(option, 1)
        // RFC 7540 priorities cost work per PRIORITY frame and buy nothing for a proxy.
        nghttp2_option_set_max_settings(option, 16)
        nghttp2_option_set_max_outbound_ack(option, 100)
        nghttp2_option_set_max_continuations(option, 8)
        // A closed stream is dropped at once, not kept for RFC 7540's priority tree (which the gateway does not use).
        nghttp2_option_set_no_closed_streams(option, 1)
        let user = Unmanaged.passUnretained(self).toOpaque()
        var created: OpaquePointer?
        guard nghttp2_session_server_new2(&created, callbacks, user, option) == 0, let created else {
            throw .startFailed("HTTP/2", "cannot create a session")
        }
        session = created
        advertisedStreams = UInt32(settings.maxConcurrentStreams)
        var entries = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: UInt32(settings.hardStreamLimit)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: UInt32(settings.streamWindow)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: UInt32(settings.maxHeaderListBytes)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
        ]
        nghttp2_submit_settings(created, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entries, entries.count)
        nghttp2_session_set_local_window_size(created, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(settings.connectionWindow))
    }

    deinit { nghttp2_session_del(session) }

    /// Frames from the peer. nil, or the reason code of a fatal error (the session then only says GOAWAY).
    func receive(_ bytes: UnsafeRawBufferPointer) -> String? {
        let count = nghttp2_session_mem_recv(session, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        guard count < 0 else { return nil }
        switch Int32(count) {
        case NGHTTP2_ERR_FLOODED.rawValue: return "control_flood"
        case NGHTTP2_ERR_TOO_MANY_CONTINUATIONS.rawValue: return "continuation_flood"
        case NGHTTP2_ERR_HEADER_COMP.rawValue: return "compression_error"
        case NGHTTP2_ERR_NOMEM.rawValue: return "internal_error"
        default: return "protocol_error"
        }
    }

    /// Hands the frames waiting to go out to `write` (valid during the call) until it answers false or none is left.
    func send(_ write: (UnsafeRawBufferPointer) -> Bool) {
        while true {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &data)
            guard count > 0, let data else { return }
            let frame = UnsafeRawBufferPointer(start: data, count: count)
            // nghttp2 hands out one frame per call; the first SETTINGS (not an ACK) is the one submitted in init.
            if let advertised = advertisedStreams, count >= 9, frame[3] == 0x4, frame[4] & 0x1 == 0 {
                advertisedStreams = nil
                var patched = Array(frame)
                for entry in stride(from: 9, to: count - 5, by: 6) where patched[entry] == 0 && patched[entry + 1] == 0x3 {
                    withUnsafeBytes(of: advertised.bigEndian) { patched.replaceSubrange(entry + 2..<entry + 6, with: $0) }
                }
                if !patched.withUnsafeBytes(write) { return }
                continue
            }
            if !write(frame) { return }
        }
    }

    /// The session has nothing more to read or write (after GOAWAY both ways, or a fatal error).
    var isFinished: Bool { nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 }

    /// The response head; its body is asked of the delegate (`responseData`) unless `hasBody` is false.
    func respond(_ stream: Int32, status: Int, headers: [HTTPField], contentLength: Int?, hasBody: Bool) -> Bool {
        // Names and values side by side in one buffer kept for the next response (nghttp2 copies them, lower-casing
        // the names as it does): no String and no allocation per field.
        var flat = headBytes, spans = headSpans
        (headBytes, headSpans) = ([], [])  // the buffers stay uniquely held while they are filled
        flat.removeAll(keepingCapacity: true)
        spans.removeAll(keepingCapacity: true)
        func add(_ name: String, _ value: String, flags: UInt8 = UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)) {
            let nameStart = flat.count
            flat.append(contentsOf: name.utf8)
            let valueStart = flat.count
            flat.append(contentsOf: value.utf8)
            spans.append(HeadSpan(name: nameStart..<valueStart, value: valueStart..<flat.count, flags: flags))
        }
        func add(_ name: StaticString, decimal number: Int) {
            let nameStart = flat.count
            flat.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            let valueStart = flat.count
            Self.appendDecimal(number, to: &flat)
            spans.append(HeadSpan(name: nameStart..<valueStart, value: valueStart..<flat.count, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
        }
        add(":status", decimal: status)
        for field in headers where !Self.connectionSpecific(field) {
            add(field.name, field.value, flags: Self.indexFlags(field))
        }
        if let contentLength { add("content-length", decimal: contentLength) }
        let result: Int32 = flat.withUnsafeMutableBufferPointer { buffer in
            withUnsafeTemporaryAllocation(of: nghttp2_nv.self, capacity: spans.count) { nva in
                let base = buffer.baseAddress!
                for (index, span) in spans.enumerated() {
                    nva[index] = nghttp2_nv(name: base + span.name.lowerBound, value: base + span.value.lowerBound,
                                            namelen: span.name.count, valuelen: span.value.count, flags: span.flags)
                }
                guard hasBody else { return nghttp2_submit_response(session, stream, nva.baseAddress, nva.count, nil) }
                var provider = nghttp2_data_provider()
                provider.read_callback = { _, stream, buffer, length, flags, _, user in
                    guard let user, let buffer, let flags else { return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) }
                    let session = Unmanaged<HTTP2Session>.fromOpaque(user).takeUnretainedValue()
                    guard let delegate = session.delegate else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
                    switch delegate.responseData(stream, into: UnsafeMutableRawBufferPointer(start: buffer, count: length)) {
                    case .deferred:
                        return Int(NGHTTP2_ERR_DEFERRED.rawValue)
                    case .bytes(let count, let last):
                        if last { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
                        return count
                    }
                }
                return nghttp2_submit_response(session, stream, nva.baseAddress, nva.count, &provider)
            }
        }
        if flat.capacity <= 16 * 1024 { (headBytes, headSpans) = (flat, spans) }  // an outsized head is not kept
        return result == 0
    }

    /// `number` in decimal digits, with no String made for it.
    private static func appendDecimal(_ number: Int, to bytes: inout [UInt8]) {
        guard number >= 0 else { return bytes.append(contentsOf: String(number).utf8) }
        var unit = 1
        while unit <= number / 10 { unit *= 10 }
        repeat {
            bytes.append(UInt8(ascii: "0") + UInt8(number / unit % 10))
            unit /= 10
        } while unit > 0
    }

    private struct HeadSpan {
        let name: Range<Int>
        let value: Range<Int>
        let flags: UInt8
    }

    /// The last response head's buffers, reused (empty between calls).
    private var headBytes: [UInt8] = []
    private var headSpans: [HeadSpan] = []

    /// A field whose value is new in every response (the request id) is sent without indexing: entered in HPACK's
    /// dynamic table it only pushes out the entries that do repeat, and nghttp2's lookup compares the value of every
    /// entry of that name (about 50 ids: 4,600 of the encoder's 7,400 instructions a response).
    private static func indexFlags(_ field: HTTPField) -> UInt8 {
        field.name.utf8.count == 12 && field.hasName("x-request-id") ? UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue)
            : UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)
    }

    /// Fields that HTTP/2 forbids (RFC 9113 §8.2.2): HTTP/1.1's connection management.
    private static func connectionSpecific(_ field: HTTPField) -> Bool {
        switch field.name.utf8.count {  // most names are none of these lengths: no comparison at all
        case 2: field.hasName("te")
        case 7: field.hasName("upgrade")
        case 10: field.hasName("connection") || field.hasName("keep-alive")
        case 14: field.hasName("content-length")
        case 16: field.hasName("proxy-connection")
        case 17: field.hasName("transfer-encoding")
        default: false
        }
    }

    /// The response body has more bytes (or its end) for `responseData`.
    func resumeData(_ stream: Int32) { _ = nghttp2_session_resume_data(session, stream) }

    /// The consumer took `count` body bytes of `stream`: the client may send that many more.
    func consumed(_ stream: Int32, _ count: Int) {
        guard count > 0 else { return }
        _ = nghttp2_session_consume(session, stream, count)
    }

    /// Body bytes of a stream that ended before they were consumed, given back to the connection's window.
    func consumedOnConnection(_ count: Int) {
        guard count > 0 else { return }
        _ = nghttp2_session_consume_connection(session, count)
    }

    func reset(_ stream: Int32, _ code: ErrorCode) {
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, code.rawValue)
    }

    /// GOAWAY naming the last stream processed; the session ends once it is sent.
    func goAway(_ code: ErrorCode) {
        _ = nghttp2_session_terminate_session(session, code.rawValue)
    }

    /// A graceful GOAWAY (drain): streams already open finish, no new ones start.
    func shutdownGracefully() {
        _ = nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nghttp2_session_get_last_proc_stream_id(session),
                                  ErrorCode.noError.rawValue, nil, 0)
    }

    private static func install(_ callbacks: OpaquePointer?) {
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { session, frame, user in
            guard let frame, let delegate = HTTP2Session.delegate(of: user) else { return 0 }
            let stream = frame.pointee.hd.stream_id
            if frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue), frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST,
               !delegate.streamOpened(stream) {
                // Its header block is still decoded (HPACK state) and dropped: the delegate knows no such stream.
                nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, ErrorCode.refusedStream.rawValue)
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameLength, value, valueLength, _, user in
            guard let frame, let name, let value, let delegate = HTTP2Session.delegate(of: user) else { return 0 }
            // Trailers are read (HPACK state) and dropped: nothing downstream uses them.
            guard frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else { return 0 }
            let kept = delegate.header(frame.pointee.hd.stream_id, name: UnsafeRawBufferPointer(start: name, count: nameLength),
                                       value: UnsafeRawBufferPointer(start: value, count: valueLength))
            return kept ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, user in
            guard let frame, let delegate = HTTP2Session.delegate(of: user) else { return 0 }
            let header = frame.pointee.hd
            let endStream = header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
            switch UInt32(header.type) {
            case NGHTTP2_HEADERS.rawValue:
                if frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
                    delegate.headersDone(header.stream_id, endStream: endStream)
                } else if endStream {
                    delegate.bodyDone(header.stream_id)
                }
            case NGHTTP2_DATA.rawValue:
                if endStream { delegate.bodyDone(header.stream_id) } else if header.length == 0 { delegate.controlFrame(.other) }
            case NGHTTP2_SETTINGS.rawValue:
                if header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 { delegate.controlFrame(.settings) }
            case NGHTTP2_PING.rawValue:
                if header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 { delegate.controlFrame(.ping) }
            case NGHTTP2_RST_STREAM.rawValue:
                delegate.controlFrame(.reset)
            case NGHTTP2_PRIORITY.rawValue, NGHTTP2_WINDOW_UPDATE.rawValue:
                delegate.controlFrame(.other)
            default:
                break
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, stream, data, length, user in
            guard let data, let delegate = HTTP2Session.delegate(of: user) else { return 0 }
            delegate.data(stream, UnsafeRawBufferPointer(start: data, count: length))
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, stream, errorCode, user in
            HTTP2Session.delegate(of: user)?.streamClosed(stream, errorCode: errorCode)
            return 0
        }
    }

    private static func delegate(of user: UnsafeMutableRawPointer?) -> (any HTTP2SessionDelegate)? {
        guard let user else { return nil }
        return Unmanaged<HTTP2Session>.fromOpaque(user).takeUnretainedValue().delegate
    }
}
