import Glibc
import KeychainErrors
import KeychainModel

/// `config.toml`'s `[access]` table: `pinentry = "PATH"`, `prompt-timeout = SECONDS`.
/// KeychainConfig reads the TOML and hands the values here, which checks them.
package struct AccessSettings: Sendable, Equatable {
    /// The pinentry program; nil: no prompt, a program not on a list is refused at once.
    package var pinentry: String?
    package var promptTimeout: Duration

    package static let defaultPromptTimeout = 30
    package static let promptTimeoutRange = 1...3600
    package static let none = AccessSettings(pinentryPath: nil, promptTimeout: .seconds(defaultPromptTimeout))

    private init(pinentryPath: String?, promptTimeout: Duration) {
        self.pinentry = pinentryPath
        self.promptTimeout = promptTimeout
    }

    /// Checks `[access]`'s values: an absolute path to an executable file, and 1–600 seconds.
    package init(pinentry: String?, promptTimeoutSeconds: Int? = nil) throws(KeychainError) {
        if let pinentry {
            guard PathText.isAbsolute(pinentry) else {
                throw .invalidInput("[access] pinentry = \"\(pinentry)\": give an absolute path, like /usr/bin/pinentry-tty")
            }
            var st = stat()
            guard stat(pinentry, &st) == 0, st.st_mode & S_IFMT == S_IFREG, access(pinentry, X_OK) == 0 else {
                throw .invalidInput("[access] pinentry = \"\(pinentry)\": no executable file there")
            }
        }
        let seconds = promptTimeoutSeconds ?? Self.defaultPromptTimeout
        guard Self.promptTimeoutRange.contains(seconds) else {
            throw .invalidInput("[access] prompt-timeout = \(seconds): give \(Self.promptTimeoutRange.lowerBound) to \(Self.promptTimeoutRange.upperBound) seconds")
        }
        self.init(pinentryPath: pinentry, promptTimeout: .seconds(seconds))
    }

    /// The prompt, when one is configured.
    package var prompt: Pinentry? { pinentry.map { Pinentry(path: $0, timeout: promptTimeout) } }
}
