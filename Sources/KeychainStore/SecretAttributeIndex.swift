import Foundation
import GRDB
import KeychainCrypto
import KeychainModel

/// A Secret Service item's attribute map, kept in its sealed extras as lines beside git's:
/// `secret-service.attribute.NAME=VALUE` and `secret-service.content-type=TYPE`, with `%`, `=`
/// and control bytes as `%XX`. The store reads these lines only to keep the blind index of
/// each name=value pair (`attribute_index`), so that a search by exact match costs
/// O(matching items) and the store never holds an attribute value in clear.
package enum SecretAttributeLines {
    package static let attributePrefix = Array("secret-service.attribute.".utf8)
    package static let contentTypePrefix = Array("secret-service.content-type=".utf8)

    /// The pairs in extras (nil when it holds none of these lines) and the content type.
    package static func parse(_ b: UnsafeRawBufferPointer) -> (attributes: [String: String]?, contentType: String?) {
        var attributes: [String: String]? = nil
        var contentType: String? = nil
        for line in b.split(separator: 0x0A) {
            if line.starts(with: attributePrefix) {
                let rest = line.dropFirst(attributePrefix.count)
                guard let eq = rest.firstIndex(of: UInt8(ascii: "=")) else { continue }
                attributes = attributes ?? [:]
                attributes![unescape(rest[..<eq])] = unescape(rest[(eq + 1)...])
            } else if line.starts(with: contentTypePrefix) {
                contentType = unescape(line.dropFirst(contentTypePrefix.count))
                attributes = attributes ?? [:]
            }
        }
        return (attributes, contentType)
    }

    /// Whether a line of extras is one of these (others are git's, kept as they are).
    package static func isOurs(_ line: some Collection<UInt8>) -> Bool {
        line.starts(with: attributePrefix) || line.starts(with: contentTypePrefix)
    }

    /// The lines for a map and content type.
    package static func encode(_ attributes: [String: String], contentType: String) -> [UInt8] {
        var out: [UInt8] = contentTypePrefix + escape(contentType) + [0x0A]
        for (k, v) in attributes.sorted(by: { $0.key < $1.key }) {
            out += attributePrefix + escape(k) + [UInt8(ascii: "=")] + escape(v) + [0x0A]
        }
        return out
    }

    static func escape(_ s: String) -> [UInt8] {
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

    static func unescape(_ bytes: some Collection<UInt8>) -> String {
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
}

extension Keychain {
    /// The blind index of each pair in `extras`' attribute lines.
    func attributeTags(_ extras: UnsafeRawBufferPointer?) throws -> [[UInt8]] {
        guard let extras, let map = SecretAttributeLines.parse(extras).attributes else { return [] }
        return try map.map { try blind(SecretAttributeLines.indexBytes(name: $0.key, value: $0.value)) }
    }

    /// The ids of the items whose sealed map holds exactly `name` = `value`: one index probe.
    package func itemIDs(withAttribute name: String, value: String) throws -> [Int64] {
        let tag = try blind(SecretAttributeLines.indexBytes(name: name, value: value))
        return try select { db in
            try Int64.fetchAll(db.cachedStatement(sql: "SELECT item_id FROM attribute_index WHERE tag = ?"), arguments: [Data(tag)])
        }
    }

    /// Beside every write of a row, in its transaction: its pairs' blind indexes replace the old.
    static func writeAttributeTags(_ sealed: SealedItem, replacing: Bool, _ db: Database) throws {
        if replacing { try deleteAttributeTags(sealed.id, db) }
        for tag in Set(sealed.attributeTags) {
            try db.cachedStatement(sql: "INSERT INTO attribute_index (tag, item_id) VALUES (?, ?)")
                .execute(arguments: [Data(tag), sealed.id])
        }
    }

    static func deleteAttributeTags(_ id: Int64, _ db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM attribute_index WHERE item_id = ?").execute(arguments: [id])
    }

    /// The migration that makes the index (StoreDatabase.migrator).
    static let attributeIndexSchema = """
        CREATE TABLE attribute_index (tag BLOB NOT NULL, item_id INTEGER NOT NULL, PRIMARY KEY (tag, item_id)) WITHOUT ROWID;
        CREATE INDEX attribute_index_item ON attribute_index (item_id);
        """
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
