@testable import RedisClient
import XCTest

/// How one question put to every sentinel at once is settled (index 0: the sentinel preferred, the one
/// that answered last time).
final class SentinelPollTests: XCTestCase {
    private let old = RedisAddress(host: "10.0.0.1", port: 6379)
    private let new = RedisAddress(host: "10.0.0.2", port: 6379)

    private func named(_ decision: SentinelPoll.Decision?) -> (RedisAddress, Int)? {
        if case .named(let address, let index)? = decision { return (address, index) }
        return nil
    }

    private func settled(_ poll: SentinelPoll) -> SentinelPoll.Decision? { poll.decided }

    func testThePreferredSentinelsAnswerWinsEvenWhenAnotherCameFirst() {
        let poll = SentinelPoll(count: 3)
        poll.record(2, .success(new))
        XCTAssertNil(settled(poll), "still listening to the preferred sentinel")
        poll.record(0, .success(old))
        XCTAssertEqual(named(settled(poll))?.0, old)
        XCTAssertEqual(named(settled(poll))?.1, 0)
    }

    func testOnceThePreferredFailedTheFirstOtherAnswerWins() {
        let poll = SentinelPoll(count: 3)
        poll.record(2, .success(new))
        poll.record(1, .success(old))
        poll.record(0, .failure(.init(message: "timed out")))
        XCTAssertEqual(named(settled(poll))?.0, new, "the first other sentinel to answer")
        XCTAssertEqual(named(settled(poll))?.1, 2)
        poll.record(0, .success(old))
        XCTAssertEqual(named(settled(poll))?.0, new, "a late answer changes nothing once settled")
    }

    func testAFailedPreferredWaitsForTheOthers() {
        let poll = SentinelPoll(count: 2)
        poll.record(0, .failure(.init(message: "refused")))
        XCTAssertNil(settled(poll))
        poll.record(1, .success(new))
        XCTAssertEqual(named(settled(poll))?.0, new)
    }

    func testAllFailedListsEveryReason() {
        let poll = SentinelPoll(count: 2)
        poll.record(1, .failure(.init(message: "b: NOAUTH")))
        poll.record(0, .failure(.init(message: "a: timed out")))
        guard case .failed(let reasons)? = settled(poll) else { return XCTFail("not settled as failed") }
        XCTAssertEqual(reasons, ["a: timed out", "b: NOAUTH"])
    }
}
