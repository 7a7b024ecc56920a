import Foundation
import KeychainAccess
import KeychainCrypto
import KeychainFileSystem
import KeychainModel
import KeychainStore
import SDBus

// The five interfaces of the specification, each over the one `SecretService`. Called on the
// bus's thread only.

/// A Secret struct `(oayays)`: session, parameters, value, content type.
extension BusMessage {
    func appendSecret(session: String, transfer: SecretTransfer, secret: SecureBytes, contentType: String) throws {
        let (parameters, value) = try transfer.encode(secret)
        try open("r", "oayays")
        try append(objectPath: session)
        try append(bytes: parameters)
        try append(secret: value)
        try append(contentType)
        try close()
    }

    func readSecretStruct() throws -> (session: String, parameters: [UInt8], value: SecureBytes, contentType: String) {
        guard try enter("r", "oayays") else { throw BusError.invalidArgs("missing the secret (oayays)") }
        let session = try readObjectPath()
        let parameters = try readBytes(limit: 256)
        // A whole secret plus a block of padding.
        let value = try readSecret(limit: maxSecretBytes + 16)
        let contentType = try readString()
        try exit()
        return (session, parameters, value, contentType)
    }

    /// An `a{sv}` of properties, the ones named kept: strings and attribute maps.
    func readProperties(limits: SecretService.Limits) throws -> (label: String?, attributes: [String: String]?) {
        guard try enter("a", "{sv}") else { throw BusError.invalidArgs("missing the properties a{sv}") }
        var label: String?, attributes: [String: String]?
        var n = 0
        while try enter("e", "sv") {
            n += 1
            guard n <= limits.attributes + 8 else { throw BusError.limitsExceeded("too many properties") }
            let name = try readString()
            let contents = try enterVariant()
            switch (name, contents) {
            case ("org.freedesktop.Secret.Item.Label", "s"), ("org.freedesktop.Secret.Collection.Label", "s"):
                label = try readString()
            case ("org.freedesktop.Secret.Item.Attributes", "a{ss}"):
                attributes = try readDictionary(limit: limits.attributes, byteLimit: limits.attributeBytes)
            case ("org.freedesktop.Secret.Item.Label", _), ("org.freedesktop.Secret.Item.Attributes", _):
                throw BusError.invalidArgs("\(name) must be of type \(name.hasSuffix("Label") ? "s" : "a{ss}"), not \(contents)")
            default:
                try skipOne()
            }
            try exit()
            try exit()
        }
        try exit()
        return (label, attributes)
    }
}

final class ServiceInterface: BusInterface {
    static let interface = "org.freedesktop.Secret.Service"
    let name = ServiceInterface.interface
    unowned let service: SecretService
    init(_ service: SecretService) { self.service = service }

    let members: [BusMember] = [
        .method("OpenSession", "sv", "vo", ["algorithm", "input", "output", "result"]),
        .method("CreateCollection", "a{sv}s", "oo", ["properties", "alias", "collection", "prompt"]),
        .method("SearchItems", "a{ss}", "aoao", ["attributes", "unlocked", "locked"]),
        .method("Unlock", "ao", "aoo", ["objects", "unlocked", "prompt"]),
        .method("Lock", "ao", "aoo", ["objects", "locked", "prompt"]),
        .method("GetSecrets", "aoo", "a{o(oayays)}", ["items", "session", "secrets"]),
        .method("ReadAlias", "s", "o", ["name", "collection"]),
        .method("SetAlias", "so", "", ["name", "collection"]),
        .property("Collections", "ao"),
        .signal("CollectionCreated", "o", ["collection"]),
        .signal("CollectionDeleted", "o", ["collection"]),
        .signal("CollectionChanged", "o", ["collection"]),
    ]

    func call(_ member: String, path: String, message m: BusMessage, reply r: BusMessage) throws {
        let s = service
        switch member {
        case "OpenSession":
            let algorithm = try m.readString()
            let contents = try m.enterVariant()
            let client = m.sender ?? ""
            switch algorithm {
            case SecretTransfer.plainName:
                try m.skipOne()
                try m.exit()
                let session = try s.openSession(client: client, transfer: .plain)
                try r.open("v", "s")
                try r.append("")
                try r.close()
                try r.append(objectPath: session)
            case SecretTransfer.dhName:
                guard contents == "ay" else { throw BusError.invalidArgs("\(algorithm) takes the client's package key as ay") }
                let clientPublic = try m.readBytes(limit: 1024)
                try m.exit()
                let (serverPublic, transfer) = try SecretTransfer.negotiate(clientPublic: clientPublic)
                let session = try s.openSession(client: client, transfer: transfer)
                try r.open("v", "ay")
                try r.append(bytes: serverPublic)
                try r.close()
                try r.append(objectPath: session)
            default:
                throw BusError.notSupported("algorithm '\(algorithm)'; this service offers plain and \(SecretTransfer.dhName)")
            }
        case "CreateCollection":
            let (label, _) = try m.readProperties(limits: s.limits)
            let alias = try m.readString()
            guard alias.utf8.count <= 255 else { throw BusError.invalidArgs("an alias is at most 255 bytes") }
            // The specification: a collection that has the alias already is returned as it is.
            if !alias.isEmpty, let existing = s.registry.aliases[alias.exact] {
                try r.append(objectPath: SecretService.collectionPath(existing))
                try r.append(objectPath: "/")
                return
            }
            var registry = s.registry
            guard registry.collections.count < 256 else { throw BusError.limitsExceeded("too many collections") }
            let now = UInt64(max(0, Date().timeIntervalSince1970))
            let id = registry.newID(for: label ?? "")
            registry.collections.append(.init(id: id, label: label ?? "", created: now, modified: now))
            if !alias.isEmpty { registry.aliases[alias.exact] = id }
            try s.save(registry)
            s.emitService("CollectionCreated", id)
            try r.append(objectPath: SecretService.collectionPath(id))
            try r.append(objectPath: "/")
        case "SearchItems":
            let query = try m.readDictionary(limit: s.limits.attributes, byteLimit: s.limits.attributeBytes)
            let found = try s.search(query)
            try r.append(objectPaths: found.filter { !s.isLocked($0) }.map(\.path))
            try r.append(objectPaths: found.filter { s.isLocked($0) }.map(\.path))
        case "Unlock":
            let objects = try m.readObjectPaths(limit: s.limits.objectsPerCall)
            let (unlocked, prompt) = try s.unlock(objects, client: m.sender ?? "", caller: m.senderPID())
            try r.append(objectPaths: unlocked)
            try r.append(objectPath: prompt)
        case "Lock":
            let objects = try m.readObjectPaths(limit: s.limits.objectsPerCall)
            try r.append(objectPaths: s.lock(objects))
            try r.append(objectPath: "/")
        case "GetSecrets":
            let paths = try m.readObjectPaths(limit: s.limits.objectsPerCall)
            let session = try m.readObjectPath()
            let transfer = try s.session(session, client: m.sender).transfer
            let items = try paths.compactMap { p in try s.object(p).item.map { (path: p, item: $0) } }
            // Locked items are left out, as the specification says; so are items whose
            // access list does not name the caller and that the user did not allow when asked
            // (per-program access: `whenDecided`).
            try s.whenDecided(m, reply: r, items.map(\.item).filter { !s.isLocked($0) }, .read) { r, refusal in
                try r.open("a", "{o(oayays)}")
                for (path, item) in items {
                    guard !s.isLocked(item), refusal(item) == nil, let secret = try? s.owner.secret(of: item) else { continue }
                    try r.open("e", "o(oayays)")
                    try r.append(objectPath: path)
                    try r.appendSecret(session: session, transfer: transfer, secret: secret, contentType: s.contentType(of: item))
                    try r.close()
                }
                try r.close()
            }
        case "ReadAlias":
            let alias = try m.readString()
            try r.append(objectPath: s.registry.aliases[alias.exact].map(SecretService.collectionPath) ?? "/")
        case "SetAlias":
            let alias = try m.readString()
            let target = try m.readObjectPath()
            guard !alias.isEmpty, alias.utf8.count <= 255 else { throw BusError.invalidArgs("an alias must be 1 to 255 bytes") }
            var registry = s.registry
            if target == "/" {
                registry.aliases[alias.exact] = nil
            } else {
                guard let collection = s.collection(at: target) else { throw SecretError.noSuchObject(target) }
                guard registry.aliases.count < 256 || registry.aliases[alias.exact] != nil else { throw BusError.limitsExceeded("too many aliases") }
                registry.aliases[alias.exact] = collection
            }
            if registry != s.registry { try s.save(registry) }
        default:
            throw BusError("org.freedesktop.DBus.Error.UnknownMethod", member)
        }
    }

    func get(_ property: String, path: String, into r: BusMessage) throws {
        guard property == "Collections" else { throw BusError("org.freedesktop.DBus.Error.UnknownProperty", property) }
        try r.append(objectPaths: service.registry.ids.map(SecretService.collectionPath))
    }
}

final class CollectionInterface: BusInterface {
    static let interface = "org.freedesktop.Secret.Collection"
    let name = CollectionInterface.interface
    unowned let service: SecretService
    init(_ service: SecretService) { self.service = service }

    let members: [BusMember] = [
        .method("Delete", "", "o", ["prompt"]),
        .method("SearchItems", "a{ss}", "ao", ["attributes", "results"]),
        .method("CreateItem", "a{sv}(oayays)b", "oo", ["properties", "secret", "replace", "item", "prompt"]),
        .signal("ItemCreated", "o", ["item"]),
        .signal("ItemDeleted", "o", ["item"]),
        .signal("ItemChanged", "o", ["item"]),
        .property("Items", "ao"),
        .property("Label", "s", writable: true),
        .property("Locked", "b"),
        .property("Created", "t"),
        .property("Modified", "t"),
    ]

    func exists(_ path: String) -> Bool { service.collection(at: path) != nil }

    func children(of path: String) -> [String] {
        guard path == SecretService.collectionPrefix else { return [] }
        let ids = service.registry.ids
        return ids.flatMap { c in
            [SecretService.collectionPath(c)] + ((try? service.owner.itemIDs(matching: [:], collection: c, others: ids)) ?? [])
                .map { SecretService.collectionPath(c) + "/" + String($0) }
        }
    }

    func call(_ member: String, path: String, message m: BusMessage, reply r: BusMessage) throws {
        let s = service
        switch member {
        case "Delete":
            guard let id = s.collection(at: path) else { throw SecretError.noSuchObject(path) }
            guard id != SecretCollections.login else {
                throw BusError.notSupported("the login collection holds the keychain's own items (the tree's and the CLI's); delete its items instead")
            }
            // Its items first, all or none, each as the gate allows (`answerLater`).
            let objects = try s.search([:], in: id)
            let items = try objects.map { o in
                guard let item = o.item, !s.isLocked(o) else { throw SecretError.isLocked("an item of the collection") }
                return item
            }
            let owner = s.owner
            try s.answerLater(m, deciding: items, .delete, { refusal in
                if let refused = items.lazy.compactMap(refusal).first { throw refused }
                if !items.isEmpty { try owner.delete(items) }
            }, reply: { r, _ in
                var registry = s.registry
                registry.collections.removeAll { $0.id == id }
                registry.aliases = registry.aliases.filter { $0.value != id }
                try s.save(registry)
                s.emitService("CollectionDeleted", id)
                try r.append(objectPath: "/")
            })
        case "SearchItems":
            guard let id = s.collection(at: path) else { throw SecretError.noSuchObject(path) }
            let query = try m.readDictionary(limit: s.limits.attributes, byteLimit: s.limits.attributeBytes)
            try r.append(objectPaths: try s.search(query, in: id).map(\.path))
        case "CreateItem":
            let (label, given) = try m.readProperties(limits: s.limits)
            let secret = try m.readSecretStruct()
            let replace = try m.readBool()
            let transfer = try s.session(secret.session, client: m.sender).transfer
            let plain = try transfer.decode(parameters: secret.parameters, value: secret.value)
            guard plain.count <= maxSecretBytes else { throw BusError.limitsExceeded("a secret over \(maxSecretBytes) bytes") }
            guard !s.keychainLocked || s.owner.isAvailable(s.owner.defaultClass) else { throw SecretError.isLocked("the collection") }
            guard let collection = s.collection(at: path) else { throw SecretError.noSuchObject(path) }
            let attributes = given ?? [:]
            let contentType = secret.contentType.isEmpty ? SecretItemMapping.defaultContentType : secret.contentType
            let first = try mapped { try SecretItemMapping.key(for: attributes) }
            let keys = [first] + (2...1000).lazy.compactMap { try? SecretItemMapping.disambiguated(first, $0) }
            // Replacing an item is writing it: decided before the change, for the item the
            // attributes name (per-program access, asked as for SetSecret: `whenDecided`).
            let replaced = replace ? try mapped({ try s.owner.items(matching: .exactly(first)).first }) : nil
            let owner = s.owner
            try s.answerLater(m, deciding: replaced.map { [$0] } ?? [], .write, { refusal in
                if let replaced, let refused = refusal(replaced) { throw refused }
                return try owner.saveFirstFree(keys, secret: plain, label: label ?? "", replaces: { existing, extras in
                    // Only the same attributes are the same item; `replace` says whether it is overwritten.
                    let old = SecretItemMapping.decode(extras: extras)
                    return replace && (old.collection ?? SecretCollections.login) == collection
                        && SecretItemMapping.attributes(of: existing.key, stored: old.attributes)
                        == SecretItemMapping.attributes(of: existing.key, stored: attributes)
                }, extras: { old in
                    SecretItemMapping.extras(attributes: attributes, contentType: contentType, collection: collection, keeping: old)
                }).0.id
            }, reply: { r, id in
                try r.append(objectPath: SecretService.collectionPath(collection) + "/" + String(id))
                try r.append(objectPath: "/")
            })
        default:
            throw BusError("org.freedesktop.DBus.Error.UnknownMethod", member)
        }
    }

    func get(_ property: String, path: String, into r: BusMessage) throws {
        let s = service
        guard let c = s.collection(at: path).flatMap(s.registry.collection) else { throw SecretError.noSuchObject(path) }
        switch property {
        case "Items": try r.append(objectPaths: try s.search([:], in: c.id).map(\.path))
        case "Label": try r.append(c.label)
        case "Locked": try r.append(s.keychainLocked)
        case "Created": try r.append(c.created)
        case "Modified": try r.append(c.modified)
        default: throw BusError("org.freedesktop.DBus.Error.UnknownProperty", property)
        }
    }

    func set(_ property: String, path: String, from value: BusMessage) throws {
        guard property == "Label" else { throw BusError("org.freedesktop.DBus.Error.PropertyReadOnly", property) }
        let label = try value.readString()
        guard let id = service.collection(at: path) else { throw SecretError.noSuchObject(path) }
        var registry = service.registry
        guard let i = registry.collections.firstIndex(where: { $0.id == id }) else { throw SecretError.noSuchObject(path) }
        registry.collections[i].label = label
        registry.collections[i].modified = UInt64(max(0, Date().timeIntervalSince1970))
        try service.save(registry)
        service.emitCollectionChanged(id)
    }
}

final class ItemInterface: BusInterface {
    static let interface = "org.freedesktop.Secret.Item"
    let name = ItemInterface.interface
    unowned let service: SecretService
    init(_ service: SecretService) { self.service = service }

    let members: [BusMember] = [
        .method("Delete", "", "o", ["Prompt"]),
        .method("GetSecret", "o", "(oayays)", ["session", "secret"]),
        .method("SetSecret", "(oayays)", "", ["secret"]),
        .property("Locked", "b"),
        .property("Attributes", "a{ss}", writable: true),
        .property("Label", "s", writable: true),
        .property("Created", "t"),
        .property("Modified", "t"),
    ]

    func exists(_ path: String) -> Bool { service.object(at: path) != nil }

    func call(_ member: String, path: String, message m: BusMessage, reply r: BusMessage) throws {
        let s = service
        let object = try s.object(path)
        let item = try s.item(at: path)
        switch member {
        // Per-program access: decided (and, when a prompt is configured, asked) before each
        // of these, the answer sent when the user has answered (`whenAllowed`).
        case "Delete":
            let owner = s.owner
            try s.answerLater(m, deciding: [item], .delete, { refusal in
                if let refused = refusal(item) { throw refused }
                try owner.delete(item)
            }, reply: { r, _ in try r.append(objectPath: "/") })
        case "GetSecret":
            let session = try m.readObjectPath()
            let transfer = try s.session(session, client: m.sender).transfer
            guard !s.isLocked(item) else { throw SecretError.isLocked("the item") }
            try s.whenAllowed(m, reply: r, item, .read) { r in
                guard !s.isLocked(item) else { throw SecretError.isLocked("the item") }
                let secret = try mapped { try s.owner.secret(of: item) }
                try r.appendSecret(session: session, transfer: transfer, secret: secret, contentType: s.contentType(of: item))
            }
        case "SetSecret":
            let given = try m.readSecretStruct()
            let transfer = try s.session(given.session, client: m.sender).transfer
            let plain = try transfer.decode(parameters: given.parameters, value: given.value)
            guard plain.count <= maxSecretBytes else { throw BusError.limitsExceeded("a secret over \(maxSecretBytes) bytes") }
            guard !s.isLocked(item) else { throw SecretError.isLocked("the item") }
            let attributes = s.attributes(of: item)
            let contentType = given.contentType.isEmpty ? SecretItemMapping.defaultContentType : given.contentType
            let owner = s.owner, collection = object.collection
            try s.answerLater(m, deciding: [item], .write, { refusal in
                if let refused = refusal(item) { throw refused }
                _ = try owner.replaceSecret(of: item, secret: plain) { old in
                    SecretItemMapping.extras(attributes: attributes, contentType: contentType, collection: collection, keeping: old)
                }
            }, reply: { _, _ in })
        default:
            throw BusError("org.freedesktop.DBus.Error.UnknownMethod", member)
        }
    }

    func get(_ property: String, path: String, into r: BusMessage) throws {
        let s = service
        let o = try s.object(path)
        let attributes = o.item?.record.attributes
        switch property {
        case "Locked": try r.append(s.isLocked(o))
        case "Attributes": try r.append(dictionary: s.attributes(of: o))
        case "Label": try r.append(attributes?.label ?? "")
        case "Created": try r.append(UInt64(max(0, attributes?.created.timeIntervalSince1970 ?? 0)))
        case "Modified": try r.append(UInt64(max(0, attributes?.modified.timeIntervalSince1970 ?? 0)))
        default: throw BusError("org.freedesktop.DBus.Error.UnknownProperty", property)
        }
    }

    func set(_ property: String, path: String, from value: BusMessage) throws {
        let s = service
        let object = try s.object(path)
        let item = try s.item(at: path)
        guard !s.isLocked(item) else { throw SecretError.isLocked("the item") }
        // Per-program access: changing a guarded item's label or attributes is decided like
        // changing its secret.
        try s.decideNow(value, item, .attributes)
        switch property {
        case "Label":
            let label = try value.readString()
            _ = try mapped { try s.owner.setLabel(of: item, to: label) }
        case "Attributes":
            let attributes = try value.readDictionary(limit: s.limits.attributes, byteLimit: s.limits.attributeBytes)
            let contentType = s.contentType(of: item)
            let key = try mapped { try SecretItemMapping.key(for: attributes) }
            // The item keeps its name when the new map still maps to it.
            let renamed = SecretItemMapping.same(SecretItemMapping.attributes(of: item.key, stored: attributes), attributes) ? nil : key
            _ = try mapped {
                try s.owner.rename(item, to: renamed) { old in
                    SecretItemMapping.extras(attributes: attributes, contentType: contentType, collection: object.collection, keeping: old)
                }
            }
        default:
            throw BusError("org.freedesktop.DBus.Error.PropertyReadOnly", property)
        }
    }
}

final class SessionInterface: BusInterface {
    static let interface = "org.freedesktop.Secret.Session"
    let name = SessionInterface.interface
    unowned let service: SecretService
    init(_ service: SecretService) { self.service = service }
    let members: [BusMember] = [.method("Close", "", "", [])]

    func exists(_ path: String) -> Bool { service.sessions[path] != nil }

    func call(_ member: String, path: String, message m: BusMessage, reply r: BusMessage) throws {
        guard member == "Close" else { throw BusError("org.freedesktop.DBus.Error.UnknownMethod", member) }
        _ = try service.session(path, client: m.sender)
        if case .aes(let key) = service.sessions[path]?.transfer { key.wipe() }
        service.sessions[path] = nil
    }

    func get(_ property: String, path: String, into r: BusMessage) throws {
        throw BusError("org.freedesktop.DBus.Error.UnknownProperty", property)
    }
}

final class PromptInterface: BusInterface {
    static let interface = "org.freedesktop.Secret.Prompt"
    let name = PromptInterface.interface
    unowned let service: SecretService
    init(_ service: SecretService) { self.service = service }
    let members: [BusMember] = [
        .method("Prompt", "s", "", ["window_id"]),
        .method("Dismiss", "", "", []),
        .signal("Completed", "bv", ["dismissed", "result"]),
    ]

    func exists(_ path: String) -> Bool { service.prompts[path] != nil }

    func call(_ member: String, path: String, message m: BusMessage, reply r: BusMessage) throws {
        guard let prompt = service.prompts[path], prompt.client == m.sender else { throw SecretError.noSuchObject(path) }
        service.prompts[path] = nil
        switch member {
        case "Prompt":
            _ = try m.readString()
            prompt.run(service, path)
        case "Dismiss":
            service.completePrompt(path, dismissed: true, result: [])
        default:
            throw BusError("org.freedesktop.DBus.Error.UnknownMethod", member)
        }
    }

    func get(_ property: String, path: String, into r: BusMessage) throws {
        throw BusError("org.freedesktop.DBus.Error.UnknownProperty", property)
    }
}
