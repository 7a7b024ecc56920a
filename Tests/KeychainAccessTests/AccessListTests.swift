import Foundation
import XCTest
@testable import KeychainAccess
import KeychainErrors
import KeychainModel

final class AccessListTests: AccessTestCase {
    func testTextRoundTripsEveryKindOfProgram() throws {
        let text = "/usr/bin/head\n/usr/bin/python3 /home/me/bin/sync.py\nflatpak:org.gnome.Fractal\n/opt/my%20app/run%25me\n"
        let programs = try AccessList.programs(parsing: text)
        XCTAssertEqual(programs, [
            .executable("/usr/bin/head"),
            .script(interpreter: "/usr/bin/python3", script: "/home/me/bin/sync.py"),
            .flatpak("org.gnome.Fractal"),
            .executable("/opt/my app/run%me"),
        ])
        XCTAssertEqual(programs.map { $0.description + "\n" }.joined(), text)
        XCTAssertEqual(try AccessList.programs(parsing: programs.map(\.description).joined(separator: "\n")), programs)
    }

    func testBlankLinesSpacesAndRepeatsAreForgiven() throws {
        XCTAssertEqual(try AccessList.programs(parsing: "\n  /usr/bin/head  \n\n/usr/bin/head\n"), [.executable("/usr/bin/head")])
        XCTAssertEqual(try AccessList.programs(parsing: ""), [])
        XCTAssertEqual(try AccessList.anyProgram.setting([]).text, "")
        XCTAssertTrue(try AccessList.anyProgram.setting([]).isAnyProgram)
    }

    func testBadTextIsRefusedWithAClearError() {
        let bad: [(String, String)] = [
            ("usr/bin/head", "not an absolute path"),
            ("/usr/bin/python3 sync.py", "not an absolute path"),
            ("/a /b /c", "a program is a path"),
            ("/usr/bin/%zz", "% must start an escape"),
            ("/usr/bin/%4", "% must start an escape"),
            ("/usr/bin/a%00b", "NUL"),
            ("/usr/bin/%FF", "not UTF-8"),
            ("flatpak:", "not a Flatpak app id"),
            ("flatpak:org.example", "not a Flatpak app id"),
            ("flatpak:org.1example.App", "not a Flatpak app id"),
            ("flatpak:org.ex ample.App", "not a Flatpak app id"),
            ("/" + String(repeating: "a", count: 4096), "over 4096 bytes"),
        ]
        for (text, message) in bad {
            XCTAssertThrowsError(try AccessList.programs(parsing: text), text) { error in
                guard case KeychainError.invalidInput(let m) = error else { return XCTFail("\(text): \(error)") }
                XCTAssertTrue(m.contains(message), "\(text): \(m)")
            }
        }
        let tooMany = (0...AccessList.maxRules).map { "/usr/bin/p\($0)" }.joined(separator: "\n")
        XCTAssertThrowsError(try AccessList.programs(parsing: tooMany))
    }

    func testPinningReadsTheFileNowAndRefusesWhatIsNotThere() throws {
        let rule = try AccessRule.pinning(.executable("/usr/bin/head"))
        let identity = try FileIdentity.of(path: "/usr/bin/head")
        XCTAssertEqual(rule.executable, identity)
        XCTAssertEqual(identity.sha256.count, 32)
        var st = stat()
        XCTAssertEqual(stat("/usr/bin/head", &st), 0)
        XCTAssertEqual(identity.inode, UInt64(st.st_ino))
        XCTAssertEqual(identity.size, UInt64(st.st_size))
        XCTAssertThrowsError(try AccessRule.pinning(.executable("/nonexistent/prog")))
        XCTAssertThrowsError(try AccessRule.pinning(.executable("/usr/bin")), "a directory is no program")
        // A flatpak rule has no file to pin.
        XCTAssertNil(try AccessRule.pinning(.flatpak("org.example.App")).executable)
    }

    func testSettingTheListAgainKeepsThePinsItHolds() throws {
        let dir = directory()
        let prog = try dir.copy("/usr/bin/head", as: "prog")
        let first = try list(prog)
        // The binary changes; setting the same list again does not allow the new one...
        _ = try dir.copy("/usr/bin/tail", as: "prog")
        let again = try first.setting([.executable(prog)])
        XCTAssertEqual(again.rules.first?.executable, first.rules.first?.executable)
        // ...removing it and adding it back does.
        let readded = try first.setting([]).setting([.executable(prog)])
        XCTAssertEqual(readded.rules.first?.executable, try FileIdentity.of(path: prog))
        XCTAssertNotEqual(readded.rules.first?.executable, first.rules.first?.executable)
    }

    func testAddingReplacesTheSameProgramAndStopsAtTheLimit() throws {
        let dir = directory()
        let prog = try dir.copy("/usr/bin/head", as: "prog")
        let old = try list(prog, "/usr/bin/tail")
        _ = try dir.copy("/usr/bin/cat", as: "prog")
        let renewed = try old.adding(.pinning(.executable(prog)))
        XCTAssertEqual(renewed.rules.map(\.program), [.executable("/usr/bin/tail"), .executable(prog)])
        XCTAssertEqual(renewed.rules.last?.executable, try FileIdentity.of(path: prog))
        let full = AccessList(rules: (0..<AccessList.maxRules).map {
            AccessRule(program: .flatpak("org.example.App\($0)"), executable: nil, script: nil)
        })
        XCTAssertThrowsError(try full.adding(.pinning(.executable("/usr/bin/head"))))
    }

    func testSealedFormRoundTrips() throws {
        let dir = directory()
        let script = try dir.write("print('hi')\n", as: "sync.py")
        let original = try list("/usr/bin/head", "/usr/bin/python3 \(script)", "flatpak:org.example.App")
        let bytes = original.encoded
        XCTAssertEqual(try AccessList(decoding: bytes), original)
        XCTAssertEqual(try AccessList(decoding: AccessList.anyProgram.encoded), .anyProgram)
        // Compact: a version, a count, then per rule a kind, paths and 68-byte identities.
        XCTAssertEqual(bytes.count, 1 + 2 + (1 + 2 + 13 + 68) + (1 + 2 + 16 + 68 + 2 + script.utf8.count + 68) + (1 + 2 + 15))
    }

    func testSealedFormRefusesEveryMalformedInput() throws {
        let good = try list("/usr/bin/head", "flatpak:org.example.App").encoded
        for n in 0..<good.count {
            XCTAssertThrowsError(try AccessList(decoding: Array(good.prefix(n))), "truncated at \(n)")
        }
        func refuses(_ bytes: [UInt8], _ why: String, file: StaticString = #filePath, line: UInt = #line) {
            XCTAssertThrowsError(try AccessList(decoding: bytes), file: file, line: line) { error in
                guard case KeychainError.integrityFailure(let m) = error else { return XCTFail("\(error)", file: file, line: line) }
                XCTAssertTrue(m.contains(why), m, file: file, line: line)
            }
        }
        refuses(good + [0], "trailing bytes")
        var version = good; version[0] = 2
        refuses(version, "unknown version")
        var kind = good; kind[3] = 9
        refuses(kind, "unknown rule kind 9")
        var count = good; count[1] = 0xff
        refuses(count, "rules")
        // A relative path, a bad app id, a nanosecond count out of range, a repeat.
        var relative = good; relative[6] = UInt8(ascii: "u")
        refuses(relative, "bad path")
        let flatpak = AccessList(rules: [AccessRule(program: .flatpak("org.example.App"), executable: nil, script: nil)]).encoded
        var badID = flatpak; badID[badID.count - 1] = UInt8(ascii: " ")
        refuses(badID, "bad app id")
        var badTime = try list("/usr/bin/head").encoded
        let nanos = 1 + 2 + 1 + 2 + 13 + 32
        badTime.replaceSubrange(nanos..<nanos + 4, with: [0xff, 0xff, 0xff, 0xff])
        refuses(badTime, "bad time")
        let head = try AccessRule.pinning(.executable("/usr/bin/head"))
        refuses(AccessList(rules: [head, head]).encoded, "twice")
    }

    func testRandomDamageNeverCrashesTheDecoder() throws {
        let good = try list("/usr/bin/head", "/usr/bin/tail", "flatpak:org.example.App").encoded
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            var bytes = good
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            _ = try? AccessList(decoding: bytes)
        }
    }

    func testAllowCommandCarriesTheWholeList() throws {
        let current = try list("/usr/bin/ssh")
        let generic = AllowCommand.line(for: genericItem("github", "bob").key, list: current, adding: .executable("/usr/bin/head"))
        XCTAssertEqual(generic, "keychainfs access set-generic -s github -a bob -T /usr/bin/ssh -T /usr/bin/head")
        // Listed already and refused: its file changed, so the command pins it anew.
        XCTAssertEqual(AllowCommand.line(for: genericItem("github", "bob").key, list: try list("/usr/bin/ssh", "/usr/bin/head"), adding: .executable("/usr/bin/ssh")),
                       "keychainfs access set-generic -s github -a bob -T /usr/bin/head -T /usr/bin/ssh --repin /usr/bin/ssh")
        let spaced = AllowCommand.line(for: genericItem("my svc", "it's").key, list: .anyProgram,
                                       adding: .script(interpreter: "/usr/bin/python3", script: "/home/me/a b.py"))
        XCTAssertEqual(spaced, "keychainfs access set-generic -s 'my svc' -a 'it'\\''s' -T '/usr/bin/python3 /home/me/a%20b.py'")
        let key = try InternetPasswordKey(server: "example.com", port: 8443, path: "api/v1", protocol: .init(parsing: "https"),
                                          securityDomain: "realm", account: "carol")
        XCTAssertEqual(AllowCommand.line(for: .internet(key), list: .anyProgram, adding: .flatpak("org.example.App")),
                       "keychainfs access set-internet -s example.com -P 8443 -p api/v1 -r https -d realm -a carol -T flatpak:org.example.App")
    }

    func testSettingsCheckTheirValues() throws {
        let settings = try AccessSettings(pinentry: "/usr/bin/pinentry-tty", promptTimeoutSeconds: nil)
        XCTAssertEqual(settings.promptTimeout, .seconds(30))
        XCTAssertEqual(settings.prompt?.path, "/usr/bin/pinentry-tty")
        XCTAssertNil(try AccessSettings(pinentry: nil).prompt)
        XCTAssertEqual(try AccessSettings(pinentry: nil, promptTimeoutSeconds: 5).promptTimeout, .seconds(5))
        for (path, seconds, message) in [("pinentry-tty", 30, "absolute path"), ("/nonexistent/pinentry", 30, "no executable file"),
                                         ("/etc/passwd", 30, "no executable file"), ("/usr/bin", 30, "no executable file"),
                                         ("/usr/bin/pinentry-tty", 0, "1 to 3600"), ("/usr/bin/pinentry-tty", 3601, "1 to 3600")] {
            XCTAssertThrowsError(try AccessSettings(pinentry: path, promptTimeoutSeconds: seconds)) { error in
                XCTAssertTrue("\(error)".contains(message), "\(path) \(seconds): \(error)")
            }
        }
    }

    func testShownTextCannotForgeLinesOrHideItself() {
        XCTAssertEqual(Shown.text("a\nProgram: /usr/bin/ssh"), "a\\x0aProgram: /usr/bin/ssh")
        XCTAssertEqual(Shown.text("\u{1b}[2Jx"), "\\x1b[2Jx")
        XCTAssertEqual(Shown.text("abc\u{202e}fdp.exe"), "abc\\u{202e}fdp.exe")
        XCTAssertEqual(Shown.text("back\\x0a"), "back\\\\x0a", "a literal backslash cannot pose as an escape")
        XCTAssertEqual(Shown.commandLine(["/usr/bin/head", "-n", "1", "my file"]), "/usr/bin/head -n 1 'my file'")
    }

    func testProcFilesAreParsedByTheirLastParenthesis() throws {
        // A command name may hold spaces and `)`: fields count from the last one.
        let stat = "4242 (a) b) 7 c) S 1 4242 4242 34816 4242 4194304 94 0 0 0 0 0 0 0 20 0 1 0 987654 2433024 215 "
            + "18446744073709551615 94000000000000 94000000001000 140000000000000 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 "
            + "94000000002000 94000000003000 94000000004000 140000000000100 140000000000200 140000000000300 140000000000400 0\n"
        let parsed = try XCTUnwrap(ProcStat(Array(stat.utf8)))
        XCTAssertEqual(parsed.terminal, 34816)
        XCTAssertEqual(parsed.startTime, 987654)
        XCTAssertEqual(parsed.imageLayout, [94000000000000, 94000000001000, 140000000000000, 94000000002000, 94000000003000,
                                            94000000004000, 140000000000100, 140000000000200, 140000000000300, 140000000000400])
        XCTAssertTrue(parsed.isSettled)
        XCTAssertEqual(CallerFacts.terminalName(parsed.terminal), "/dev/pts/0")
        XCTAssertNil(ProcStat(Array("4242 no parenthesis".utf8)))
        let status = "Name:\tTgid: fake\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4243\nPPid:\t1\nTracerPid:\t99\n"
        let fields = ProcStatus(Array(status.utf8))
        XCTAssertEqual(fields.tgid, 4242, "a name that looks like a field is not one")
        XCTAssertEqual(fields.parentPID, 1)
        XCTAssertEqual(fields.tracerPID, 99)
        XCTAssertNil(ProcStatus(Array("Tgid:\t1\n".utf8)).tracerPID, "missing is not zero")
    }

    func testFlatpakInfoParsing() {
        let info = "[Application]\nname=org.gnome.Fractal\nruntime=runtime/org.gnome.Platform/x86_64/45\n\n[Instance]\ninstance-id=1\n"
        XCTAssertEqual(FlatpakInfo.applicationName(Array(info.utf8)), "org.gnome.Fractal")
        XCTAssertNil(FlatpakInfo.applicationName(Array("[Runtime]\nname=org.gnome.Platform\n".utf8)))
        XCTAssertNil(FlatpakInfo.applicationName(Array("[Application]\nname=../../etc\n".utf8)))
    }
}
