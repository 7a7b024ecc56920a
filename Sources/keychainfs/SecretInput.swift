import Foundation
import KeychainClient
import KeychainCrypto
import KeychainModel
import KeychainStore

/// The secret of an added item when `-w` is not given.
enum SecretInput {
    /// From standard input exactly as sent, no newline added or stripped, so binary secrets
    /// survive; when standard input is a terminal, or `preferTerminal` (a bare -w) and there is
    /// one, typed twice without echo instead, as macOS asks. A bare -w with no terminal reads
    /// standard input, but not nothing: an empty secret stored because no one was there to be
    /// asked is refused.
    static func read(preferTerminal: Bool) throws -> SecureBytes {
        if isatty(0) == 1 || preferTerminal,
           let terminal = try? Terminal.open(purpose: "ask for the password", alternatives: "-w PASSWORD or standard input") {
            return try askTwice(terminal)
        }
        let secret = try readAll(fd: 0)
        if preferTerminal && secret.count == 0 {
            throw KeychainError.invalidInput("-w last asks for the password at a terminal, and there is none; standard input was empty too: give the password on standard input or as -w PASSWORD")
        }
        return secret
    }

    /// Up to three rounds: a mismatch is asked again.
    private static func askTwice(_ terminal: Terminal) throws -> SecureBytes {
        for round in 1...3 {
            let first = try terminal.readHidden(prompt: "password data for new item: ")
            let again = try terminal.readHidden(prompt: "retype password for new item: ")
            if first.isEqual(to: again) { return first }
            first.wipe(); again.wipe()
            if round < 3 { terminal.say("The two passwords differ; type them again.") }
        }
        throw KeychainError.invalidInput("the two passwords differed three times; nothing was saved")
    }

    /// Reads to end of file into locked memory.
    static func readAll(fd: Int32) throws -> SecureBytes {
        switch Descriptor.readSecretToEnd(fd, limit: maxSecretBytes) {
        case .complete(let secret): return secret
        case .tooLarge(let total): throw KeychainError.secretTooLarge(total)
        case .failed(let code):
            throw KeychainError.io("cannot read the secret from standard input: \(String(cString: strerror(code)))")
        }
    }
}
