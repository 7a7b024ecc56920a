import Foundation
import GRDB
import GRDBSQLite
import KeychainCrypto
import KeychainModel

/// A Secret Service item's attribute map, kept in its sealed extras as lines beside git's:
/// `secret-service.attribute.NAME=VALUE`, `secret-service.content-type=TYPE` and
/// `secret-service.collection=ID`, with `%`, `=` and control bytes as `%XX`. The store reads
/// these lines to keep the blind index of each name=value pair of the item's attributes
/// (`attribute_index`, `SecretAttributes.of`), so that a search by exact match costs
/// O(matching items), in every lock state, and the store never holds an attribute value in clear.
package enum SecretAttributeLines {
    package static let attributePrefix = Array("secret-service.attribute.".utf8)
    package static let contentTypePrefix = Array("secret-service.content-type=".utf8)
    package static let collectionPrefix = Array("secret-service.collection=".utf8)

    /// The pairs in extras (nil when it holds none of these lines), the content type, and the
    /// collection (nil: the default one, `SecretAttributes.defaultCollection`).
    package static func parse(_ b: UnsafeRawBufferPointer) -> (attributes: [String: String]?, contentType: String?, collection: String?) {
        var attributes: [String: String]? = nil
        var contentType: String? = nil
        var collection: String? = nil
        for line in b.split(separator: 0x0A) {
            if line.starts(with: attributePrefix) {
                let rest = line.dropFirst(attributePrefix.count)
                guard let eq = rest.firstIndex(of: UInt8(ascii: "=")) else { continue }
                attributes = attributes ?? [:]
                attributes![unescape(rest[..<eq])] = unescape(rest[(eq + 1)...])
            } else if line.starts(with: contentTypePrefix) {
                contentType = unescape(line.dropFirst(contentTypePrefix.count))
                attributes = attributes ?? [:]
            } else if line.starts(with: collectionPrefix) {
                collection = unescape(line.dropFirst(collectionPrefix.count))
            }
        }
        return (attributes, contentType, collection)
    }

    /// Whether a line of extras is one of these (others are git's, kept as they are).
    package static func isOurs(_ line: some Collection<UInt8>) -> Bool {
        line.starts(with: attributePrefix) || line.starts(with: contentTypePrefix) || line.starts(with: collectionPrefix)
    }

    /// The lines for a map, content type and collection (nil or the default: no line).
    package static func encode(_ attributes: [String: String], contentType: String, collection: String? = nil) -> [UInt8] {
        var out: [UInt8] = contentTypePrefix + escape(contentType) + [0x0A]
        if let collection, collection != SecretAttributes.defaultCollection {
            out += collectionPrefix + escape(collection) + [0x0A]
        }
        for (k, v) in attributes.sorted(by: { $0.key < $1.key }) {
            out += attributePrefix + escape(k) + [UInt8(ascii: "=")] + escape(v) + [0x0A]
        }
        return out
    }

    package static func escape(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        for c in s.utf8 {
            if c == UInt8(ascii: "%") || c == UInt8(ascii: "=") || c < 0x20 || c == 0x7F {
                let hex = Array("0123456789ABCDEF".utf8)
                out += [UInt8(ascii: "%"), hex[Int(c >> 4)], hex[Int(c & 0xF)]]
            } else {
                out.append(c)
            }
        }
        return out
    }

    package static func unescape(_ bytes: some Collection<UInt8>) -> String {
        var out: [UInt8] = []
        var it = Array(bytes)[...]
        while let c = it.popFirst() {
            if c == UInt8(ascii: "%"), it.count >= 2,
               let v = UInt8(String(decoding: it.prefix(2), as: UTF8.self), radix: 16) {
                out.append(v)
                it = it.dropFirst(2)
            } else {
                out.append(c)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes a pair's blind index is the HMAC of: a tag apart from the key indexes' (1–4).
    static func indexBytes(name: String, value: String) -> [UInt8] {
        [5] + Array(name.utf8) + [0] + Array(value.utf8)
    }

    /// A collection's tag; the default collection has none (its items are those in no other).
    static func collectionBytes(_ id: String) -> [UInt8] { [7] + Array(id.utf8) }
}

/// The Secret Service attributes of an item, whoever made it (README, "Secret Service"): the
/// map a client gave, its name fields following the item's key (a rename in the tree renames
/// them); or, for an item made through the tree or the CLI, its natural attributes. The store
/// indexes exactly these, so a search needs no decryption and answers in every lock state.
package enum SecretAttributes {
    package static let schemaAttribute = "xdg:schema"
    package static let gitSchema = "org.git.Password"
    /// libsecret's compatibility schema for network passwords (git's libsecret helper before
    /// 2.45): an internet item made elsewhere answers to it too.
    package static let networkSchema = "org.gnome.keyring.NetworkPassword"
    /// The collection of every item not put in another one (the tree's and the CLI's).
    package static let defaultCollection = "login"

    package static func natural(_ key: ItemKey) -> [String: String] {
        switch key {
        case .generic(let g):
            return ["service": g.service, "account": g.account, "username": g.account]
        case .internet(let i):
            var a = ["server": i.server, "account": i.account, "user": i.account, "protocol": i.protocol.name,
                     "port": String(i.port), schemaAttribute: gitSchema]
            if !i.path.isEmpty {
                a["path"] = i.path
                a["object"] = i.path
            }
            return a
        }
    }

    /// The item's attributes: the map it was given (nil: none), its name fields following its key.
    package static func of(_ key: ItemKey, stored: [String: String]?) -> [String: String] {
        guard var a = stored else { return natural(key) }
        switch key {
        case .generic(let g):
            if a["service"] != nil { a["service"] = g.service }
            for name in ["username", "account", "user"] where a[name] != nil { a[name] = account(g.account, given: a[name]!) }
        case .internet(let i):
            // The name fields follow the key; the schema stays as the client gave it.
            for (name, value) in natural(key) where a[name] != nil && name != schemaAttribute {
                a[name] = ["user", "account", "username"].contains(name) ? account(value, given: a[name]!) : value
            }
            a["server"] = i.server
        }
        return a
    }

    /// The account attribute of an item named `name`: the one given while the name is that
    /// one made distinct (`given (2)`, the mapping's rule for a map that differs from the item
    /// holding a name), so that the item keeps the attributes its client gave; else the name.
    static func account(_ name: String, given: String) -> String {
        // On bytes: a `(` after a prepending mark is one character with it.
        guard name.utf8.last == UInt8(ascii: ")"), let open = name.utf8.lastIndex(of: UInt8(ascii: "(")) else { return name }
        let digits = String(name[name.utf8.index(after: open)...].utf8.dropLast())!
        guard digits.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let n = Int(digits), n >= 2 else { return name }
        return name.isSame(as: distinct(given, n)) ? given : name
    }

    /// `name (n)`: the name cut short, by characters, so that it still fits in one file name
    /// once escaped (a 255-byte account made distinct would otherwise be no name at all, and
    /// CreateItem without `replace` fail where the rule promises a second item).
    package static func distinct(_ name: String, _ n: Int) -> String {
        let suffix = " (\(n))"
        var kept = Substring(name)
        while !kept.isEmpty, TreeName.escape(kept + suffix).utf8.count > TreeName.maxBytes { kept = kept.dropLast() }
        return kept + suffix
    }

    /// The pairs a row is indexed under: its attributes, and for an item made elsewhere
    /// libsecret's older network schema as well (git's helper before 2.45 searches by it).
    static func indexedPairs(_ key: ItemKey, stored: [String: String]?) -> [(String, String)] {
        var pairs = of(key, stored: stored).map { ($0.key, $0.value) }
        if stored == nil, case .internet = key { pairs.append((schemaAttribute, networkSchema)) }
        return pairs
    }
}

extension Keychain {
    /// A tag of the pair index: the blind index's first 16 bytes. Half the size in two indexes,
    /// and 128 bits leave no collision to fear among a store's pairs.
    /// `mac`, keyed with the index key, spares a look-up of the algorithms (`SealScratch`).
    func tag(_ bytes: [UInt8], mac: HMACSHA256.Keyed? = nil) throws -> [UInt8] {
        Array(try (mac?.authenticate(bytes) ?? blind(bytes)).prefix(16))
    }

    /// The blind indexes of a row with this key and extras: each attribute pair, and the
    /// collection's (none for the default).
    func attributeTags(_ key: ItemKey, _ extras: UnsafeRawBufferPointer?, mac: HMACSHA256.Keyed? = nil) throws -> [[UInt8]] {
        let parsed = extras.map { SecretAttributeLines.parse($0) }
        var tags = try SecretAttributes.indexedPairs(key, stored: parsed?.attributes).map {
            try tag(SecretAttributeLines.indexBytes(name: $0.0, value: $0.1), mac: mac)
        }
        if let c = parsed?.collection, c != SecretAttributes.defaultCollection {
            tags.append(try tag(SecretAttributeLines.collectionBytes(c), mac: mac))
        }
        return tags
    }

    /// The ids of the items whose attributes hold exactly `name` = `value`.
    package func itemIDs(withAttribute name: String, value: String) throws -> [Int64] {
        try itemIDs(matching: [name: value], collection: nil)
    }

    /// The ids, ascending, of the items whose attributes hold every pair of `query`, in
    /// `collection` (nil: any; the default: those in no other `others`), readable now or not:
    /// from the index (`indexedIDs`) and the entries still waiting for it (`indexPendingTags`).
    package func itemIDs(matching query: [String: String], collection: String?, others: [String] = []) throws -> [Int64] {
        var tags = try query.map { try tag(SecretAttributeLines.indexBytes(name: $0.key, value: $0.value)) }
        let isDefault = collection == SecretAttributes.defaultCollection
        if let collection, !isDefault { tags.append(try tag(SecretAttributeLines.collectionBytes(collection))) }
        let excluded = isDefault ? try others.filter { $0 != SecretAttributes.defaultCollection }
            .map { try tag(SecretAttributeLines.collectionBytes($0)) } : []
        return try select { db in
            let probe = try db.cachedStatement(sql: AttributeQuery.probe)
            func kept(_ ids: [Int64]) throws -> [Int64] {
                try excluded.isEmpty ? ids : ids.filter { id in
                    try !excluded.contains { try Int64.fetchOne(probe, arguments: [Data($0), id]) != nil }
                }
            }
            // Nothing asked: every row of the store (or of the default collection) matches.
            if tags.isEmpty { return try kept(Int64.fetchAll(db.cachedStatement(sql: "SELECT id FROM items ORDER BY id"))) }
            // Rows whose entries wait to be moved into the index: a few, read whole. Read before
            // the index, outside a transaction: a row moved in between is then found in one or
            // the other, never in neither.
            let waiting = try Int64.fetchAll(db.cachedStatement(sql: AttributeQuery.pending(tags.count)),
                                             arguments: StatementArguments(tags.map { Data($0) } + [tags.count]))
            let indexed = try indexedIDs(db, tags)
            return try kept(waiting.isEmpty ? indexed : Array(Set(indexed).union(waiting)).sorted())
        }
    }

    /// The ids, ascending, of the rows whose index entries hold every one of `tags`. A leapfrog
    /// join of the tags' entries: each step is one seek of the index (an index search,
    /// `AttributeQuery`), and the walk skips over what the rarest tag rules out, so it costs
    /// O(matching items × tags) seeks, whatever the store's size.
    private func indexedIDs(_ db: Database, _ tags: [[UInt8]]) throws -> [Int64] {
        if tags.count == 1 {
            // One pair: its entries in order, one range of the index.
            return try Int64.fetchAll(db.cachedStatement(sql: AttributeQuery.range), arguments: [Data(tags[0])])
        }
        let seek = try db.cachedStatement(sql: AttributeQuery.seek)
        var out: [Int64] = []
        var candidate = Int64.min
        var agreed = 0
        var i = 0
        while let found = try Int64.fetchOne(seek, arguments: [Data(tags[i]), candidate]) {
            if found == candidate {
                agreed += 1
            } else {
                candidate = found
                agreed = 1
            }
            if agreed == tags.count {
                out.append(candidate)
                guard candidate < Int64.max else { break }
                candidate += 1
                agreed = 0
            }
            i = (i + 1) % tags.count
        }
        return out
    }

    /// Whether the row `id` is in `collection` (by its tag; the default: in none of `others`).
    package func item(_ id: Int64, isIn collection: String, others: [String]) throws -> Bool {
        if collection == SecretAttributes.defaultCollection {
            let tags = try others.filter { $0 != collection }.map { try tag(SecretAttributeLines.collectionBytes($0)) }
            return try select { db in
                let probe = try db.cachedStatement(sql: AttributeQuery.probe)
                return try !tags.contains { try Int64.fetchOne(probe, arguments: [Data($0), id]) != nil }
            }
        }
        let member = try tag(SecretAttributeLines.collectionBytes(collection))
        return try select { db in try Int64.fetchOne(db.cachedStatement(sql: AttributeQuery.probe), arguments: [Data(member), id]) != nil }
    }

    /// The classes of these rows, readable now or not (rows that are gone are left out): a few
    /// statements, not one per row.
    package func itemClasses(_ ids: [Int64]) throws -> [Int64: AccessibilityClass] {
        var out: [Int64: AccessibilityClass] = [:]
        try select { db in
            for start in stride(from: 0, to: ids.count, by: 500) {
                let chunk = ids[start..<min(start + 500, ids.count)]
                let rows = try Row.fetchCursor(db, sql: "SELECT id, class FROM items WHERE id IN (\(chunk.map(String.init).joined(separator: ",")))")
                while let row = try rows.next() {
                    if let c = AccessibilityClass(code: Int(row[1] as Int64)) { out[row[0]] = c }
                }
            }
        }
        return out
    }

    /// The class of the row `id`, readable now or not; nil when there is no such row.
    package func itemClass(id: Int64) throws -> AccessibilityClass? {
        let code = try select { db in
            try Int64.fetchOne(db.cachedStatement(sql: "SELECT class FROM items WHERE id = ?"), arguments: [id])
        }
        return code.flatMap { AccessibilityClass(code: Int($0)) }
    }

    /// Beside every write of a row, in its transaction: its tags replace the old. Only the
    /// tags that changed are written, so an update of the secret alone writes no index page.
    /// A row whose entries still wait (`attribute_pending`) has them replaced there, whole.
    static func writeAttributeTags(_ sealed: SealedItem, replacing: Bool, _ db: Database) throws {
        var new = newAttributeTags(sealed).map(\.tag)
        if replacing {
            try db.cachedStatement(sql: "DELETE FROM attribute_pending WHERE item_id = ?").execute(arguments: [sealed.id])
            if db.changesCount > 0 { return try insertTags(newAttributeTags(sealed), .pending, db) }
            let old = try Data.fetchAll(db.cachedStatement(sql: "SELECT tag FROM attribute_index WHERE item_id = ?"),
                                        arguments: [sealed.id])
            for tag in old {
                if let i = new.firstIndex(where: { $0.elementsEqual(tag) }) {
                    new.remove(at: i)
                    continue
                }
                try db.cachedStatement(sql: "DELETE FROM attribute_index WHERE tag = ? AND item_id = ?")
                    .execute(arguments: [tag, sealed.id])
            }
        }
        try insertTags(new.map { ($0, sealed.id) }, .index, db)
    }

    /// The distinct tags of a row, each with its id, for `insertTags`.
    static func newAttributeTags(_ sealed: SealedItem) -> [(tag: [UInt8], id: Int64)] {
        var new: [[UInt8]] = []
        for tag in sealed.attributeTags where !new.contains(tag) { new.append(tag) }
        return new.map { ($0, sealed.id) }
    }

    /// Where a row's entries are written: the index, or the end of the table of entries that
    /// wait for it. Every entry of a row is in one of the two.
    enum TagTable: String {
        case index = "attribute_index"
        case pending = "attribute_pending"
    }

    /// Inserts entries that are not there yet. A batch gives them sorted by tag: the
    /// entries of random tags then go into the index in one pass over its pages, not each to
    /// a page of its own that a big store's cache may have let go (and spilled to the WAL) since.
    static func insertTags(_ entries: [(tag: [UInt8], id: Int64)], _ table: TagTable, _ db: Database) throws {
        guard !entries.isEmpty else { return }
        // Bound straight from the arrays, as a row is (`SealedItem.insert`): an import writes
        // a few of these per item, and GRDB's arguments and `Data` copies doubled its time.
        let raw = try db.cachedStatement(sql: "INSERT INTO \(table.rawValue) (tag, item_id) VALUES (?, ?)").sqliteStatement
        for (tag, id) in entries {
            sqlite3_reset(raw)
            var rc = tag.withUnsafeBytes {
                sqlite3_bind_blob(raw, 1, $0.baseAddress, Int32($0.count), unsafeBitCast(-1, to: sqlite3_destructor_type.self))
            }
            if rc == SQLITE_OK { rc = sqlite3_bind_int64(raw, 2, id) }
            if rc == SQLITE_OK { rc = sqlite3_step(raw) }
            sqlite3_reset(raw)
            guard rc == SQLITE_DONE else {
                throw DatabaseError(resultCode: ResultCode(rawValue: rc), message: String(cString: sqlite3_errmsg(sqlite3_db_handle(raw))))
            }
        }
    }

    static func deleteAttributeTags(_ id: Int64, _ db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM attribute_index WHERE item_id = ?").execute(arguments: [id])
        try db.cachedStatement(sql: "DELETE FROM attribute_pending WHERE item_id = ?").execute(arguments: [id])
    }

    /// Moves the entries that wait into the index, in one commit, sorted by tag (one pass over
    /// the index's pages). A create writes its row's entries to the end of `attribute_pending`,
    /// a page it writes anyway for the next rows, not into the index, whose random tags put
    /// each entry on a page of its own: two to four pages fewer in each create's commit. They
    /// are moved once commits pause (`settle`), at close, and before the index is completed.
    /// A crash in between loses nothing: the entries are in the store, and a search reads
    /// both tables; so the move is not synced (`StoreDatabase.unsynced`), and a crash that
    /// loses it leaves the entries waiting. Needs no key: the entries are tags already.
    /// `settling`: called by `settle`, whose commit schedules no other.
    package func indexPendingTags(settling: Bool = false) throws {
        let waiting = try select { db in
            try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM attribute_pending)")) ?? false
        }
        guard waiting else { return }
        var intact = false
        try Self.mappingDatabaseErrors {
            try database.unsynced(committed: { filesCommitted(intact: intact, settling: settling) }) { db in
                intact = filesAsLeft()
                try db.execute(sql: """
                    INSERT OR IGNORE INTO attribute_index (tag, item_id) SELECT tag, item_id FROM attribute_pending ORDER BY tag, item_id;
                    DELETE FROM attribute_pending;
                    """)
            }
        }
    }

    /// Indexes the rows written before this rule (ids below `attribute_index_from`, which the
    /// migration set) whose names and extras can be read now; returns how many are left
    /// (unreadable in this lock state, kept in `attribute_index_pending`). Once none is left, a
    /// flag in the store makes this a single read.
    @discardableResult
    package func completeAttributeIndex() throws -> Int {
        try indexPendingTags()
        func meta(_ db: Database, _ name: String) throws -> String? {
            try Data.fetchOne(db.cachedStatement(sql: "SELECT value FROM meta WHERE name = ?"), arguments: [name])
                .map { String(decoding: $0, as: UTF8.self) }
        }
        let (done, from, pending) = try select { db in
            (try meta(db, "attribute_index") != nil, try meta(db, "attribute_index_from").flatMap { Int64($0) } ?? 1,
             try meta(db, "attribute_index_pending"))
        }
        guard !done else { return 0 }
        let ids = try pending.map { $0.split(separator: ",").compactMap { Int64($0) } } ?? read { db in
            try Int64.fetchAll(db, sql: "SELECT id FROM items WHERE id < ? ORDER BY id", arguments: [from])
        }
        var left: [Int64] = []
        for chunk in stride(from: 0, to: ids.count, by: 512).map({ ids[$0..<min($0 + 512, ids.count)] }) {
            var tagged: [(Int64, [[UInt8]])] = []
            for id in chunk {
                guard try itemClass(id: id) != nil else { continue }
                guard let item = try item(id: id), let extras = try? self.extras(of: item) ?? SecureBytes() else {
                    left.append(id)
                    continue
                }
                tagged.append((id, try extras.withUnsafeBytes { try attributeTags(item.key, extras.count > 0 ? $0 : nil) }))
            }
            guard !tagged.isEmpty else { continue }
            try write(.addsOnly) { db, _ in
                for (id, tags) in tagged {
                    var row = SealedItem(id: id, kind: 0, classCode: 0, version: 0, blind: [], groupBlind: [], wrappedKey: [],
                                         attributes: [], secret: [], generation: 0, extras: nil)
                    row.attributeTags = tags
                    try Self.writeAttributeTags(row, replacing: true, db)
                }
            }
        }
        try write(.addsOnly) { db, _ in
            if left.isEmpty {
                try db.execute(sql: "DELETE FROM meta WHERE name = 'attribute_index_pending'")
                try StoreDatabase.setMeta(db, "attribute_index", Data("2".utf8))
            } else {
                try StoreDatabase.setMeta(db, "attribute_index_pending", Data(left.map(String.init).joined(separator: ",").utf8))
            }
        }
        return left.count
    }

    /// The migration that makes the index (StoreDatabase.migrator).
    /// The second migration: rows from this id on are indexed as they are written; those below
    /// wait for `completeAttributeIndex`.
    /// A store with no row yet (a new one) has nothing to complete: marked done here, so that
    /// its first unlock commits nothing (a commit would make a copy taken before it a rollback).
    static let attributeIndexFrom = """
        INSERT OR REPLACE INTO meta (name, value)
            VALUES ('attribute_index_from', COALESCE((SELECT value FROM meta WHERE name = 'next_id'), CAST('1' AS BLOB)));
        INSERT OR REPLACE INTO meta (name, value)
            SELECT 'attribute_index', CAST('2' AS BLOB) WHERE NOT EXISTS (SELECT 1 FROM items);
        """

    static let attributeIndexSchema = """
        CREATE TABLE attribute_index (tag BLOB NOT NULL, item_id INTEGER NOT NULL, PRIMARY KEY (tag, item_id)) WITHOUT ROWID;
        CREATE INDEX attribute_index_item ON attribute_index (item_id);
        """

    /// The entries of new rows until they are moved into the index (`indexPendingTags`): keyed
    /// by row first, so that a create appends to the table's last page.
    static let pendingTagsSchema = """
        CREATE TABLE attribute_pending (item_id INTEGER NOT NULL, tag BLOB NOT NULL, PRIMARY KEY (item_id, tag)) WITHOUT ROWID;
        """
}

/// The statements of a search (`itemIDs(matching:collection:)`); AttributeIndexTests checks that each
/// is a search of the index, never a pass over a table.
package enum AttributeQuery {
    /// The first id at or after `?2` with the tag `?1`.
    package static let seek = "SELECT item_id FROM attribute_index WHERE tag = ? AND item_id >= ? ORDER BY item_id LIMIT 1"
    /// Every id with the tag `?1`, in order.
    package static let range = "SELECT item_id FROM attribute_index WHERE tag = ? ORDER BY item_id"
    /// Whether the row `?2` has the tag `?1`, in the index or waiting for it.
    package static let probe = """
        SELECT item_id FROM attribute_index WHERE tag = ?1 AND item_id = ?2
        UNION ALL SELECT item_id FROM attribute_pending WHERE item_id = ?2 AND tag = ?1
        """
    /// The rows whose waiting entries hold all `count` distinct tags `?1`…`?count` (`?count+1`
    /// is the count again). A pass over the waiting entries, which are few: they are moved
    /// into the index once commits pause.
    package static func pending(_ count: Int) -> String {
        let list = (1...count).map { "?\($0)" }.joined(separator: ", ")
        return "SELECT item_id FROM attribute_pending WHERE tag IN (\(list)) GROUP BY item_id HAVING COUNT(*) = ?\(count + 1)"
    }
}

extension SealedItem {
    /// The row, as stored: the attribute tags (known only to a freshly sealed row) do not count.
    package static func == (a: SealedItem, b: SealedItem) -> Bool {
        a.id == b.id && a.kind == b.kind && a.classCode == b.classCode && a.version == b.version && a.blind == b.blind
            && a.groupBlind == b.groupBlind && a.wrappedKey == b.wrappedKey && a.attributes == b.attributes
            && a.secret == b.secret && a.generation == b.generation && a.extras == b.extras
    }

    package func hash(into h: inout Hasher) {
        h.combine(id); h.combine(version); h.combine(blind); h.combine(attributes); h.combine(secret)
    }
}
