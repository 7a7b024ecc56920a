import Foundation
import KeychainAccess
import KeychainCrypto

/// Asks for the keychain's passphrase through pinentry, the standard Linux prompt program,
/// speaking its Assuan protocol on a socket pair (`SETDESC`, `SETPROMPT`, `SETTIMEOUT`, `GETPIN`).
/// The answer goes from the socket into locked memory, never into a `String` or `Data`.
package struct PinentryPassphrase: Sendable {
    package var program: String
    package var timeout: Int

    package init(program: String, timeout: Int = 30) {
        self.program = program
        self.timeout = timeout
    }

    package enum Outcome {
        case passphrase(SecureBytes)
        /// Cancelled, timed out, or the program failed: the prompt is dismissed.
        case dismissed(String)
    }

    /// Runs pinentry once; blocks the calling thread (never the bus's) until it answers.
    /// Started as the access prompt's pinentry is (`Pinentry.launch`: a socket pair, nothing
    /// else of the daemon's inherited), spoken to through the same `AssuanSession`, and reaped
    /// by its pid.
    package func ask(description: String) -> Outcome {
        let fd: Int32, pid: pid_t
        do { (fd, pid) = try Pinentry.launch(program) } catch { return .dismissed(error.reason) }
        var session = AssuanSession(fd: fd, deadline: .now + .seconds(timeout + 5))
        let pin = SecureBytes()
        let outcome = converse(&session, description: description, pin: pin)
        if case .dismissed = outcome { pin.wipe() } else { _ = session.send("BYE") }
        close(fd)
        if case .passphrase = outcome { Pinentry.reap(pid, force: false) } else { Pinentry.reap(pid, force: true) }
        return outcome
    }

    private func converse(_ s: inout AssuanSession, description: String, pin: SecureBytes) -> Outcome {
        do {
            try s.expectOK()
            for command in ["SETTITLE keychainfs", Pinentry.line("SETDESC", description), "SETPROMPT Passphrase:",
                            "SETTIMEOUT \(timeout)"] where try s.command(command) != nil {
                return .dismissed("\(program) refused \(command.prefix(10))")
            }
            guard try s.command("GETPIN", data: pin) == nil else { return .dismissed("cancelled or timed out") }
            return .passphrase(pin)
        } catch .timedOut {
            return .dismissed("\(program) gave no answer in time")
        } catch {
            return .dismissed("\(program): \(error)")
        }
    }
}
