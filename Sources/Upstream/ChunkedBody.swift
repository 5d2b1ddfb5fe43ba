/// A chunked body (RFC 9112 §7.1) read strictly, read by read: the one chunked grammar of the gateway. Upstream
/// responses are decoded with it (`ResponseParser`: the data of each chunk handed out as ranges of the read), and
/// HTTPServer's `ChunkedScan` checks a client's request body with it before libhttp-parser frames that. Hex sizes
/// that do not overflow, extensions without controls, CRLF after each chunk's data, trailer lines held to the
/// head's rules; size lines and trailers bounded. Trailers are checked and dropped: nothing relays them.
/// The two uses differ only in `tabAfterSize` and the trailer bound.
public struct ChunkedBody {
    private enum State {
        /// A chunk-size line: hex digits (at least one), then optional extensions.
        case size(digits: Int)
        /// Spaces (and tabs where taken) after the size: only before a ";".
        case sizeSpace
        /// `;`-extensions up to the CR: no CTL or NUL.
        case extensions
        case sizeLF
        case data
        case dataCR
        case dataLF
        case trailerStart
        case trailerName
        case trailerValue
        case trailerLF
        case finalLF
        case done
    }

    public enum Piece: Equatable, Sendable {
        /// Chunk data at these offsets of the read.
        case data(Range<Int>)
        /// Every byte of the read was taken; the body goes on.
        case more
        /// The body's last byte (its final CRLF) is at `end - 1` of the read.
        case ended(end: Int)
        case invalid(String)
    }

    private var state = State.size(digits: 0)
    private var chunkSize = 0
    private var remaining = 0
    /// Bytes of the current chunk-size line, or of the whole trailer section.
    private var lineBytes = 0
    private let maxTrailerBytes: Int
    /// Whether a tab may follow a chunk size (as a space may, before an extension; RFC 9112's BWS). A client's
    /// body takes one, as it always did; an upstream's does not: libhttp-parser refused one there, and no upstream
    /// sends one.
    private let tabAfterSize: Bool
    /// A size line holds the size and its extensions: nothing needs more.
    private static let maxSizeLineBytes = 4096

    public init(maxTrailerBytes: Int, tabAfterSize: Bool = false) {
        (self.maxTrailerBytes, self.tabAfterSize) = (maxTrailerBytes, tabAfterSize)
    }

    /// The next piece of `bytes` from `index` on (advanced past it).
    public mutating func next(_ bytes: UnsafeRawBufferPointer, from index: inout Int) -> Piece {
        let piece: Piece
        (piece, index) = read(bytes, from: index, handingOutData: true)
        return piece
    }

    /// The framing of the whole of `bytes` checked, chunk data passed over within the loop: never `.data`.
    public mutating func check(_ bytes: UnsafeRawBufferPointer) -> Piece {
        read(bytes, from: 0, handingOutData: false).piece
    }

    /// The loop of both, kept one copy: inlined into each, `step` (its only caller here) was left a call per framing
    /// byte, which doubled the cost of a body of small chunks.
    @inline(never)
    private mutating func read(_ bytes: UnsafeRawBufferPointer, from start: Int, handingOutData: Bool) -> (piece: Piece, end: Int) {
        var index = start
        while index < bytes.count {
            if case .data = state {
                let dataStart = index, taken = min(remaining, bytes.count - index)
                (remaining, index) = (remaining - taken, index + taken)
                if remaining == 0 { state = .dataCR }
                if handingOutData { return (.data(dataStart..<index), index) }
                continue
            }
            if let problem = step(bytes[index]) { return (.invalid(problem), index) }
            index += 1
            if case .done = state { return (.ended(end: index), index) }
        }
        return (.more, index)
    }

    /// One framing byte (chunk data is taken by `read`); the problem it shows, if any.
    private mutating func step(_ byte: UInt8) -> String? {
        switch state {
        case .size(let digits):
            lineBytes += 1
            guard lineBytes <= Self.maxSizeLineBytes else { return "a chunk-size line is too long" }
            if let value = Self.hexValue(byte) {
                guard chunkSize <= (Int.max - 15) / 16 else { return "a chunk size overflows" }
                chunkSize = chunkSize * 16 + Int(value)
                state = .size(digits: digits + 1)
                return nil
            }
            guard digits > 0 else { return "a chunk-size line does not start with a hex digit" }
            return afterSize(byte)
        case .sizeSpace:
            lineBytes += 1
            guard lineBytes <= Self.maxSizeLineBytes else { return "a chunk-size line is too long" }
            if byte == 0x20 || (byte == 0x09 && tabAfterSize) { return nil }
            guard byte == UInt8(ascii: ";") else {
                return tabAfterSize ? "whitespace after a chunk size is not followed by an extension"
                    : "a space after a chunk size is not followed by an extension"
            }
            state = .extensions
        case .extensions:
            lineBytes += 1
            guard lineBytes <= Self.maxSizeLineBytes else { return "a chunk-size line is too long" }
            if byte == 0x0D {
                state = .sizeLF
            } else if !ResponseScan.isFieldByte(byte) {
                return "a chunk extension holds a control character"
            }
        case .sizeLF:
            guard byte == 0x0A else { return "a chunk-size line's CR is not followed by LF" }
            (remaining, lineBytes) = (chunkSize, 0)
            state = chunkSize == 0 ? .trailerStart : .data
            chunkSize = 0
        case .data:
            break  // `read` takes chunk data
        case .dataCR:
            guard byte == 0x0D else { return "chunk data is not followed by CRLF" }
            state = .dataLF
        case .dataLF:
            guard byte == 0x0A else { return "chunk data is not followed by CRLF" }
            state = .size(digits: 0)
        case .trailerStart:
            if byte == 0x0D {
                state = .finalLF
            } else if byte == 0x20 || byte == 0x09 {
                return "a trailer line starts with whitespace (obsolete line folding)"
            } else if HTTPField.isTokenByte(byte) {
                state = .trailerName
            } else {
                return "a trailer name holds a byte that is not a token character"
            }
            return countTrailer()
        case .trailerName:
            if byte == UInt8(ascii: ":") {
                state = .trailerValue
            } else if !HTTPField.isTokenByte(byte) {
                return "a trailer name holds a byte that is not a token character"
            }
            return countTrailer()
        case .trailerValue:
            if byte == 0x0D {
                state = .trailerLF
            } else if !ResponseScan.isFieldByte(byte) {
                return "a trailer value holds a control character"
            }
            return countTrailer()
        case .trailerLF:
            guard byte == 0x0A else { return "a trailer line's CR is not followed by LF" }
            state = .trailerStart
            return countTrailer()
        case .finalLF:
            guard byte == 0x0A else { return "the chunked body's last CR is not followed by LF" }
            state = .done
        case .done:
            break
        }
        return nil
    }

    /// The first byte after a chunk size's digits.
    private mutating func afterSize(_ byte: UInt8) -> String? {
        switch byte {
        case 0x0D: state = .sizeLF
        case UInt8(ascii: ";"): state = .extensions
        case 0x20: state = .sizeSpace
        case 0x09 where tabAfterSize: state = .sizeSpace
        case 0x0A: return "a chunk-size line ends in LF without CR"
        default: return "a chunk size holds a byte that is not a hex digit"
        }
        return nil
    }

    private mutating func countTrailer() -> String? {
        lineBytes += 1
        return lineBytes > maxTrailerBytes ? "the trailers exceed \(maxTrailerBytes) bytes" : nil
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
