// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import Glibc
#else
import Foundation
#endif
import KeychainCrypto

/// Reading a descriptor to its end, for the tools' pipes, `/proc` files and secrets.
package enum Descriptor {
    /// Everything `fd` gives until its end (or an error), as bytes; a signal is read through.
    /// The bytes land in ordinary arrays that nothing wipes: a secret is read with
    /// `readSecretToEnd` instead.
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

    /// What `readSecretToEnd` read.
    package enum SecretRead {
        case complete(SecureBytes)
        /// More than the limit: the whole size, counted to the end; nothing was kept.
        case tooLarge(Int)
        /// read(2) failed with this errno; nothing was kept.
        case failed(Int32)
    }

    /// Everything `fd` gives until its end, read straight into locked memory (no copy of it is
    /// left in an ordinary buffer). Past `limit` bytes what was read is wiped and the rest only
    /// counted, so that the caller can say how large the secret was.
    package static func readSecretToEnd(_ fd: Int32, limit: Int) -> SecretRead {
        let secret = SecureBytes(count: 0)
        var chunk = 4096
        while true {
            let start = secret.count
            secret.resize(to: start + chunk)
            let n = secret.withUnsafeMutableBytes { read(fd, $0.baseAddress! + start, chunk) }
            secret.resize(to: start + max(n, 0))
            if n < 0 {
                if errno == EINTR { continue }
                let failure = errno
                secret.wipe()
                return .failed(failure)
            }
            if n == 0 { return .complete(secret) }
            if secret.count > limit {
                let total = secret.count + countRemaining(fd)
                secret.wipe()
                return .tooLarge(total)
            }
            chunk = min(chunk * 2, 1 << 20)
        }
    }

    private static func countRemaining(_ fd: Int32) -> Int {
        let scratch = SecureBytes(count: 1 << 16)
        var total = 0
        while true {
            let n = scratch.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return total }
            total += n
        }
    }
}
