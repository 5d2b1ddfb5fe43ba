import EventLoop
import RedisClient
import Foundation

extension AttestStore {
    /// Keys whose receipt refresh is due at `now` and not leased (leased ones are scored in the future):
    /// the refreshers' backlog, for /metrics.
    public func dueReceiptCount(now: Date) throws(StoreError) -> Int {
        try transport.perform(dueCountOperation(now: now))
    }

    public func dueReceiptCount(now: Date) async throws(StoreError) -> Int {
        try await transport.perform(dueCountOperation(now: now))
    }

    private func dueCountOperation(now: Date) -> Prepared<Int> {
        let command = [Array("ZCOUNT".utf8), keys.receiptSchedule, Array("-inf".utf8), Array(String(KeyRecord.seconds(now)).utf8)]
        return .send(.keyed(command)) { (reply) throws(StoreError) -> Int in
            guard case .integer(let count) = reply else { throw reply.storeError(context: "ZCOUNT of the receipt schedule") }
            return Int(count)
        }
    }
}
