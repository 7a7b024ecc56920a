#if canImport(FoundationEssentials)
import Glibc
#else
import Foundation
#endif

/// The command line as the kernel gave it, bytes and all.
///
/// Swift's `CommandLine.arguments` decodes each argument with repair: bytes that are not
/// UTF-8 become U+FFFD. A name given that way would be stored as another name (and two names
/// differing only in such bytes would be one), a `-w` secret or a path silently changed. So
/// the tools look at the raw arguments (and the variables paths are made from) first, and
/// refuse, or pass on, what is not UTF-8.
package enum CommandArguments {
    /// The position (1 is the first after the program's own name, which is not looked at) of
    /// the first argument that is not UTF-8, or nil.
    package static func firstNotUTF8() -> Int? {
        for i in 1..<max(1, Int(CommandLine.argc)) {
            guard let p = CommandLine.unsafeArgv[i] else { continue }
            if String(validatingCString: p) == nil { return i }
        }
        return nil
    }

    /// The variables `KeychainLocations` builds paths from: one that is not UTF-8 would name
    /// another store or directory as silently as such an argument.
    package static let locationVariables = ["KEYCHAINFS_STORE", "HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
                                            "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"]

    /// The first of `locationVariables` that is set and not UTF-8, or nil.
    package static func firstVariableNotUTF8() -> String? {
        locationVariables.first { name in getenv(name).map { String(validatingCString: $0) == nil } ?? false }
    }

    /// The message for such an argument; the tool exits 65 (bad input).
    package static func notUTF8Message(_ position: Int) -> String {
        "argument \(position) is not UTF-8: names, secrets given with -w and paths must be UTF-8 (give a secret that is not UTF-8 on standard input)"
    }

    /// The message for such a variable; the tool exits 65 (bad input).
    package static func variableNotUTF8Message(_ name: String) -> String {
        "$\(name) is not UTF-8: keychainfs's paths must be UTF-8"
    }
}
