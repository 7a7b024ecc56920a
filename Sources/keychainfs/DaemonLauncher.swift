import Foundation
import KeychainDaemon
import KeychainClient
import KeychainCrypto
import KeychainStore

/// Starts the mount daemon as a child in its own session and waits until it reports that the
/// mount serves, so that a script may use the mount on its next line.
///
/// The passphrase goes to the child through a `SecretHandover` channel (never argv), once the
/// child is non-dumpable; the child answers on a pipe with one line: `OK`, or `ERR <KeychainError as JSON>`.
enum DaemonLauncher {
    static let passphraseFD: Int32 = 3
    static let readyFD: Int32 = 4

    /// Starts `_daemon` with no arguments: the settings, parsed once by `mount`, go to it whole
    /// on the first line of the passphrase pipe, and the passphrase (if any) on the second.
    static func launch(settings: MountSettings, passphrase: SecureBytes?) throws {
        let handover: Data
        do { handover = try JSONEncoder().encode(DaemonHandover(settings: settings, passphraseFollows: passphrase != nil)) }
        catch { throw KeychainError.mountFailed("cannot encode the mount settings: \(error)") }
        var readyPipe: [Int32] = [0, 0]
        guard pipe(&readyPipe) == 0 else {
            throw KeychainError.mountFailed("cannot create a pipe: \(String(cString: strerror(errno)))")
        }
        // Only the dup2'ed copy reaches the daemon.
        for fd in readyPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        // Its own session: the daemon outlives the shell that mounted, and is scheduled apart from it.
        // Nothing is written to it before it is non-dumpable (SecretHandover).
        let pid: pid_t, channel: Int32
        do {
            defer { close(readyPipe[1]) }
            (pid, channel) = try SecretHandover.spawn(
                [ChildProcess.ownExecutable, DaemonCommand.configuration.commandName ?? "_daemon"],
                childFD: passphraseFD, descriptors: [(readyPipe[1], readyFD)], newSession: true)
        } catch {
            // A daemon that started but would not take the passphrase says why on the ready pipe.
            let answer = readAll(readyPipe[0])
            close(readyPipe[0])
            if answer.hasPrefix("ERR "),
               let reported = try? JSONDecoder().decode(KeychainError.self, from: Data(answer.dropFirst(4).utf8)) {
                throw reported
            }
            throw KeychainError.mountFailed("cannot start the daemon: \(error.reason)")
        }
        (handover + Data("\n".utf8)).withUnsafeBytes { _ = SecretHandover.send($0, on: channel) }
        if let passphrase {
            passphrase.withUnsafeBytes { _ = SecretHandover.send($0, on: channel) }
            [UInt8(ascii: "\n")].withUnsafeBytes { _ = SecretHandover.send($0, on: channel) }
        }
        close(channel)
        let answer = readAll(readyPipe[0])
        close(readyPipe[0])
        if answer.hasPrefix("OK") {
            let notice = answer.dropFirst(2).trimmingCharacters(in: .whitespacesAndNewlines)
            if !notice.isEmpty { FileHandle.standardError.write(Data("keychainfs: warning: \(notice)\n".utf8)) }
            return
        }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        if answer.hasPrefix("ERR "),
           let error = try? JSONDecoder().decode(KeychainError.self, from: Data(answer.dropFirst(4).utf8)) {
            throw error
        }
        throw KeychainError.mountFailed("the daemon exited before the mount was ready (status \(status))")
    }

    private static func readAll(_ fd: Int32) -> String {
        String(decoding: Descriptor.readToEnd(fd, chunk: 512), as: UTF8.self)
    }

    /// The child's side of the ready pipe; `notice`, with success, is for the caller to see.
    static func report(_ result: Result<Void, KeychainError>, notice: String? = nil, fd: Int32) {
        let line: String
        switch result {
        case .success: line = notice.map { "OK \($0.replacingOccurrences(of: "\n", with: " "))\n" } ?? "OK\n"
        case .failure(let e):
            let json = (try? JSONEncoder().encode(e)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
            line = "ERR \(json)\n"
        }
        _ = line.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }
}

/// What `mount` hands the daemon it starts.
struct DaemonHandover: Codable {
    var settings: MountSettings
    var passphraseFollows: Bool
}
