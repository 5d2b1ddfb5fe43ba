/// Whether curl may send one exchange's request a second time.
///
/// When a reused connection ends before any response byte, curl 7.88 sends the request again on a new
/// connection, whatever its method (lib/transfer.c, Curl_retry_request: "Connection died, retrying a fresh
/// connect"). An in-memory body (CURLOPT_COPYPOSTFIELDS) needs no rewind, so nothing stops it. But the upstream
/// may have read and run the request before the connection ended: a purchase would happen twice. So, as
/// nginx (`proxy_next_upstream`) and the loops' own client (`PlainHTTPExchange`) do, only an idempotent request
/// goes again, and never a streamed body (its bytes are gone once sent).
///
/// curl calls CURLOPT_PREREQFUNCTION before each sending (lib/multi.c, MSTATE_DO), on the new connection too:
/// a second call is the resend, and refusing it fails the exchange before a byte goes out. That covers what a
/// body that cannot be rewound (CURLE_SEND_FAIL_REWIND) cannot: a POST without a body, or one of which only the
/// head went out, needs no rewind.
struct CurlResendGuard {
    private var mayResend = true
    private var method = ""
    private var streamed = false
    private var sendings = 0
    /// A second sending was refused: the exchange failed for that.
    private(set) var refused = false

    init() {}

    init(method: String, idempotent: Bool, streamed: Bool) {
        self.method = method
        self.streamed = streamed
        mayResend = idempotent && !streamed
    }

    /// curl is about to send the request: false stops a second sending that must not happen.
    mutating func admitSending() -> Bool {
        sendings += 1
        if sendings == 1 || mayResend { return true }
        refused = true
        return false
    }

    /// What the caller is told; the same reason the loops' own client gives (`502 upstream_unavailable`).
    var refusal: UpstreamError {
        .unavailable("the reused upstream connection closed before a response; " + (streamed ? "a streamed body" : method)
            + " is not sent again (the upstream may have run it)")
    }
}
