import Glibc

/// A name compared, hashed and ordered by its UTF-8 bytes, as the store compares names (each
/// item is found by a blind index of its name's bytes).
///
/// Swift's `String` equality is canonical equivalence: `é` as one code point and as `e` with
/// a combining accent are equal strings, yet two items to the store and two files to the
/// kernel. Keyed by `String`, an index or a set would take them for one name, and one of the
/// two items would go missing behind the other. Every key built from a name (`ItemKey`, the
/// mount's directories and inodes) compares as this does.
package struct ExactName: Hashable, Comparable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    package let text: String

    package init(_ text: String) { self.text = text }

    package init(stringLiteral text: String) { self.text = text }

    package var description: String { text }

    package static func == (a: ExactName, b: ExactName) -> Bool { equal(a.text, b.text) }

    package func hash(into hasher: inout Hasher) { Self.hash(text, into: &hasher) }

    /// Byte order, which is code point order: a listing's order, stable whatever the form.
    package static func < (a: ExactName, b: ExactName) -> Bool {
        a.text.utf8.lexicographicallyPrecedes(b.text.utf8)
    }

    /// Whether `a` and `b` are the same bytes: `String`'s `==` for names.
    package static func equal(_ a: String, _ b: String) -> Bool {
        // A native string knows its UTF-8 length without counting, and holds its bytes in one
        // piece: one memcmp, where `elementsEqual` walked the views a byte at a time (the
        // index's dictionaries compare names at every probe, a few times per request).
        let count = a.utf8.count
        guard count == b.utf8.count else { return false }
        guard count > 0 else { return true }
        let same = a.utf8.withContiguousStorageIfAvailable { x in
            b.utf8.withContiguousStorageIfAvailable { y in memcmp(x.baseAddress!, y.baseAddress!, count) == 0 }
        }
        return (same ?? nil) ?? a.utf8.elementsEqual(b.utf8)
    }

    /// Hashes `s`'s bytes, and its length, so that the fields of a key cannot run into each other.
    package static func hash(_ s: String, into hasher: inout Hasher) {
        hasher.combine(s.utf8.count)
        let hashed: Void? = s.utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if hashed == nil { for byte in s.utf8 { hasher.combine(byte) } }
    }
}

extension String {
    /// This name as its bytes (`ExactName`), for a key.
    package var exact: ExactName { ExactName(self) }

    /// Whether `other` is the same bytes: how the kernel and the store tell names and paths
    /// apart, not Swift's canonical equivalence (`ExactName`).
    package func isSame(as other: String) -> Bool { ExactName.equal(self, other) }

    /// Whether `wanted` is nil (nothing asked for) or the same bytes as this.
    package func matches(_ wanted: String?) -> Bool { wanted.map(isSame) ?? true }
}
