import Foundation

/// One JSON object per line, keys sorted, slashes unescaped (what operators paste into tickets).
public enum JSONOutput {
    public static func line(_ object: [String: Any]) -> String {
        let options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: options) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}
