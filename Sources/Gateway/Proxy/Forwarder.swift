import Foundation
import Upstream

/// Sends a request on to its upstream and relays the answer, streaming it when it is long or open-ended.
struct Forwarder {
    /// Bodies up to this size that announce their length are relayed whole (with Content-Length);
    /// anything else is streamed chunk by chunk as it arrives.
    static let bufferedBodyLimit = 64 * 1024

    let log: EventLog
    let metrics: Metrics
    /// `server.forward_underscore_headers`.
    var forwardUnderscoreHeaders = false

    struct Identity {
        let status: String
        let keyId: String?
        let riskMetric: Int?
    }

    func forward(_ request: HTTPRequest, to upstream: UpstreamBinding, identity: Identity, record: RequestRecord) throws(GatewayError) -> HTTPResponse {
        let outgoing = UpstreamRequest(method: request.method, pathAndQuery: request.path + (request.query.map { "?" + $0 } ?? ""),
                                       headers: headers(for: request, upstream: upstream, identity: identity, requestId: record.requestId),
                                       body: request.body)
        let start = DispatchTime.now().uptimeNanoseconds
        let response: UpstreamResponse
        do {
            response = try upstream.client.send(outgoing)
        } catch {
            record.upstreamMs = RequestRecord.milliseconds(since: start)
            metrics.increment("gateway_upstream_errors_total", ["upstream": upstream.name, "reason": error.reasonCode],
                              help: "Upstream requests that failed before a response.")
            throw GatewayError(error)
        }
        record.upstreamStatus = response.status
        // The gateway's request id replaces any the upstream echoes, so the client sees exactly one.
        let headers = ForwardingRules.responseHeaders(response.headers).filter { !$0.hasName("X-Request-Id") }
            + [HTTPField("X-Request-Id", record.requestId)]
        let noBody = request.method == "HEAD" || response.status == 204 || response.status == 304
        if noBody || (response.headers.values(named: "Content-Length").first.flatMap { Int($0) }.map { $0 <= Forwarder.bufferedBodyLimit } ?? false) {
            let body: [UInt8]
            do {
                body = noBody ? [] : try response.readAll(limit: Forwarder.bufferedBodyLimit)
            } catch {
                throw GatewayError(error)
            }
            response.finish()
            record.upstreamMs = RequestRecord.milliseconds(since: start)
            record.bytesOut = body.count
            return HTTPResponse(status: response.status, headers: headers, body: .bytes(body))
        }
        return HTTPResponse(status: response.status, headers: headers,
                            body: .stream(RelayedBody(response: response, record: record, upstreamStart: start, finish: { [log, metrics] in
                                record.finish(log: log, metrics: metrics)
                            })))
    }

    /// The client's headers minus hop-by-hop and gateway-owned ones, plus the gateway's own.
    private func headers(for request: HTTPRequest, upstream: UpstreamBinding, identity: Identity, requestId: String) -> [HTTPField] {
        var headers = ForwardingRules.requestHeaders(request.headers, forwardUnderscores: forwardUnderscoreHeaders)
        if upstream.preserveHost, let host = request.headers.first(where: { $0.hasName("Host") }) {
            headers.append(HTTPField("Host", host.value))
        }
        let forwardedFor = ForwardingRules.values("x-forwarded-for", in: request.headers) + [request.clientAddress]
        headers.append(HTTPField("X-Forwarded-For", forwardedFor.joined(separator: ", ")))
        let forwardedProto = ForwardingRules.values("x-forwarded-proto", in: request.headers) + ["http"]
        headers.append(HTTPField("X-Forwarded-Proto", forwardedProto.joined(separator: ", ")))
        let node = request.clientAddress.utf8.contains(UInt8(ascii: ":")) ? "\"[\(request.clientAddress)]\"" : request.clientAddress
        let forwarded = ForwardingRules.values("forwarded", in: request.headers) + ["for=\(node);proto=http"]
        headers.append(HTTPField("Forwarded", forwarded.joined(separator: ", ")))
        headers.append(HTTPField("X-Request-Id", requestId))
        headers.append(HTTPField("X-Attest-Status", identity.status))
        if let keyId = identity.keyId { headers.append(HTTPField("X-Attest-Key-Id", keyId)) }
        if let risk = identity.riskMetric { headers.append(HTTPField("X-Attest-Risk-Metric", String(risk))) }
        return headers
    }
}

/// An upstream body relayed to the client as it arrives; the request is logged when it closes.
final class RelayedBody: HTTPBodyStream {
    private let response: UpstreamResponse
    private let record: RequestRecord
    private let upstreamStart: UInt64
    private let finish: () -> Void

    init(response: UpstreamResponse, record: RequestRecord, upstreamStart: UInt64, finish: @escaping () -> Void) {
        self.response = response
        self.record = record
        self.upstreamStart = upstreamStart
        self.finish = finish
    }

    func nextChunk() throws -> [UInt8]? {
        do {
            guard let chunk = try response.readBody() else { return nil }
            record.bytesOut += chunk.count
            return chunk
        } catch {
            record.reason = error.reasonCode
            throw error
        }
    }

    func close() {
        response.finish()
        record.upstreamMs = RequestRecord.milliseconds(since: upstreamStart)
        finish()
    }
}
