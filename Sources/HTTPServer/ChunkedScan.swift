import Upstream

/// The strict RFC 9112 §7.1 check of a chunked request body's framing bytes, run over each read before
/// libhttp-parser sees it (Debian's build is lenient: it never checks the two bytes after chunk data,
/// takes CTLs in chunk extensions and obs-fold, spaces and bare LF in trailers). The body is re-framed
/// toward the upstream anyway; the check is for a front proxy that passes chunked bodies through as they
/// are and would read them differently (TE.TE desync). The grammar is Upstream's `ChunkedBody` (the one
/// upstream responses are decoded with), its chunk data passed over; a tab may follow a chunk size here, as it
/// always could, and trailers are held to the head's bound.
struct ChunkedScan {
    private var body: ChunkedBody

    init(maxTrailerBytes: Int) { body = ChunkedBody(maxTrailerBytes: maxTrailerBytes, tabAfterSize: true) }

    enum Outcome: Equatable {
        /// Every byte is well framed; the body goes on.
        case more
        /// The body's last byte (its final CRLF) is at `end - 1`: what follows is the next request.
        case ended(end: Int)
        case invalid(String)
    }

    mutating func scan(_ bytes: UnsafeRawBufferPointer) -> Outcome {
        switch body.check(bytes) {
        case .more, .data: .more  // `check` hands out no data: libhttp-parser does
        case .ended(let end): .ended(end: end)
        case .invalid(let problem): .invalid(problem)
        }
    }
}
