// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif

/// Where an internet password is in the mounted tree: `/internet/<server>/<port>/<path…>/<name>`,
/// each part escaped. No one part may pass `NAME_MAX` (`TreeName`), and the whole may not pass
/// `PATH_MAX`: an item deeper than that could be stored but not opened by its path from the
/// mountpoint, so every way in (the CLI, the tree, git, import) refuses it as too long.
package enum InternetTreePath {
    /// `PATH_MAX` counts the terminating NUL.
    package static let maxBytes = Int(PATH_MAX) - 1

    /// The path below the mountpoint, as the tree lists the item.
    package static func path(of key: InternetPasswordKey) -> String {
        var out = "/internet/" + TreeName.escape(key.server) + "/" + String(key.port)
        for segment in InternetPath.segments(key.path) { out += "/" + TreeName.escape(segment) }
        return out + "/" + InternetVariantName.fileName(for: key)
    }

    static func validate(_ key: InternetPasswordKey) throws(ModelError) {
        let n = path(of: key).utf8.count
        if n > maxBytes {
            throw .nameTooLong("the item's path in the tree (/internet/server/port/path/account) is \(n) bytes once escaped; "
                + "the limit is \(maxBytes) (PATH_MAX)")
        }
    }
}
