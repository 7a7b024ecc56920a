import KeychainErrors
import KeychainModel

extension AccessRule {
    /// Pins a program by the files its paths name now: what `-T` and setting the xattr do.
    package static func pinning(_ program: AccessProgram) throws(KeychainError) -> AccessRule {
        switch program {
        case .executable(let p):
            return AccessRule(program: program, executable: try FileIdentity.of(path: p), script: nil)
        case .script(let i, let s):
            return AccessRule(program: program, executable: try FileIdentity.of(path: i), script: try FileIdentity.of(path: s))
        case .flatpak:
            return AccessRule(program: program, executable: nil, script: nil)
        }
    }
}

extension AccessList {
    /// A list set through the xattr or `-T`: each program pinned now, except those this list
    /// already holds, which keep the identity they were allowed with (setting the list again
    /// is not allowing a changed binary again; removing and re-adding the program is).
    package func setting(_ programs: [AccessProgram]) throws(KeychainError) -> AccessList {
        // A program given twice is listed once, as the xattr's parsing does.
        var distinct: [AccessProgram] = []
        for program in programs where !distinct.contains(program) { distinct.append(program) }
        guard distinct.count <= Self.maxRules else { throw .invalidInput("an access list holds at most \(Self.maxRules) programs") }
        var out: [AccessRule] = []
        for program in distinct {
            if let kept = rules.first(where: { $0.program == program }) { out.append(kept) } else { out.append(try .pinning(program)) }
        }
        return AccessList(rules: out)
    }

}
