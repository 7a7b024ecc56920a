@_exported import KeychainErrors

extension KeychainError {
    /// The item model's refusals are bad input, with the keychain's exit codes.
    public init(_ error: ModelError) {
        switch error {
        case .invalid(let m): self = .invalidInput(m)
        case .nameTooLong(let m): self = .nameTooLong(m)
        }
    }

    /// The class's key is not held in this lock state (or not on this device).
    package static func unavailable(_ c: AccessibilityClass) -> KeychainError { .unavailable(className: c.rawValue) }
}
