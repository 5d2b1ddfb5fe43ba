/// Frames the responses of one upstream connection, read by read, re-initialised for every exchange: the head
/// read by `ResponseScan` where it lies in the read (gathered first only when it spans reads), the body by its
/// length, chunked (`ChunkedBody`) or until the upstream closes. It reports to the connection (`serve`): a head
/// once complete (its fields wait here, `takeHead`), body pieces, the end.
final class ResponseParser {
    private enum Phase { case head, length, chunked, untilClose, done }

    /// The connection the parser reports to, unretained: the connection owns the parser and holds itself while it
    /// feeds it (a reference counted here, or loaded from an unowned one, was a retain and release per report).
    private var connection: Unmanaged<PlainHTTPConnection>?
    private var phase = Phase.head
    /// The head being read (its fields apart: the scan holds nothing counted) and the body's decoder. Changed on
    /// local copies put back: an access to them held across the fields' own code would make every one a checked one.
    private var scan = ResponseScan()
    private var head = ResponseHead()
    /// A head that spans reads, gathered until whole (bounded by the head limit). Changed on a local copy taken out
    /// and put back: an access held across the array's own code would make every access to it a checked one.
    private var gathered: [UInt8] = []
    private var remaining = 0
    private var chunks = ChunkedBody(maxTrailerBytes: ResponseParser.headLimit)
    private var keepAlive = false
    /// Bytes of the heads of the response being read, interim ones included (past the limit, the exchange fails).
    private(set) var headBytes = 0
    private static let headLimit = PlainHTTPExchange.headLimit
    /// A gathering buffer grown past this is let go at the next `reset` (idle connections stay small).
    private static let keptBytes = 4096

    func serve(_ connection: PlainHTTPConnection) { self.connection = .passUnretained(connection) }

    /// `body` on the connection, nil before `serve`.
    private func report<Result>(_ body: (PlainHTTPConnection) -> Result) -> Result? {
        connection?._withUnsafeGuaranteedRef(body)
    }

    /// For the next response: nothing read yet.
    func reset() {
        phase = .head
        scan = ResponseScan()
        head = ResponseHead()
        var buffer = gathered
        gathered = []
        buffer.removeAll(keepingCapacity: buffer.capacity <= Self.keptBytes)
        gathered = buffer
        remaining = 0
        chunks = ChunkedBody(maxTrailerBytes: Self.headLimit)
        keepAlive = false
        headBytes = 0
    }

    /// The fields of the head just completed (call from `parsedHeadersComplete`).
    func takeHead() -> ResponseHead {
        let taken = head
        head = ResponseHead()
        return taken
    }

    enum Fed: Equatable {
        /// Every byte was consumed.
        case consumed
        /// The final response ended after `consumed` bytes; anything after it is not part of this exchange.
        case messageComplete(consumed: Int)
        case failed(String)
    }

    func feed(_ bytes: UnsafeRawBufferPointer) -> Fed {
        var index = 0
        while index < bytes.count {
            switch phase {
            case .head:
                switch readHead(bytes, from: index) {
                case .more: return .consumed
                case .failed(let reason): return .failed(reason)
                case .read(let end): index = end
                }
                if let fed = headRead(consumed: index) { return fed }
            case .length:
                let end = index + min(remaining, bytes.count - index)
                remaining -= end - index
                report { $0.parsedBody(UnsafeRawBufferPointer(rebasing: bytes[index..<end])) }
                index = end
                if remaining == 0, let fed = messageComplete(consumed: index) { return fed }
            case .chunked:
                var decoder = chunks
                let piece = decoder.next(bytes, from: &index)
                chunks = decoder
                switch piece {
                case .data(let range): report { $0.parsedBody(UnsafeRawBufferPointer(rebasing: bytes[range])) }
                case .more: return .consumed
                case .ended: if let fed = messageComplete(consumed: index) { return fed }
                case .invalid(let reason): return .failed(reason)
                }
            case .untilClose:
                report { $0.parsedBody(UnsafeRawBufferPointer(rebasing: bytes[index...])) }
                return .consumed
            case .done:
                return .messageComplete(consumed: index)
            }
        }
        return .consumed
    }

    /// The upstream closed its side: ends a read-until-close body, fails a response cut short.
    func feedEndOfStream() -> Fed {
        switch phase {
        case .untilClose: messageComplete(consumed: 0) ?? .consumed
        case .done: .messageComplete(consumed: 0)
        case .head, .length, .chunked: .failed("the upstream closed the connection before the response ended")
        }
    }

    /// After the final response: HTTP/1.1 without `Connection: close` (or 1.0 with keep-alive), and a body that
    /// did not run to EOF.
    var shouldKeepAlive: Bool { keepAlive }

    private enum HeadRead { case more, read(end: Int), failed(String) }

    /// Reads the head where it lies in the read when it is whole there, else gathers it until it is.
    private func readHead(_ bytes: UnsafeRawBufferPointer, from index: Int) -> HeadRead {
        let rest = UnsafeRawBufferPointer(rebasing: bytes[index...])
        if gathered.isEmpty {
            switch scanned(rest) {
            case .complete(let end): return counted(end) ?? .read(end: index + end)
            case .invalid(let reason): return .failed(reason)
            case .incomplete: break
            }
        }
        var buffer = gathered
        gathered = []
        if buffer.isEmpty {
            // Offsets in the scan stay right: the gathered head starts where `rest` does.
            buffer.append(contentsOf: rest)
        } else {
            let before = buffer.count
            buffer.append(contentsOf: rest)
            // A line ends only at an LF: without one, the line under way is not read again (a head trickled a byte a
            // read costs its length, not its square).
            if rest.contains(0x0A) {
                let outcome = buffer.withUnsafeBytes { scanned($0) }
                switch outcome {
                case .complete(let end):
                    buffer.removeAll(keepingCapacity: buffer.capacity <= Self.keptBytes)
                    gathered = buffer
                    return counted(end) ?? .read(end: index + end - before)
                case .invalid(let reason): return .failed(reason)
                case .incomplete: break
                }
            }
        }
        if headBytes + buffer.count > Self.headLimit {
            headBytes += buffer.count  // the exchange fails on it
            return .more
        }
        gathered = buffer
        return .more
    }

    /// The scan of `bytes` on local copies of the scan and the fields.
    private func scanned(_ bytes: UnsafeRawBufferPointer) -> ResponseScan.Outcome {
        var (scan, head) = (self.scan, self.head)
        self.head = ResponseHead()  // the fields stay uniquely referenced: appended in place
        let outcome = scan.scan(bytes, into: &head)
        (self.scan, self.head) = (scan, head)
        return outcome
    }

    /// Counts a whole head's bytes: past the limit, the exchange fails on them (nothing reported).
    private func counted(_ headLength: Int) -> HeadRead? {
        headBytes += headLength
        return headBytes > Self.headLimit ? .more : nil
    }

    /// A head was read: reported, then its body's framing set. An interim (1xx) one has no body: the final head follows.
    private func headRead(consumed: Int) -> Fed? {
        let status = scan.status
        let noBody = report { $0.parsedHeadersComplete(status: status) } ?? true
        let framing = scan.framing(bodyless: noBody)
        if status >= 200 { keepAlive = scan.keepAlive && framing != .untilClose }
        switch framing {
        case .none, .length(0):
            return messageComplete(consumed: consumed)
        case .length(let length):
            remaining = length
            phase = .length
        case .chunked:
            phase = .chunked
        case .untilClose:
            phase = .untilClose
        }
        return nil
    }

    /// A message ended: the final one stops the feed, an interim one lets the next head be read.
    private func messageComplete(consumed: Int) -> Fed? {
        let status = scan.status
        if report({ $0.parsedMessageComplete(status: status) }) ?? true {
            phase = .done
            return .messageComplete(consumed: consumed)
        }
        phase = .head
        scan = ResponseScan()
        head = ResponseHead()
        return nil
    }
}
