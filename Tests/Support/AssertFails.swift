import XCTest

/// Fails unless `body` throws a `Failure` whose `key` (its reason code, say) is `expected`.
public func assertFails<Failure: Error, Key: Equatable>(_ expected: Key, _ key: (Failure) -> Key, file: StaticString = #filePath,
                                                          line: UInt = #line, _ body: () throws -> Void) {
    XCTAssertThrowsError(try body(), file: file, line: line) { error in
        guard let failure = error as? Failure else {
            return XCTFail("expected \(Failure.self), got \(error)", file: file, line: line)
        }
        XCTAssertEqual(key(failure), expected, "\(error)", file: file, line: line)
    }
}
