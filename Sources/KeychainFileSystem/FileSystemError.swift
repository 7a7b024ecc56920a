import Foundation
import KeychainModel
import KeychainStore
import Logging

/// A filesystem operation's failure: the errno the kernel passes on to the program.
public struct FileSystemError: Error, Equatable, CustomStringConvertible {
    public let errno: Int32
    public init(_ errno: Int32) { self.errno = errno }
    public var description: String { String(cString: strerror(errno)) }

    public static let notFound = FileSystemError(ENOENT)
    public static let exists = FileSystemError(EEXIST)
    public static let notPermitted = FileSystemError(EPERM)
    public static let invalid = FileSystemError(EINVAL)
    public static let notEmpty = FileSystemError(ENOTEMPTY)
    public static let isDirectory = FileSystemError(EISDIR)
    public static let notDirectory = FileSystemError(ENOTDIR)
    public static let noData = FileSystemError(ENODATA)
    public static let badHandle = FileSystemError(EBADF)
    public static let keyUnavailable = FileSystemError(ENOKEY)
    public static let crossDevice = FileSystemError(EXDEV)
    public static let tooLarge = FileSystemError(EFBIG)
    public static let nameTooLong = FileSystemError(ENAMETOOLONG)

    private static let log = Logger(label: "keychainfs.fs")

    /// The one table from keychain errors to errno.
    public init(_ error: KeychainError) {
        switch error {
        case .itemNotFound, .noSuchStore: self.init(ENOENT)
        case .duplicateItem, .storeExists: self.init(EEXIST)
        case .wrongPassphrase, .accessDenied: self.init(EACCES)
        case .tooManyAttempts: self.init(EAGAIN)
        case .unavailable: self.init(ENOKEY)
        case .integrityFailure: self.init(EBADMSG)
        case .invalidInput: self.init(EINVAL)
        case .nameTooLong: self.init(ENAMETOOLONG)
        case .secretTooLarge: self.init(EFBIG)
        case .storeBusy, .mountpointBusy: self.init(EBUSY)
        case .notMounted: self.init(ENOTCONN)
        case .diskFull: self.init(ENOSPC)
        case .notAKeychain, .mountFailed, .daemonVersionMismatch, .io: self.init(EIO)
        }
        // The program sees only EIO or EBADMSG; the log keeps the cause (item ids, never names).
        if errno == EIO || errno == EBADMSG { Self.log.error("\(self.description): \(error.description)") }
    }

    public init(_ error: ModelError) { self.init(KeychainError(error)) }

    /// Any error thrown below the filesystem layer, as an errno.
    public static func from(_ error: Error) -> FileSystemError {
        switch error {
        case let e as FileSystemError: e
        case let e as KeychainError: FileSystemError(e)
        case let e as ModelError: FileSystemError(e)
        default: { log.error("EIO: \(error)"); return FileSystemError(EIO) }()
        }
    }
}
