/// Whether a response's framing left nothing to guess, so the connection that carried it can carry the
/// next exchange. A head that the parser framed by a rule rather than by what it declared could leave the
/// upstream's idea of where the response ends different from ours, and its leftover bytes would be read
/// as another client's response.
enum ResponseFraming {
    static func isUnambiguous(_ fields: [HTTPField], status: Int, method: String) -> Bool {
        var lengths = 0, codings = 0
        for field in fields {
            if field.hasName("Content-Length") {
                lengths += 1
                guard !field.value.isEmpty, field.value.allBytes({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
                    return false
                }
                // A response without a body (HEAD, 204, 304) that declares one: the upstream may send it anyway.
                if method == "HEAD" || status == 204 || status == 304, field.value.utf8.contains(where: { $0 != UInt8(ascii: "0") }) {
                    return false
                }
            } else if field.hasName("Transfer-Encoding") {
                codings += 1
            }
        }
        // Several lengths, or a length and a coding: the parser chose one reading.
        if lengths > 1 || (lengths > 0 && codings > 0) { return false }
        return codings == 0 || !(method == "HEAD" || status == 204 || status == 304)
    }
}
