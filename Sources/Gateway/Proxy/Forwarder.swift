import EventLoop
import Foundation
import HTTPServer
import Upstream

/// Sends a request on to its upstream on the connection's own loop (curl's multi handle of that loop) and
/// relays the answer as it arrives, paced by the client: curl is paused while the client's side is full.
struct Forwarder {
    let log: EventLog
    let metrics: Metrics
    /// `server.forward_underscore_headers`.
    var forwardUnderscoreHeaders = false
    /// `server.trusted_proxies`: only their `X-Forwarded-Proto` and `Forwarded` reach the upstream.
    var clientAddress = ClientAddressPolicy()

    struct Identity {
        let status: String
        let keyId: String?
        let riskMetric: Int?
        /// How the request proved itself (`assertion`, `token`, `devicecheck`): `X-Attest-Method`.
        var method: String? = nil
        /// The `app_attest.debug_tokens` name a `debug` request was let through on.
        var debugName: String? = nil
        /// A Play Integrity token's device labels (`X-Attest-Device-Integrity`, comma-separated).
        var deviceIntegrity: [String]? = nil
    }

    /// Answers the client with the upstream's response; `done` gets its status once the relay has ended.
    /// Plain callbacks on the connection's loop: a pooled `http://` exchange needs no task.
    func forward(_ head: RequestHead, body: [UInt8], exchange: HTTPExchange, multi: LoopMulti, to upstream: UpstreamBinding,
                 timeouts: RouteTimeouts? = nil, upload: UpstreamUpload? = nil, identity: Identity,
                 record: RequestRecord, done: @escaping (Result<Int, GatewayError>) -> Void) {
        let target = head.query.map { "\(head.path)?\($0)" } ?? head.path
        let outgoing = UpstreamRequest(method: head.method, pathAndQuery: target,
                                       headers: headers(for: head, memo: exchange.connectionMemo, upstream: upstream, identity: identity,
                                                        requestId: record.requestId),
                                       body: body)
        let relay = Relay(exchange: exchange, upstream: upstream, record: record, metrics: metrics, done: done)
        upstream.client.open(outgoing, on: multi, timeouts: timeouts?.applied(to: upstream.client.target.timeouts),
                             upload: upload) { [relay] in relay.opened($0) }
    }

    /// One forwarded request from the moment it is sent: its response head checked and relayed, then its body,
    /// to the client as the upstream delivers it; when the client's buffer is full the upstream is paused, and
    /// resumed when it drained. A client that leaves cancels the upstream exchange. `done` comes once, when
    /// the relay is over either way. Every callback captures this object alone (no context allocated per
    /// callback); they hold it until the relay ends.
    private final class Relay {
        private let exchange: HTTPExchange
        private let upstream: UpstreamBinding
        private let record: RequestRecord
        private let metrics: Metrics
        private let start = RequestRecord.uptimeNanoseconds()
        private var stream: UpstreamStream?
        private var done: ((Result<Int, GatewayError>) -> Void)?

        init(exchange: HTTPExchange, upstream: UpstreamBinding, record: RequestRecord, metrics: Metrics,
             done: @escaping (Result<Int, GatewayError>) -> Void) {
            (self.exchange, self.upstream, self.record, self.metrics, self.done) = (exchange, upstream, record, metrics, done)
        }

        /// The upstream's response head arrived, or why none will.
        func opened(_ opened: Result<UpstreamStream, UpstreamError>) {
            let stream: UpstreamStream
            switch opened {
            case .success(let opened):
                stream = opened
            case .failure(let error):
                return failed(error)
            }
            // Thousands of names in Connection only make the header rules work: the upstream is broken.
            if ConnectionTokens.exceedLimit(stream.headers) {
                stream.cancel()
                return failed(.protocolError("the response's Connection lists more than \(ConnectionTokens.limit) names"))
            }
            record.upstreamStatus = stream.status
            record.upstreamAddr = stream.remoteAddress
            // The client left while the upstream answered: nothing to relay to (a relay would wait for a
            // writable client forever).
            if exchange.isClientGone {
                stream.cancel()
                return finish(.success(stream.status))
            }
            // The gateway's request id replaces any the upstream echoes; the upstream's length is kept.
            let (headers, length) = ForwardingRules.clientResponse(stream.headers, requestId: record.requestId)
            guard exchange.startResponse(status: stream.status, headers: headers, contentLength: length) else {
                // A header of the upstream's cannot be relayed as it is (the client got a JSON 500): nor its body.
                stream.cancel()
                record.reason = "invalid_response_header"
                return finish(.success(500))
            }
            self.stream = stream
            exchange.onWritable = { [stream] in stream.resume() }
            exchange.onClientGone = { [self] in
                self.stream?.cancel()
                // Called from inside the connection's own ending (which logs the exchange next): the forward
                // ends on the loop's next turn, not in the middle of that.
                exchange.loop.executeOnLoop { [self] in relayEnded() }
            }
            stream.relay(body: { [exchange] bytes in exchange.writeBody(bytes) }, end: { [self] error in
                if let error {
                    record.reason = error.reasonCode
                    record.detail = error.description
                    exchange.abort(.upstreamAborted)
                } else {
                    exchange.endResponse()
                }
                relayEnded()
            })
        }

        /// An upstream exchange that failed before a response: timed, counted, and the client's error.
        private func failed(_ error: UpstreamError) {
            record.upstreamMs = RequestRecord.milliseconds(since: start)
            metrics.increment("gateway_upstream_errors_total", ["upstream": upstream.name, "reason": error.reasonCode],
                              help: "Upstream requests that failed before a response.")
            finish(.failure(GatewayError(error)))
        }

        private func relayEnded() {
            guard done != nil, let stream else { return }
            exchange.onWritable = nil
            exchange.onClientGone = nil
            record.upstreamMs = RequestRecord.milliseconds(since: start)
            finish(.success(stream.status))
        }

        private func finish(_ result: Result<Int, GatewayError>) {
            guard let done else { return }
            self.done = nil
            done(result)
        }
    }

    /// The client's list in header `name` with `value` appended (just `value` when the client sent none).
    private static func appending(_ value: String, to name: KnownHeader, in headers: [HTTPField]) -> String {
        let values = ForwardingRules.values(name, in: headers)
        return values.isEmpty ? value : (values + [value]).joined(separator: ", ")
    }

    /// The client's headers minus hop-by-hop and gateway-owned ones, plus the gateway's own (named by their
    /// codes: nothing to classify).
    private func headers(for request: RequestHead, memo: ConnectionMemo, upstream: UpstreamBinding, identity: Identity,
                         requestId: String) -> [HTTPField] {
        var headers = ForwardingRules.requestHeaders(request.headers, forwardUnderscores: forwardUnderscoreHeaders, room: 10)
        if upstream.preserveHost, let host = request.headers.first(where: { $0.known == .host }) {
            headers.append(HTTPField(.host, host.value))
        }
        headers.append(HTTPField(.xForwardedFor, Self.appending(request.clientAddress, to: .xForwardedFor, in: request.headers)))
        // The scheme is the gateway's word alone unless the peer is a proxy of ours that spoke to the client: a
        // client's own "X-Forwarded-Proto: https" over plain HTTP would make an upstream believe in TLS.
        let scheme = request.tls == nil ? "http" : "https"
        let fromProxy = clientAddress.trustsPeer(request.clientAddress)
        headers.append(HTTPField(.xForwardedProto, fromProxy ? Self.appending(scheme, to: .xForwardedProto, in: request.headers) : scheme))
        let element = Self.forwardedElement(client: request.clientAddress, scheme: scheme, memo: memo)
        headers.append(HTTPField(.forwarded, fromProxy ? Self.appending(element, to: .forwarded, in: request.headers) : element))
        headers.append(HTTPField(.xRequestId, requestId))
        headers.append(HTTPField(.xAttestStatus, identity.status))
        if let keyId = identity.keyId { headers.append(HTTPField(.xAttestKeyId, keyId)) }
        if let risk = identity.riskMetric { headers.append(HTTPField(.xAttestRiskMetric, String(risk))) }
        if let method = identity.method { headers.append(HTTPField(.xAttestMethod, method)) }
        if let name = identity.debugName { headers.append(HTTPField(.xAttestDebugName, name)) }
        if let labels = identity.deviceIntegrity { headers.append(HTTPField(.xAttestDeviceIntegrity, labels.joined(separator: ","))) }
        return headers
    }

    /// The element made once per connection, whose client and scheme never change (made per request, it cost
    /// a string built every time).
    private static func forwardedElement(client: String, scheme: String, memo: ConnectionMemo) -> String {
        if let known = memo.value as? ConnectionFacts { return known.forwardedElement }
        let facts = ConnectionFacts(forwardedElement: ForwardingRules.forwardedElement(client: client, scheme: scheme))
        memo.value = facts
        return facts.forwardedElement
    }

    /// What the forwarder keeps in a connection's memo.
    private final class ConnectionFacts {
        let forwardedElement: String

        init(forwardedElement: String) { self.forwardedElement = forwardedElement }
    }
}
