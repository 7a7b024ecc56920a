import Foundation
import KeychainModel
import KeychainStore
import Logging

/// A filesystem operation's failure: the errno the kernel passes on to the program.
package struct FileSystemError: Error, Equatable, CustomStringConvertible {
    package let errno: Int32
    package init(_ errno: Int32) { self.errno = errno }
    package var description: String { String(cString: strerror(errno)) }

    package static let notFound = FileSystemError(ENOENT)
    package static let exists = FileSystemError(EEXIST)
    package static let notPermitted = FileSystemError(EPERM)
    package static let invalid = FileSystemError(EINVAL)
    package static let notEmpty = FileSystemError(ENOTEMPTY)
    package static let isDirectory = FileSystemError(EISDIR)
    package static let notDirectory = FileSystemError(ENOTDIR)
    package static let noData = FileSystemError(ENODATA)
    package static let badHandle = FileSystemError(EBADF)
    package static let keyUnavailable = FileSystemError(ENOKEY)
    package static let crossDevice = FileSystemError(EXDEV)
    package static let tooLarge = FileSystemError(EFBIG)
    package static let nameTooLong = FileSystemError(ENAMETOOLONG)

    private static let log = Logger(label: "keychainfs.fs")

    /// The one table from keychain errors to errno.
    package init(_ error: KeychainError) {
        switch error {
        case .itemNotFound, .noSuchStore: self.init(ENOENT)
        case .duplicateItem, .storeExists, .fileExists: self.init(EEXIST)
        case .wrongPassphrase, .accessDenied: self.init(EACCES)
        case .notSynchronizable: self.init(EPERM)
        case .tooManyAttempts: self.init(EAGAIN)
        case .unavailable: self.init(ENOKEY)
        case .integrityFailure: self.init(EBADMSG)
        case .invalidInput: self.init(EINVAL)
        case .nameTooLong: self.init(ENAMETOOLONG)
        case .secretTooLarge: self.init(EFBIG)
        case .storeBusy, .mountpointBusy: self.init(EBUSY)
        case .mountpointNotEmpty: self.init(ENOTEMPTY)
        case .notMounted: self.init(ENOTCONN)
        case .diskFull: self.init(ENOSPC)
        case .notAKeychain, .mountFailed, .daemonVersionMismatch, .io, .syncEngine: self.init(EIO)
        }
        // The program sees only EIO or EBADMSG; the log keeps the cause (item ids, never names).
        if errno == EIO || errno == EBADMSG { Self.log.error("\(self.description): \(error.description)") }
    }

    package init(_ error: ModelError) { self.init(KeychainError(error)) }

    /// Any error thrown below the filesystem layer, as an errno.
    package static func from(_ error: Error) -> FileSystemError {
        switch error {
        case let e as FileSystemError: e
        case let e as KeychainError: FileSystemError(e)
        case let e as ModelError: FileSystemError(e)
        default: { log.error("EIO: \(error)"); return FileSystemError(EIO) }()
        }
    }
}
