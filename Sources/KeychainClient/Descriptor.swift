// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import Glibc
#else
import Foundation
#endif

/// Reading a descriptor as bytes, for the tools' pipes and `/proc` files.
package enum Descriptor {
    /// Everything `fd` gives until its end (or an error), as bytes; a signal is read through.
    /// The bytes land in ordinary arrays that nothing wipes: a long-lived process reads a secret
    /// into `SecureBytes` instead. (The git helper reads git's request, password included, this
    /// way: a process of its own for one request, non-dumpable before it reads.)
    package static func readToEnd(_ fd: Int32, chunk: Int = 4096) -> [UInt8] {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: chunk)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return out }
            out += buffer[0..<n]
        }
    }
}
