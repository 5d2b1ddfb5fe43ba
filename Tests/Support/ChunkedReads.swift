import Upstream

/// A chunked body read by `ChunkedBody` as a connection reads it, in reads of `split` bytes: the data decoded,
/// and how the reading stopped — `.ended` (the offset in `input` after the body), `.invalid`, or `.more` when
/// the input ran out first.
public func readChunked(_ input: [UInt8], split: Int, maxTrailerBytes: Int) -> (data: [UInt8], outcome: ChunkedBody.Piece) {
    var body = ChunkedBody(maxTrailerBytes: maxTrailerBytes)
    var data: [UInt8] = []
    for start in stride(from: 0, to: input.count, by: split) {
        let read = Array(input[start..<min(start + split, input.count)])
        var index = 0
        reading: while true {
            switch read.withUnsafeBytes({ body.next($0, from: &index) }) {
            case .data(let range): data += read[range]
            case .more: break reading
            case .ended(let end): return (data, .ended(end: start + end))
            case .invalid(let problem): return (data, .invalid(problem))
            }
        }
    }
    return (data, .more)
}
