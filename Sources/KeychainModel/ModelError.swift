/// A value that breaks the item model's rules.
public enum ModelError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalid(String)
    case nameTooLong(String)

    /// The message, for the user.
    public var description: String {
        switch self {
        case .invalid(let m): m
        case .nameTooLong(let m): m
        }
    }
}
