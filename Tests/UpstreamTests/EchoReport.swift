import Foundation

/// What examples/upstream.py's /echo endpoint saw of a request.
struct EchoReport: Decodable {
    let method: String
    let path: String
    let query: String
    let headers: [[String]]
    let bodyBase64: String
    let clientPort: Int
    let connectionNumber: Int

    var body: [UInt8] { [UInt8](Data(base64Encoded: bodyBase64) ?? Data()) }
    var headerFields: [(name: String, value: String)] { headers.map { ($0[0], $0[1]) } }

    init(_ json: [UInt8]) throws {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        self = try decoder.decode(EchoReport.self, from: Data(json))
    }
}
