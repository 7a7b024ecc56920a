import Foundation
import KeychainAccess
import KeychainModel
import KeychainStore

/// The `user.keychain.*` extended attributes of items and of the mount root.
extension KeychainTree {
    static let prefix = "user.keychain."
    /// The settable attributes come from `ItemAttribute.all`. The class and the dates are not
    /// in that table: the class is not optional and picks the key that seals the item, and the
    /// dates are the store's. The internet names are parts of the key: setting one renames the item.
    static let itemNames = ItemAttribute.all.map(\.xattrName) + ["accessible", "created", "modified"]
    static let internetNames = ["protocol", "authtype", "securitydomain"]
    static let rootNames = ["state", "lock-after", "items"]
    static let readOnly: Set<String> = ["created", "modified"]

    /// Whether `name` (a C string from the kernel) is one of ours. Every `ls -l` asks each
    /// file for `security.selinux` and `system.posix_acl_access`: those are answered "no such
    /// attribute" from the name alone, with no string made and no lookup of the file.
    package static func isKeychainAttribute(_ name: UnsafePointer<CChar>) -> Bool {
        prefixBytes.withUnsafeBufferPointer { p in strncmp(name, p.baseAddress!, p.count) == 0 }
    }

    private static let prefixBytes = Array(prefix.utf8CString.dropLast())

    /// On bytes, as `isKeychainAttribute`: a `.` followed by a combining mark is one character with it.
    private static func isOurs(_ name: String) -> Bool { name.utf8.starts(with: prefix.utf8) }

    private func attributeName(_ name: String) throws(FileSystemError) -> String {
        guard Self.isOurs(name) else { throw .noData }
        return String(name.utf8.dropFirst(Self.prefix.utf8.count))!
    }

    package func listAttributes(_ path: String) throws(FileSystemError) -> [String] {
        try listAttributes(try TreeLocation.parse(path))
    }

    package func listAttributes(_ location: TreeLocation) throws(FileSystemError) -> [String] {
        let (_, node) = try resolve(location)
        switch node {
        case .root: return Self.rootNames.map { Self.prefix + $0 }
        case .item(let item):
            var names = Self.itemNames + (item.key.kind == .internet ? Self.internetNames : [])
            names.removeAll { (try? value(of: $0, item)) == nil }
            return names.map { Self.prefix + $0 }
        case .service(let name), .server(let name):
            let directory = Self.directoryName(node, name)
            return ((try? served.directoryAccess(directory)) ?? nil) == nil ? [] : [Self.prefix + Self.accessName]
        default: return []
        }
    }

    /// A service or server directory, whose `user.keychain.access` is the default list of new
    /// items below it.
    private static func directoryName(_ node: Node, _ name: String) -> ServedKeychain.DirectoryName {
        if case .server = node { return .init(kind: .internet, name: name) }
        return .init(kind: .generic, name: name)
    }

    /// The directory at `location`, if it is a service or server directory.
    private func directory(at location: TreeLocation) throws(FileSystemError) -> ServedKeychain.DirectoryName? {
        switch location {
        case .service, .server:
            let (_, node) = try resolve(location)
            switch node {
            case .service(let name), .server(let name): return Self.directoryName(node, name)
            default: return nil
            }
        default: return nil
        }
    }

    /// Sets or removes a directory's default list. Changing a default that is set is guarded
    /// by that list, as an item's list is by itself: otherwise any program could name itself
    /// the default and so be handed the next secret saved there.
    private func setDirectoryAccess(_ directory: ServedKeychain.DirectoryName, value: [UInt8]?,
                                    caller: AccessCaller) throws(FileSystemError) {
        let current: AccessList?
        do { current = try served.directoryAccess(directory) } catch { throw .from(error) }
        if value == nil && current == nil { throw .noData }
        if let current, !current.isAnyProgram {
            let target: AccessItem
            do {
                target = AccessItem(id: "directory:" + directory.treePath, path: directory.treePath + "/",
                                    key: .generic(try GenericPasswordKey(service: directory.name, account: "")))
            } catch { throw .from(error) }
            served.willWait()
            switch served.access.decide(caller, item: target, operation: .write, list: current) {
            case .allowed, .allowedAlways: break
            case .refused(let why): throw .from(KeychainError.accessDenied(why))
            }
        }
        var list: AccessList?
        if let value {
            // Pinned outside every lock: it reads and hashes the programs' files.
            list = try accessList(from: value, replacing: current)
        }
        do { try served.setDirectoryAccess(list, for: directory) } catch { throw .from(error) }
    }

    package func attribute(_ path: String, name: String) throws(FileSystemError) -> [UInt8] {
        try attribute(try TreeLocation.parse(path), name: name)
    }

    package func attribute(_ location: TreeLocation, name: String) throws(FileSystemError) -> [UInt8] {
        let short = try attributeName(name)
        let (_, node) = try resolve(location)
        switch node {
        case .root:
            switch short {
            case "state": return Array(served.lockState.rawValue.utf8)
            case "lock-after": return Array((lockAfter.map(String.init) ?? "off").utf8)
            case "items":
                // A count of the store's rows: at a million, long enough to let others go on.
                served.willWait()
                do { return Array(String(try served.readableItemCount()).utf8) } catch { throw .from(error) }
            default: throw .noData
            }
        case .item(let item):
            guard let v = try value(of: short, item) else { throw .noData }
            return v
        case .service(let name), .server(let name):
            guard short == Self.accessName else { throw .noData }
            let list: AccessList?
            do { list = try served.directoryAccess(Self.directoryName(node, name)) } catch { throw .from(error) }
            guard let list else { throw .noData }
            return Array(list.text.utf8)
        default: throw .noData
        }
    }

    private func value(of name: String, _ item: KeychainItem) throws(FileSystemError) -> [UInt8]? {
        let a = item.record.attributes
        if let attribute = ItemAttribute.withXattrName(name) {
            // The access list reads as its text form, one program a line, as it is set.
            if case .programs(let list)? = a.values[attribute] { return Array(list.text.utf8) }
            return a.values[attribute]?.bytes
        }
        func text(_ s: String?) -> [UInt8]? { s.map { Array($0.utf8) } }
        let iso = ISO8601DateFormatter()
        switch (name, item.key) {
        case ("accessible", _): return text(a.accessible.rawValue)
        case ("created", _): return text(iso.string(from: a.created))
        case ("modified", _): return text(iso.string(from: a.modified))
        case ("protocol", .internet(let k)): return text(k.protocol.name)
        case ("authtype", .internet(let k)): return text(k.authenticationType.name)
        case ("securitydomain", .internet(let k)): return text(k.securityDomain)
        default: return nil
        }
    }

    /// Sets an attribute by re-sealing the item. Changing `accessible` moves it to the new
    /// class; changing protocol, authtype or domain renames it (EEXIST if that name is taken).
    package func setAttribute(_ path: String, name: String, value: [UInt8]) throws(FileSystemError) {
        try setAttribute(try TreeLocation.parse(path), name: name, value: value)
    }

    static let untoldCaller = AccessCaller.unidentified("a caller the tree was not told")
    static let accessName = "access"

    /// What setting or removing an attribute does to a guarded item: every change is guarded
    /// by the item's list (a label or class is the item's too, and a program not on the list
    /// must not re-seal it under a weaker class or relabel it to mislead); the list itself is
    /// a write, and the internet names rename the item. Nil for names no item has.
    private static func guardedOperation(_ short: String) -> AccessOperation? {
        if short == accessName { return .write }
        if internetNames.contains(short) { return .rename }
        return itemNames.contains(short) && !readOnly.contains(short) ? .attributes : nil
    }

    /// The new access list from the xattr's text (one program a line; empty is any program),
    /// each new program pinned by its file now, those already listed as they were allowed.
    /// Pinning reads and hashes files, for up to 3 s each (`FileIdentity.of(path:)`): the FUSE
    /// lead is passed on first, so that other requests go on meanwhile.
    private func accessList(from value: [UInt8], replacing current: AccessList?) throws(FileSystemError) -> AccessList {
        guard let text = String(validating: value, as: UTF8.self) else { throw .invalid }
        served.willWait()
        do throws(KeychainError) {
            return try (current ?? .anyProgram).setting(try AccessList.programs(parsing: text))
        } catch {
            throw .from(error)
        }
    }

    package func setAttribute(_ location: TreeLocation, name: String, value: [UInt8],
                              caller: AccessCaller = untoldCaller) throws(FileSystemError) {
        // Other namespaces (ACLs, security labels) are not supported, so cp -p and install
        // fall back to plain chmod.
        guard Self.isOurs(name) else { throw FileSystemError(EOPNOTSUPP) }
        if case .root = location, try attributeName(name) == "lock-after" {
            setLockAfter(try Self.parseLockAfter(value))
            return
        }
        let short = try attributeName(name)
        if let directory = try directory(at: location) {
            // Other names on a directory: ENODATA, as before directories had one.
            guard short == Self.accessName else { throw .noData }
            try setDirectoryAccess(directory, value: value, caller: caller)
            return
        }
        let decided = try Self.guardedOperation(short).flatMap { op throws(FileSystemError) in try authorizeItem(at: location, caller, op) }
        var newList: AccessList?
        if short == Self.accessName {
            // Pinned outside every lock: it reads and hashes the programs' files.
            let current = decided ?? (try? served.covering(location) { s throws(FileSystemError) -> KeychainItem? in
                guard case .item(let item) = try node(location, s.index) else { return nil }
                return item
            }) ?? nil
            newList = try accessList(from: value, replacing: current?.record.attributes.values.access)
        }
        try change(location, name: name, decided: Self.guardedOperation(short) != nil ? [decided] : nil) { record throws(FileSystemError) in
            if short == Self.accessName, let attribute = ItemAttribute.withXattrName(short) {
                // Kept as it was pinned above, but for rules the item held: those keep their identity.
                let kept = newList?.keepingPins(of: record.attributes.values.access)
                // An empty list is any program: the attribute goes, as `setfattr -x` does.
                record.attributes.values[attribute] = kept.flatMap { $0.isAnyProgram ? nil : .programs($0) }
                return
            }
            if let attribute = ItemAttribute.withXattrName(short) {
                do { record.attributes.values[attribute] = try attribute.value(from: value) } catch {
                    throw .from(error)
                }
                return
            }
            // Every other attribute is text.
            guard let text = String(validating: value, as: UTF8.self) else { throw .invalid }
            do {
                switch (short, record.key) {
                case ("accessible", _): record.attributes.accessible = try AccessibilityClass(parsing: text)
                case ("protocol", .internet(var k)):
                    k.protocol = try InternetProtocol(parsing: text)
                    record.key = .internet(try Self.revalidated(k))
                case ("authtype", .internet(var k)):
                    k.authenticationType = try AuthenticationType(parsing: text)
                    record.key = .internet(try Self.revalidated(k))
                case ("securitydomain", .internet(var k)):
                    k.securityDomain = text
                    record.key = .internet(try Self.revalidated(k))
                default: throw FileSystemError.notPermitted
                }
            } catch let e as ModelError { throw FileSystemError(e) } catch { throw .from(error) }
        }
    }

    /// `off` (what it reads while unset) or a positive number of seconds.
    static func parseLockAfter(_ value: [UInt8]) throws(FileSystemError) -> Int? {
        guard let text = String(validating: value, as: UTF8.self) else { throw .invalid }
        if text == "off" { return nil }
        guard !text.isEmpty, text.utf8.count <= 9, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
              let n = Int(text), n > 0 else { throw .invalid }
        return n
    }

    package func removeAttribute(_ path: String, name: String) throws(FileSystemError) {
        try removeAttribute(try TreeLocation.parse(path), name: name)
    }

    package func removeAttribute(_ location: TreeLocation, name: String,
                                 caller: AccessCaller = untoldCaller) throws(FileSystemError) {
        let short = try attributeName(name)
        if let directory = try directory(at: location) {
            guard short == Self.accessName else { throw .noData }
            try setDirectoryAccess(directory, value: nil, caller: caller)
            return
        }
        let decided = try Self.guardedOperation(short).flatMap { op throws(FileSystemError) in
            try authorizeItem(at: location, caller, op)
        }
        try change(location, name: name, decided: Self.guardedOperation(short) != nil ? [decided] : nil) { record throws(FileSystemError) in
            if let attribute = ItemAttribute.withXattrName(short) {
                record.attributes.values[attribute] = nil
                return
            }
            switch short {
            case "securitydomain":
                guard case .internet(var k) = record.key else { throw .noData }
                k.securityDomain = ""
                do { record.key = .internet(try Self.revalidated(k)) } catch { throw FileSystemError.from(error) }
            default: throw .notPermitted
            }
        }
    }

    private static func revalidated(_ k: InternetPasswordKey) throws(ModelError) -> InternetPasswordKey {
        try InternetPasswordKey(server: k.server, port: k.port, path: k.path, protocol: k.protocol,
                                authenticationType: k.authenticationType, securityDomain: k.securityDomain,
                                account: k.account, accessGroup: k.accessGroup)
    }

    /// `decided`: when the change is guarded by the item's list, the item as it was decided on.
    private func change(_ location: TreeLocation, name: String, decided: [KeychainItem?]?,
                        _ edit: (inout ItemRecord) throws(FileSystemError) -> Void) throws(FileSystemError) {
        let short = try attributeName(name)
        try served.change(origin: .tree) { c throws(FileSystemError) -> Void in
            let item = try c.covering(location) { s throws(FileSystemError) -> KeychainItem in
                guard case .item(let item) = try node(location, s.index) else {
                    throw Self.rootNames.contains(short) ? .notPermitted : .noData
                }
                return item
            }
            guard Self.itemNames.contains(short) || (item.key.kind == .internet && Self.internetNames.contains(short))
            else { throw .noData }
            // ENOTSUP rather than EPERM: cp -a and mv, copying attributes, pass over it quietly.
            guard !Self.readOnly.contains(short) else { throw FileSystemError(EOPNOTSUPP) }
            if let decided { try Self.checkDecided(item, decided) }
            var record = item.record
            try edit(&record)
            // Both the old and the new class key are needed: the secret is re-sealed.
            guard served.isAvailable(record.attributes.accessible) else { throw .keyUnavailable }
            if record.key != item.key {
                // Taken in the store, or by a pending item, which only the index knows.
                let taken: Bool
                do { taken = try c.isTaken(record.key) } catch { throw .from(error) }
                if taken { throw .exists }
            }
            if item.isPending {
                // Kept with the pending item, and stored with it in its one commit.
                served.state.withLock { $0.changedPending(KeychainItem(pending: record, id: item.id)) }
                return
            }
            do { _ = try c.setAttributes(item, to: record) } catch { throw .from(error) }
        }
    }
}
