import AppleServices
import AssertionCheck
import TestSupport

/// The Apple clients' failures by reason code, the receipt verifier's by reason (TestSupport's `assertFails`).
func assertFails(_ reasonCode: String, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void) {
    TestSupport.assertFails(reasonCode, { (error: AppleServiceError) in error.reasonCode }, file: file, line: line, body)
}

func assertFails(_ reason: VerificationError.Reason, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void) {
    TestSupport.assertFails(reason, { (error: VerificationError) in error.reason }, file: file, line: line, body)
}
