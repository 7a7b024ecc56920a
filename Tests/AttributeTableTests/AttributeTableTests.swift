import XCTest
import ArgumentParser
import KeychainAccess
@testable import KeychainBackup
@testable import KeychainControlProtocol
import KeychainCrypto
import KeychainFileSystem
import KeychainModel
@testable import KeychainStore
@testable import keychainfs_full

/// Walks `ItemAttribute.all` and sends each attribute through every channel that carries it:
/// the store's encoding (and the JSON of old stores), the control protocol, backups, the
/// mounted tree's xattrs, the CLI's flags, the printer and the JSON dump. A new row is
/// covered without a line here; a row that a channel drops, or whose bit or tag collides
/// with another, fails.
final class AttributeTableTests: XCTestCase {
    let key = ItemKey.generic(try! GenericPasswordKey(service: "svc", account: "acct"))

    /// A value of the attribute's kind that is not the same for two attributes; bytes that are not text.
    func sample(_ a: ItemAttribute) throws -> AttributeValue {
        switch a.kind {
        case .text: .text("\(a.name) ✓\nvalue")
        case .bytes: .bytes(Data([0, 0xff]) + Data(a.name.utf8))
        case .code: .code(try FourCharCode("c\(a.presenceBit)\(a.wireTag % 10) "))
        case .programs: .programs(Self.sampleList)
        // Yes: not set reads as no, so yes is the value a channel could drop unseen.
        case .flag: .flag(true)
        }
    }

    /// An access list of every kind of rule, with made-up identities (nothing is read here).
    static let sampleList = AccessList(rules: [
        AccessRule(program: .executable("/usr/bin/head"), executable: identity(1), script: nil),
        AccessRule(program: .script(interpreter: "/usr/bin/python3", script: "/home/me/a b.py"),
                   executable: identity(2), script: identity(3)),
        AccessRule(program: .flatpak("org.example.App"), executable: nil, script: nil),
    ])

    static func identity(_ n: UInt8) -> FileIdentity {
        FileIdentity(device: UInt64(n), inode: 1000 + UInt64(n), size: 4096, modifiedSeconds: 1_700_000_000 + Int64(n),
                     modifiedNanoseconds: 5, sha256: [UInt8](repeating: n, count: 32))
    }

    /// The sample as the CLI takes it: text (bytes are the text's UTF-8).
    func cliText(_ a: ItemAttribute) -> String {
        a.kind == .code ? "k\(a.presenceBit)z\(a.wireTag % 10)" : "\(a.name) via -\(a.cliShort.map(String.init) ?? "") ✓"
    }

    /// Each attribute alone, then all of them together.
    func recordsUnderTest() throws -> [(String, ItemRecord)] {
        var all = AttributeValues()
        var out: [(String, ItemRecord)] = []
        for a in ItemAttribute.all {
            var one = AttributeValues()
            one[a] = try sample(a)
            all[a] = try sample(a)
            out.append((a.name, record(one)))
        }
        return out + [("all", record(all))]
    }

    func record(_ values: AttributeValues) -> ItemRecord {
        ItemRecord(key: key, attributes: ItemAttributes(values, accessible: .afterFirstUnlock,
                                                        created: Date(timeIntervalSinceReferenceDate: 1234.5678),
                                                        modified: Date(timeIntervalSinceReferenceDate: 99999.25)))
    }

    func testTheTableIsConsistent() {
        let all = ItemAttribute.all
        XCTAssertFalse(all.isEmpty)
        let shorts: [String] = all.compactMap { $0.cliShort.map(String.init) } + ["T", "A"]
        let columns: [(String, [String])] = [("name", all.map(\.name)), ("xattr name", all.map(\.xattrName)),
                                             ("CLI long flag", all.map(\.cliLong)), ("CLI short flag", shorts),
                                             ("print tag", all.map(\.printTag)), ("JSON key", all.map(\.jsonKey))]
        for (what, names) in columns {
            XCTAssertEqual(Set(names).count, names.count, "two attributes share a \(what): \(names)")
        }
        // The formats write the attributes in the table's order, which is the order of their bits.
        XCTAssertEqual(all.map(\.presenceBit), all.map(\.presenceBit).sorted())
        XCTAssertEqual(Set(all.map(\.presenceBit)).count, all.count, "two attributes share a presence bit")
        for a in all {
            XCTAssertLessThan(a.presenceBit, 16, "\(a): the widest presence mask (store format 2, backup version 2) is two bytes")
            XCTAssertNotEqual(a.presenceBit, 6, "\(a): bit 6 is the backup's extras flag")
            XCTAssertNil(WireTag(rawValue: a.wireTag), "\(a): wire tag \(a.wireTag) is \(WireTag(rawValue: a.wireTag).map { "\($0)" } ?? "")")
        }
        XCTAssertEqual(Set(all.map(\.wireTag)).count, all.count, "two attributes share a wire tag")
        // The xattrs that are not rows must not shadow one.
        for name in ["accessible", "created", "modified", "protocol", "authtype", "securitydomain"] {
            XCTAssertNil(ItemAttribute.withXattrName(name))
        }
    }

    /// Every row has its stored property in `AttributeValues`, and every property its row.
    func testEveryStoredPropertyHasItsRow() {
        let properties = Mirror(reflecting: AttributeValues()).children.compactMap(\.label)
        XCTAssertEqual(properties.sorted(), ItemAttribute.all.map(\.name).sorted())
    }

    func testEachAttributeRoundTripsThroughTheStoreEncoding() throws {
        for (name, r) in try recordsUnderTest() {
            let bytes = AttributeEncoding.encode(r)
            XCTAssertEqual(bytes.withUnsafeBytes { AttributeEncoding.decode($0) }, r, name)
            // The JSON rows of stores written before format 1.
            let json = try JSONEncoder().encode(r)
            XCTAssertEqual(json.withUnsafeBytes { AttributeEncoding.decode($0) }, r, "\(name) as JSON")
        }
    }

    func testEachAttributeRoundTripsThroughTheControlProtocol() throws {
        func split(_ frame: SecureBytes) throws -> (UInt16, SecureBytes) {
            let bytes = frame.unprotectedArray
            let header = try ControlFrame.Header(parsing: Array(bytes[0..<ControlFrame.headerSize]))
            return (header.kind, SecureBytes(copying: bytes[ControlFrame.headerSize...]))
        }
        for (name, r) in try recordsUnderTest() {
            let (kind, payload) = try split(ControlRequest.save(key: key, secret: SecureBytes(), extras: nil,
                                                                changes: AttributeChanges(r.attributes.values),
                                                                updateExisting: false).frame())
            guard case .save(_, _, _, let changes, _) = try ControlRequest(kind: kind, payload: payload) else {
                return XCTFail("not a save")
            }
            XCTAssertEqual(changes.values, r.attributes.values, "\(name) in a save's changes")

            var query = ItemQuery(kind: .generic)
            query.attributes = r.attributes.values
            let (qKind, qPayload) = try split(ControlRequest.find(query: query, withSecrets: false, limit: nil).frame())
            guard case .find(let got, _, _) = try ControlRequest(kind: qKind, payload: qPayload) else {
                return XCTFail("not a find")
            }
            XCTAssertEqual(got, query, "\(name) as a find's filter")

            let (rKind, rPayload) = try split(ControlReply.saved(r).frame())
            guard case .saved(let back) = try ControlReply(kind: rKind, payload: rPayload) else { return XCTFail("not saved") }
            XCTAssertEqual(back, r, "\(name) in a reply's record")
        }
    }

    func testEachAttributeRoundTripsThroughABackup() throws {
        var payload = BackupPayload()
        let records = try recordsUnderTest()
        for (_, r) in records { payload.append(r, secret: SecureBytes(copying: Array("pw".utf8))) }
        let batch = try BackupPayload.decode(payload.buffer)
        XCTAssertEqual(batch.entries.count, records.count)
        for ((name, r), entry) in zip(records, batch.entries) {
            XCTAssertEqual(entry.record.attributes.values, r.attributes.values, name)
        }
    }

    func testEachAttributeIsAnXattrOfAMountedItem() throws {
        let dir = NSTemporaryDirectory() + "kcfs-attrtable-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let keychain = try Keychain.create(at: dir + "/k.db", passphrase: SecureBytes(copying: Array("pw".utf8)),
                                           scrypt: ScryptParameters(logN: 10), deviceKeyPath: dir + "/device.key")
        try keychain.add(record(AttributeValues()), secret: SecureBytes(copying: Array("s".utf8)))
        let tree = try KeychainTree(keychain: keychain)
        let path = "/svc/acct"
        for a in ItemAttribute.all where a.kind != .programs {
            let xattr = "user.keychain.\(a.xattrName)"
            XCTAssertFalse(try tree.listAttributes(path).contains(xattr), "\(a) is listed while unset")
            try tree.setAttribute(path, name: xattr, value: try sample(a).bytes)
            XCTAssertEqual(try tree.attribute(path, name: xattr), try sample(a).bytes, "\(a) read back")
            XCTAssertTrue(try tree.listAttributes(path).contains(xattr), "\(a) is listed once set")
            // Committed to the store, not only kept by the tree.
            XCTAssertEqual(try keychain.item(for: key)?.record.attributes.values[a], try sample(a), "\(a) in the store")
        }
        // The access list in its text form, each program pinned by its file now.
        let access = try XCTUnwrap(ItemAttribute.all.first { $0.kind == .programs })
        let xattr = "user.keychain.\(access.xattrName)"
        let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let text = Array("/usr/bin/head\n\(me)\n".utf8)
        try tree.setAttribute(path, name: xattr, value: text)
        XCTAssertEqual(try tree.attribute(path, name: xattr), text)
        let stored = try XCTUnwrap(try keychain.item(for: key)?.record.attributes.values[access]?.asPrograms)
        XCTAssertEqual(stored.rules.map(\.program), [.executable("/usr/bin/head"), .executable(me)])
        var st = stat()
        XCTAssertEqual(stat("/usr/bin/head", &st), 0)
        XCTAssertEqual(stored.rules.first?.executable?.inode, UInt64(st.st_ino), "pinned by the file")
        // The list guards itself: a caller not identified as on it cannot change it; one on it can.
        XCTAssertThrowsError(try tree.removeAttribute(path, name: xattr)) {
            XCTAssertEqual(($0 as? FileSystemError)?.errno, EACCES)
        }
        try tree.removeAttribute(try TreeLocation.parse(path), name: xattr, caller: .process(try PinnedProcess.forProcess(getpid())))
        XCTAssertNil(try keychain.item(for: key)?.record.attributes.values[access])
        for a in ItemAttribute.all {
            try tree.removeAttribute(path, name: "user.keychain.\(a.xattrName)")
            XCTAssertNil(try keychain.item(for: key)?.record.attributes.values[a], "\(a) removed")
        }
    }

    func testEachAttributeHasItsCLIFlagsPrintedLineAndJSONKey() throws {
        XCTAssertEqual(AttributeFlags<SettingAttributes>.declared.sorted(),
                       ItemAttribute.all.filter { $0.cliShort != nil }.map(\.name).sorted(),
                       "each row with a flag needs its option property in AttributeFlags, named as the row")
        // The access list: -T (repeatable), each pinned by its file; -A, an empty list.
        let access = try XCTUnwrap(ItemAttribute.all.first { $0.kind == .programs })
        let trusted = try AttributeOptions.parse(["-T", "/usr/bin/head", "-T", "flatpak:org.example.App"]).changes()
        XCTAssertEqual(trusted.values[access]?.asPrograms?.rules.map(\.program), [.executable("/usr/bin/head"), .flatpak("org.example.App")])
        XCTAssertEqual(try AttributeOptions.parse(["-A"]).changes().values[access], .programs(.anyProgram))
        XCTAssertThrowsError(try AttributeOptions.parse(["-A", "-T", "/usr/bin/head"]).changes())
        XCTAssertThrowsError(try AttributeOptions.parse(["-T", "relative/head"]).changes())
        for a in ItemAttribute.all where a.cliShort != nil {
            let text = cliText(a)
            let expected = try a.value(parsing: text)
            for flag in ["-\(a.cliShort.map(String.init) ?? "")", "--\(a.cliLong)"] {
                let set = try AttributeOptions.parse([flag, text]).changes()
                XCTAssertEqual(set.values[a], expected, "\(flag) sets \(a)")
                XCTAssertEqual(set.values, AttributeValues { $0[a] = expected }, "\(flag) sets only \(a)")
                let query = try AttributeFilterOptions.parse([flag, text]).apply(to: ItemQuery(kind: .generic))
                XCTAssertEqual(query.attributes, AttributeValues { $0[a] = expected }, "\(flag) filters on \(a)")
            }
        }
        for (name, r) in try recordsUnderTest() {
            let lines = ItemPrinter.lines(for: r, itemID: 1, storePath: "/k.db")
            let item = FoundItem(itemID: 1, record: r, secret: nil, extras: nil)
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            let json = try XCTUnwrap(JSONSerialization.jsonObject(with: encoder.encode(DumpedItem(item, splice: SecretSplice()))) as? [String: Any])
            for a in ItemAttribute.all {
                let value = r.attributes.values[a]
                XCTAssertEqual(lines.contains { $0.hasPrefix("\(a.printTag): ") }, value != nil, "\(name): \(a) printed")
                switch value {
                case .text(let s)?: XCTAssertEqual(json[a.jsonKey] as? String, s, name)
                case .bytes(let d)?: XCTAssertEqual(json[a.jsonKey] as? String, d.base64EncodedString(), name)
                case .code(let c)?: XCTAssertEqual(json[a.jsonKey] as? String, c.text, name)
                case .programs(let list)?: XCTAssertEqual(json[a.jsonKey] as? [String], list.rules.map(\.program.description), name)
                case .flag(let b)?: XCTAssertEqual(json[a.jsonKey] as? Bool, b, name)
                case nil: XCTAssertNil(json[a.jsonKey], "\(name): \(a) in the JSON while unset")
                }
            }
            XCTAssertEqual(json["accessible"] as? String, "after-first-unlock", "the other keys stay beside the attributes")
            XCTAssertEqual(json["service"] as? String, "svc")
        }
    }

    /// The bytes the formats had before the table, written out here by hand, field by field:
    /// old stores, backups and daemons read what the table writes, and the other way round.
    func testTheTableWritesTheBytesOfTheFormatsBeforeIt() throws {
        var values = AttributeValues()
        values.label = "Label ✓"; values.comment = ""; values.description = "kind"
        values.generic = Data([0, 1, 255]); values.creator = try FourCharCode("crea"); values.type = try FourCharCode("ty e")
        let texts = [Array("Label ✓".utf8), [], Array("kind".utf8)]
        let generic: [UInt8] = [0, 1, 255], codes = [Array("crea".utf8), Array("ty e".utf8)]
        func be32(_ n: Int) -> [UInt8] { [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)] }

        // The store's format 1: the mask's bits 0-5, then LEB128-prefixed text and bytes, and bare codes.
        let storeEmpty = AttributeEncoding.encode(record(AttributeValues()))
        let storeFields = texts.flatMap { [UInt8($0.count)] + $0 } + [UInt8(generic.count)] + generic + codes.joined()
        XCTAssertEqual(AttributeEncoding.encode(record(values)), storeEmpty.dropLast() + [0x3f] + storeFields)

        // A backup item: the present byte after the key, then UInt32-prefixed text and bytes, and bare codes.
        var emptyPayload = BackupPayload(), fullPayload = BackupPayload()
        emptyPayload.append(record(AttributeValues()), secret: SecureBytes(copying: Array("pw".utf8)))
        fullPayload.append(record(values), secret: SecureBytes(copying: Array("pw".utf8)))
        let empty = emptyPayload.buffer.unprotectedArray
        let presentAt = 8 + 1 + 1 + 4 + (4 + 3) + (4 + 4)  // count, kind, class, group, "svc", "acct"
        XCTAssertEqual(Array(empty[presentAt..<presentAt + 2]), [0, 0], "version 2: a two-byte mask")
        let backupFields = texts.flatMap { be32($0.count) + $0 } + be32(generic.count) + generic + codes.joined()
        XCTAssertEqual(fullPayload.buffer.unprotectedArray,
                       Array(empty[..<presentAt]) + [0, 0x3f] + backupFields + Array(empty[(presentAt + 2)...]))
        // Version 1 had a one-byte mask: its items still decode.
        let v1 = Array(fullPayload.buffer.unprotectedArray[..<presentAt]) + Array(fullPayload.buffer.unprotectedArray[(presentAt + 1)...])
        let old = try BackupPayload.decode(SecureBytes(copying: v1), formatVersion: 1)
        XCTAssertEqual(old.entries.first?.record.attributes.values, values)

        // The control protocol: tags 30 to 35, each `tag u16 | length u32 | value`.
        let w = WireWriter()
        WireItem.write(values, to: w)
        let wireValues = texts + [generic] + codes
        let wireFields = zip(30..., wireValues).flatMap { tag, v in [UInt8(0), UInt8(tag)] + be32(v.count) + v }
        XCTAssertEqual(Array(w.buffer.unprotectedArray[..<w.count]), wireFields)
    }
}

/// The synchronizable row (issue 20): a this-device-only item can never be synchronizable,
/// whichever way it is asked, and the refusal changes nothing.
final class SynchronizableAttributeTests: XCTestCase {
    func testFormat2IsWrittenOnlyForTheWideBitAndReadBack() throws {
        let key = ItemKey.generic(try GenericPasswordKey(service: "svc", account: "acct"))
        var r = ItemRecord(key: key, attributes: ItemAttributes(accessible: .afterFirstUnlock))
        XCTAssertEqual(AttributeEncoding.encode(r).first, 1, "no wide bit: format 1, which older versions read")
        for b in [true, false] {
            r.attributes.values.synchronizable = b
            let bytes = AttributeEncoding.encode(r)
            XCTAssertEqual(bytes.first, 2)
            XCTAssertEqual(bytes.withUnsafeBytes { AttributeEncoding.decode($0) }, r)
        }
        // A flag byte other than 0 or 1, or a mask bit no attribute has, is damage.
        var bad = AttributeEncoding.encode(r)
        bad[bad.count - 1] = 2
        XCTAssertNil(bad.withUnsafeBytes { AttributeEncoding.decode($0) })
    }

    func testTheXattrAndCLITakeYesOrNoOnly() throws {
        let a = try XCTUnwrap(ItemAttribute.named("synchronizable"))
        XCTAssertEqual(try a.value(from: Array("yes".utf8)), .flag(true))
        XCTAssertEqual(try a.value(from: Array("no".utf8)), .flag(false))
        for bad in ["Yes", "true", "1", "", "yes\n"] { XCTAssertThrowsError(try a.value(from: Array(bad.utf8)), bad) }
        XCTAssertEqual(try AttributeOptions.parse(["--synchronizable"]).changes().values.synchronizable, true)
        XCTAssertEqual(try AttributeOptions.parse(["--no-synchronizable"]).changes().values.synchronizable, false)
        XCTAssertNil(try AttributeOptions.parse([]).changes().values.synchronizable)
    }

    func testAThisDeviceOnlyItemIsNeverSynchronizable() throws {
        let dir = NSTemporaryDirectory() + "kcfs-sync-attr-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let keychain = try Keychain.create(at: dir + "/k.db", passphrase: SecureBytes(copying: Array("pw".utf8)),
                                           scrypt: ScryptParameters(logN: 10), deviceKeyPath: dir + "/device.key")
        let key = ItemKey.generic(try GenericPasswordKey(service: "svc", account: "acct"))
        func refused(_ body: () throws -> Void) {
            XCTAssertThrowsError(try body()) { e in
                XCTAssertEqual((e as? KeychainError)?.exitCode, 78, "\(e)")
                if case .notSynchronizable? = e as? KeychainError {} else { XCTFail("\(e)") }
            }
        }
        var changes = AttributeChanges(AttributeValues { $0.synchronizable = true }, accessible: .whenUnlockedThisDeviceOnly)
        refused { _ = try keychain.save(key, secret: SecureBytes(copying: [1]), changes: changes, updateExisting: false) }
        XCTAssertNil(try keychain.item(for: key), "nothing was added")
        // The default never makes a this-device-only add fail, and does apply to the others.
        changes = AttributeChanges(AttributeValues(), accessible: .whenUnlockedThisDeviceOnly)
        let local = try keychain.save(key, secret: SecureBytes(copying: [1]), changes: changes, defaultSynchronizable: true, updateExisting: false)
        XCTAssertNil(local.record.attributes.values.synchronizable)
        let otherKey = ItemKey.generic(try GenericPasswordKey(service: "svc", account: "other"))
        let other = try keychain.save(otherKey, secret: SecureBytes(copying: [2]), defaultSynchronizable: true, updateExisting: false)
        XCTAssertEqual(other.record.attributes.values.synchronizable, true)
        // Setting it on the this-device-only item, or the class on the synchronizable one: refused, unchanged.
        var r = local.record
        r.attributes.values.synchronizable = true
        refused { _ = try keychain.update(local, to: r) }
        var o = other.record
        o.attributes.accessible = .alwaysThisDeviceOnly
        refused { _ = try keychain.update(other, to: o) }
        XCTAssertEqual(try keychain.item(for: otherKey)?.record.attributes.accessible, .whenUnlocked)
        XCTAssertEqual(try keychain.item(for: otherKey)?.sealed.version, other.sealed.version)
        XCTAssertNil(try keychain.item(for: key)?.record.attributes.values.synchronizable)
        // Through the mounted tree's xattrs: EPERM, nothing changed.
        let tree = try KeychainTree(keychain: keychain)
        XCTAssertThrowsError(try tree.setAttribute("/svc/acct", name: "user.keychain.synchronizable", value: Array("yes".utf8))) {
            XCTAssertEqual(($0 as? FileSystemError)?.errno, EPERM)
        }
        XCTAssertThrowsError(try tree.setAttribute("/svc/other", name: "user.keychain.accessible",
                                                   value: Array("always-this-device-only".utf8))) {
            XCTAssertEqual(($0 as? FileSystemError)?.errno, EPERM)
        }
        XCTAssertEqual(try tree.attribute("/svc/other", name: "user.keychain.accessible"), Array("when-unlocked".utf8))
        // Setting no, then the class, is allowed.
        try tree.setAttribute("/svc/other", name: "user.keychain.synchronizable", value: Array("no".utf8))
        try tree.setAttribute("/svc/other", name: "user.keychain.accessible", value: Array("always-this-device-only".utf8))
    }
}

/// `dump-keychain --json`'s secrets are spliced into the encoder's text in locked memory.
final class DumpSecretSpliceTests: XCTestCase {
    func testBase64IsFoundations() {
        for length in 0...40 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255) }
            let out = SecureBytes()
            bytes.withUnsafeBytes { Base64.append($0, to: out) }
            XCTAssertEqual(String(decoding: out.unprotectedArray, as: UTF8.self), Data(bytes).base64EncodedString(), "\(length) bytes")
        }
    }

    func testEachPlaceholderBecomesItsSecret() throws {
        let splice = SecretSplice()
        let a = SecureBytes(copying: Array("first".utf8)), b = SecureBytes(copying: [0, 0xff, 0x10])
        let text = "{\"a\":\"\(splice.placeholder(for: a))\",\"b\":\"\(splice.placeholder(for: b))\",\"c\":\"secret-1-0.\"}"
        let out = String(decoding: splice.splice(Data(text.utf8)).unprotectedArray, as: UTF8.self)
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: String])
        XCTAssertEqual(json, ["a": Data("first".utf8).base64EncodedString(), "b": Data([0, 0xff, 0x10]).base64EncodedString(),
                              "c": "secret-1-0."], "another run's placeholder, or text like one, stays as it is")
    }

    /// Text with this run's nonce that is no placeholder of it stays as it is: no number, a
    /// number past the secrets or too long to be one, no closing dot.
    func testOnlyWholePlaceholdersAreReplaced() throws {
        let splice = SecretSplice()
        let p = splice.placeholder(for: SecureBytes(copying: Array("s".utf8)))
        let nonce = String(p.dropLast(2))  // "<nonce>-"
        for text in [nonce + ".", nonce + "1.", nonce + "0", nonce + "99999999999999999999.", nonce + "x."] {
            let out = String(decoding: splice.splice(Data(text.utf8)).unprotectedArray, as: UTF8.self)
            XCTAssertEqual(out, text)
        }
        XCTAssertEqual(String(decoding: splice.splice(Data(("[" + p + "]").utf8)).unprotectedArray, as: UTF8.self), "[cw==]")
    }
}
