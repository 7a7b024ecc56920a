import KeychainModel

/// Why a git credential request cannot be served. The helper answers none of these:
/// git treats silence as "no credential" and moves on to its next helper.
package enum CredentialError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The 1-based line has no `=`, holds a NUL byte or is not UTF-8.
    case malformedLine(Int)
    case missingField(String)
    case unsupportedProtocol(String)
    case invalidHost(String)
    case invalidPort(String)
    /// The request names an item the keychain model refuses (e.g. a name too long).
    case invalidItem(ModelError)
    /// A value would break the line protocol if printed (it holds a newline or NUL).
    case unprintable(String)

    package var description: String {
        switch self {
        case .malformedLine(let n): "line \(n) of the request is malformed"
        case .missingField(let f): "the request has no '\(f)'"
        case .unsupportedProtocol(let p): "protocol '\(p)' is not supported"
        case .invalidHost(let h): "host '\(h)' is invalid"
        case .invalidPort(let p): "port '\(p)' is not a number from 1 to 65535"
        case .invalidItem(let e): e.description
        case .unprintable(let f): "'\(f)' cannot be sent to git: it contains a newline or NUL"
        }
    }
}
