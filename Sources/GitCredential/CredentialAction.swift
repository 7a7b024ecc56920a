/// The operation git asks of a helper, given as its last argument.
package enum CredentialAction: String, Sendable, CaseIterable {
    case get, store, erase

    /// Nil for anything else: git may add actions, which a helper must silently ignore.
    package init?(argument: String) { self.init(rawValue: argument) }
}
