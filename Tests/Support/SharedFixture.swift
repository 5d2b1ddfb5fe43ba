/// What a test class shares (a gateway with its Redis and upstream), made once in `class setUp`. One that cannot
/// be made fails every test of the class with the reason (GatewayProcess's includes the gateway's log), where a
/// `try!` would crash the test process and lose every suite after it.
///
///     static let shared = SharedFixture<GatewayEnvironment>()
///     var env: GatewayEnvironment { Self.shared.value }
///     override class func setUp() { super.setUp(); shared.make { try GatewayEnvironment() } }
///     override class func tearDown() { shared.tearDown { $0.stop() }; super.tearDown() }
///     override func setUpWithError() throws { try Self.shared.check() }
public final class SharedFixture<Value>: @unchecked Sendable {
    private var made: Value?
    private var failure: Error?

    public init() {}

    /// From `override class func setUp()`.
    public func make(_ body: () throws -> Value) {
        do {
            made = try body()
            failure = nil
        } catch {
            made = nil
            failure = error
        }
    }

    /// From `setUpWithError()`: throws why the fixture could not be made, so the test fails and its body never runs.
    public func check() throws {
        if let failure { throw TestSupportError("the class's shared set-up failed: \(failure)") }
        if made == nil { throw TestSupportError("the class's shared set-up did not run (make it in class setUp)") }
    }

    /// The fixture; read by tests only (after `check()` passed).
    public var value: Value {
        guard let made else { preconditionFailure("SharedFixture read before check(): \(failure.map { "\($0)" } ?? "not made")") }
        return made
    }

    /// From `override class func tearDown()`.
    public func tearDown(_ stop: (Value) -> Void) {
        if let made { stop(made) }
        made = nil
    }
}
