import ArgumentParser
import Foundation
import KeychainCrypto
import KeychainStore

/// Where a passphrase comes from. Never argv: other users can read a process's arguments.
enum PassphraseInput {
    /// Up to the first newline or the end of the stream, as gpg's --passphrase-fd.
    case fileDescriptor(Int32)
    /// The file's first line.
    case file(String)
    /// Typed at /dev/tty without echo.
    case terminal

    /// Reads the passphrase; a new one typed at the terminal is asked twice (`confirm`).
    func read(prompt: String, confirm: Bool = false) throws -> SecureBytes {
        // A process that holds a passphrase is not dumpable, like the daemon.
        ProcessProtection.makeNotDumpable()
        switch self {
        case .fileDescriptor(let fd):
            guard fd >= 0, InheritedDescriptors.wasInherited(fd) else {
                throw KeychainError.invalidInput("file descriptor \(fd) was not open when keychainfs started; "
                                                 + "open it for the command (\(fd)<FILE in the shell) or give the file's path instead")
            }
            return try LineReader.readLine(fd: fd, what: "the passphrase from file descriptor \(fd)")
        case .file(let path):
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw KeychainError.invalidInput("cannot open the passphrase file \(path): \(String(cString: strerror(errno)))")
            }
            defer { close(fd) }
            return try LineReader.readLine(fd: fd, what: "the passphrase file \(path)")
        case .terminal:
            let terminal = try Terminal.open(purpose: "ask for the passphrase", alternatives: "--passphrase-fd N or --passphrase-file PATH")
            guard confirm else { return try terminal.readHidden(prompt: prompt) }
            return try Self.askNew(terminal, prompt: prompt)
        }
    }

    /// A new passphrase at the terminal, in up to three rounds: an empty one is refused at
    /// once (no point repeating it), and a mismatch is asked again.
    private static func askNew(_ terminal: Terminal, prompt: String) throws -> SecureBytes {
        var refusal = KeychainError.invalidInput("")
        for round in 1...3 {
            let first = try terminal.readHidden(prompt: prompt)
            if first.count == 0 {
                refusal = NewPassphrase.emptyRefusal
            } else {
                let again = try terminal.readHidden(prompt: "Repeat the passphrase: ")
                if first.isEqual(to: again) { return first }
                first.wipe(); again.wipe()
                refusal = .invalidInput("the two passphrases differ")
            }
            if round < 3 { terminal.say("Sorry: \(refusal.description); try again.") }
        }
        throw refusal
    }

    static func choose(fd: Int32?, file: String?) -> PassphraseInput {
        if let fd { return .fileDescriptor(fd) }
        if let file { return .file(file) }
        return .terminal
    }
}

/// `--passphrase-fd N` / `--passphrase-file PATH`, else the terminal.
struct PassphraseOptions: ParsableArguments {
    @Option(name: .customLong("passphrase-fd"), help: ArgumentHelp(
        "Read the passphrase from file descriptor N, up to the first newline or end of file.", valueName: "n"))
    var passphraseFD: Int32?

    @Option(name: .customLong("passphrase-file"), help: ArgumentHelp(
        "Read the passphrase from the first line of this file.", valueName: "path"), completion: .file())
    var passphraseFile: String?

    func validate() throws {
        if passphraseFD != nil && passphraseFile != nil {
            throw ValidationError("give either --passphrase-fd or --passphrase-file, not both")
        }
    }

    var input: PassphraseInput { .choose(fd: passphraseFD, file: passphraseFile) }

    var isGiven: Bool { passphraseFD != nil || passphraseFile != nil }

    func read(prompt: String) throws -> SecureBytes { try input.read(prompt: prompt) }

    /// How many times a passphrase typed at the terminal may be wrong before the command fails.
    static let terminalTries = 3

    /// Runs `body` with a way to read the passphrase. At the terminal a wrong passphrase is
    /// asked again, up to three tries in all; from a descriptor or a file there is one try.
    func withRetries<T>(prompt: String, _ body: (_ passphrase: () throws -> SecureBytes) throws -> T) throws -> T {
        guard case .terminal = input else { return try body { try input.read(prompt: prompt) } }
        var attempt = 1
        while true {
            var asked = false
            do {
                return try body {
                    asked = true
                    return try input.read(prompt: prompt)
                }
            } catch KeychainError.wrongPassphrase where asked && attempt < Self.terminalTries {
                attempt += 1
                (try? Terminal.open(purpose: "", alternatives: ""))?.say("Sorry, the passphrase is wrong; try again.")
            }
        }
    }

    /// A passphrase for a new store or a new one for `passwd`: asked twice at a terminal, never empty.
    func readNew(prompt: String) throws -> SecureBytes {
        try NewPassphrase.check(input.read(prompt: prompt, confirm: true))
    }
}

/// `passwd`'s `--new-passphrase-fd N` / `--new-passphrase-file PATH`, else the terminal.
struct NewPassphraseOptions: ParsableArguments {
    @Option(name: .customLong("new-passphrase-fd"), help: ArgumentHelp(
        "Read the new passphrase from file descriptor N, up to the first newline or end of file.", valueName: "n"))
    var newPassphraseFD: Int32?

    @Option(name: .customLong("new-passphrase-file"), help: ArgumentHelp(
        "Read the new passphrase from the first line of this file.", valueName: "path"), completion: .file())
    var newPassphraseFile: String?

    func validate() throws {
        if newPassphraseFD != nil && newPassphraseFile != nil {
            throw ValidationError("give either --new-passphrase-fd or --new-passphrase-file, not both")
        }
    }

    var isGiven: Bool { newPassphraseFD != nil || newPassphraseFile != nil }

    func read() throws -> SecureBytes {
        try NewPassphrase.check(PassphraseInput.choose(fd: newPassphraseFD, file: newPassphraseFile)
            .read(prompt: "New passphrase: ", confirm: true))
    }
}

enum NewPassphrase {
    static func check(_ passphrase: SecureBytes) throws -> SecureBytes {
        guard passphrase.count > 0 else { throw emptyRefusal }
        return passphrase
    }

    static let emptyRefusal = KeychainError.invalidInput(
        "the passphrase is empty; 'init --no-passphrase' makes a store without one")
}
