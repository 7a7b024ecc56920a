import ArgumentParser
import Foundation
import KeychainAccess
import KeychainModel

/// `keychainfs access log`: what the per-program gate decided (issue 17).
struct AccessCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access",
        abstract: "Per-program access: what the daemon refused, asked and allowed.",
        subcommands: [AccessLogCommand.self])
}

struct AccessLogCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Show the access log: each refusal and each prompt's answer, oldest first.",
        discussion: """
            Each entry names the time, the program, its pid and command line, the item, the \
            operation and the decision with its reason; a refusal also shows the one command \
            that would allow it. The log is $XDG_STATE_HOME/keychainfs/access.log (JSON lines).
            """)

    @Flag(help: "One JSON object per line.") var json = false

    func run() throws {
        let (entries, unreadable) = try AccessLog.read(AccessLog.defaultPath)
        Output.write(AccessLog.render(entries, json: json))
        if unreadable > 0 {
            FileHandle.standardError.write(Data("keychainfs: \(unreadable) line\(unreadable == 1 ? "" : "s") of \(AccessLog.defaultPath) could not be read\n".utf8))
        }
    }
}
