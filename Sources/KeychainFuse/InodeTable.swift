import KeychainFileSystem
import KeychainModel

/// The kernel names files by inode number and the tree by location: this table keeps the name
/// and parent of every inode the kernel holds, until the kernel forgets it, its parsed
/// location, and the open handles of each.
/// An inode whose name is gone (unlinked, removed, or replaced by a rename) keeps its handles,
/// so `fstat` and `ftruncate` on a descriptor still open are answered from the handle, as on a
/// regular file. libfuse's high-level API keeps such a table too, but answers ESTALE there.
///
/// Not thread-safe; `FuseFileSystem` guards it with a mutex that is never held while calling
/// the tree (so it takes no part in `ServedKeychain`'s lock order). The kernel serialises the
/// changes to one directory (create, unlink, rename hold its lock), so a change in the tree and
/// the matching change here are not interleaved with another change to the same names.
struct InodeTable {
    struct Node {
        var parent: UInt64
        var name: String
        /// Lookups the kernel has not yet forgotten.
        var lookups: UInt64
        var handles: Set<UInt64> = []
        /// False once the name is gone: the node then has no path.
        var linked = true
        /// Its name went to another inode by a rename over it (`mv tmp item`, `sed -i`). A path
        /// walk that reached it just before may still open or stat it: it gets what the name
        /// holds now (a local file system would give the old value, which is erased here), not
        /// ENOENT for a name that never stopped existing.
        var replaced = false
        /// Looked up under a spelling the tree does not list (`TreeLocation.isListedSpelling`),
        /// or below a directory that was: the kernel is told of changes under the listed names
        /// only, so it must not cache this one's entry or attributes.
        var alias = false
    }

    /// Byte-exact (`ExactName`): the kernel hands names as bytes, and two forms of one name
    /// are two files.
    private struct ChildKey: Hashable {
        var parent: UInt64
        var name: String

        static func == (a: Self, b: Self) -> Bool { a.parent == b.parent && a.name.isSame(as: b.name) }

        func hash(into hasher: inout Hasher) { hasher.combine(parent); ExactName.hash(name, into: &hasher) }
    }

    /// FUSE_ROOT_ID.
    static let root: UInt64 = 1
    private(set) var nodes: [UInt64: Node] = [root: Node(parent: 0, name: "", lookups: 1)]
    private var children: [ChildKey: UInt64] = [:]
    private var next: UInt64 = 2
    /// Counts the unlinks and moves, the only changes that change a known inode's path (a new
    /// inode gets a number never used before): a cached location from before one is stale.
    private(set) var pathChanges: UInt64 = 0
    /// The nodes with `alias` set. While there are none, a change made through the mount was
    /// made under the one name the kernel holds for the item (but for an internet item's two
    /// listed names), so the kernel knows it already (`KernelCacheNotifier`).
    private(set) var aliases = 0
    /// Nodes' paths, parsed, each as of a `pathChanges`: an open or a `stat` of a known inode
    /// then builds and parses no string. Apart from `nodes`, whose values are moved in and
    /// out on every open and release, to keep those small.
    private var locations: [UInt64: (location: TreeLocation, changes: UInt64)] = [:]

    /// The tree path of `ino`, or nil if it or a directory above it has lost its name.
    func path(_ ino: UInt64) -> String? {
        var parts: [String] = []
        var current = ino
        while current != Self.root {
            guard let n = nodes[current], n.linked else { return nil }
            parts.append(n.name)
            current = n.parent
        }
        return "/" + parts.reversed().joined(separator: "/")
    }

    func path(_ parent: UInt64, _ name: String) -> String? {
        guard let p = path(parent) else { return nil }
        return p == "/" ? "/" + name : p + "/" + name
    }

    /// The parsed path of `ino`, if cached since the last change of paths (`cacheLocation`).
    func cachedLocation(_ ino: UInt64) -> TreeLocation? {
        guard let cached = locations[ino], cached.changes == pathChanges else { return nil }
        return cached.location
    }

    /// Keeps `location`, parsed from the path of `ino` while `pathChanges` was `changes`,
    /// unless a path has changed since.
    mutating func cacheLocation(_ ino: UInt64, _ location: TreeLocation, changes: UInt64) {
        guard changes == pathChanges, nodes[ino] != nil else { return }
        locations[ino] = (location, changes)
    }

    /// What `ino` names, or nil if it or a directory above it has lost its name: the cached
    /// location if no path changed since, else its parent's with its name (`TreeLocation.child`),
    /// kept for the next call.
    mutating func location(_ ino: UInt64) -> TreeLocation? {
        if ino == Self.root { return .root }
        if let cached = cachedLocation(ino) { return cached }
        guard let n = nodes[ino], n.linked, let parent = location(n.parent),
              let location = try? parent.child(n.name) else { return nil }
        locations[ino] = (location, pathChanges)
        return location
    }

    /// What the name `ino` lost to a rename names now (`Node.replaced`); nil for any other inode.
    mutating func replacedLocation(_ ino: UInt64) -> TreeLocation? {
        guard let n = nodes[ino], !n.linked, n.replaced, let parent = location(n.parent) else { return nil }
        return try? parent.child(n.name)
    }

    func child(_ parent: UInt64, _ name: String) -> UInt64? { children[ChildKey(parent: parent, name: name)] }

    /// The inodes the kernel holds that have a child it holds: the root, and directories.
    var directories: [UInt64] { Array(Set(children.keys.map(\.parent)).union([Self.root])).sorted() }

    /// The inode of the directory at `names` below the root, if the kernel holds it.
    func directory(_ names: [String]) -> UInt64? {
        var ino = Self.root
        for name in names {
            guard let next = child(ino, name) else { return nil }
            ino = next
        }
        return ino
    }

    /// The handles open on `ino`.
    func handles(_ ino: UInt64) -> [UInt64] { Array(nodes[ino]?.handles ?? []) }

    /// Whether a file is open on `ino`.
    func isOpen(_ ino: UInt64) -> Bool { !(nodes[ino]?.handles.isEmpty ?? true) }

    /// The inode of `parent`/`name`, made if new, with one more lookup. A new inode is an alias
    /// if `alias` says so or its directory is one (`Node.alias`).
    mutating func lookedUp(_ parent: UInt64, _ name: String, alias: Bool = false) -> UInt64 {
        let key = ChildKey(parent: parent, name: name)
        if let ino = children[key] {
            nodes[ino]!.lookups += 1
            return ino
        }
        let ino = next
        next += 1
        let alias = alias || isAlias(parent)
        nodes[ino] = Node(parent: parent, name: name, lookups: 1, alias: alias)
        if alias { aliases += 1 }
        children[key] = ino
        return ino
    }

    /// `lookedUp`, with whether the inode is an alias (its own spelling or its directory's).
    mutating func entry(_ parent: UInt64, _ name: String, alias: Bool) -> (ino: UInt64, alias: Bool) {
        let ino = lookedUp(parent, name, alias: alias)
        return (ino, isAlias(ino))
    }

    /// A file just made at `parent`/`name`: a new inode, whatever had that name before.
    mutating func created(_ parent: UInt64, _ name: String, alias: Bool = false) -> UInt64 {
        unlink(parent, name)
        return lookedUp(parent, name, alias: alias)
    }

    /// Whether `ino` was looked up under a spelling the tree does not list.
    func isAlias(_ ino: UInt64) -> Bool { nodes[ino]?.alias ?? false }

    /// The name is gone; an inode the kernel still holds stays, with no path.
    mutating func unlink(_ parent: UInt64, _ name: String) {
        guard let ino = children.removeValue(forKey: ChildKey(parent: parent, name: name)) else { return }
        pathChanges += 1
        nodes[ino]?.linked = false
        dropIfUnused(ino)
    }

    /// A rename: whatever had the new name loses it (it was replaced), and the inode moves.
    mutating func move(_ parent: UInt64, _ name: String, to newParent: UInt64, _ newName: String, alias: Bool = false) {
        guard parent != newParent || !name.isSame(as: newName) else { return }
        pathChanges += 1
        let ino = children.removeValue(forKey: ChildKey(parent: parent, name: name))
        let target = child(newParent, newName)
        unlink(newParent, newName)
        if let target, ino != nil { nodes[target]?.replaced = true }
        guard let ino else { return }
        nodes[ino]!.parent = newParent
        nodes[ino]!.name = newName
        children[ChildKey(parent: newParent, name: newName)] = ino
        setAlias(ino, alias || isAlias(newParent))
    }

    /// A moved node's spelling decides anew whether it is an alias; what lies below a directory
    /// that became one becomes one too (a directory that stops being one leaves its inodes as
    /// they are: uncached, which is only slower).
    private mutating func setAlias(_ ino: UInt64, _ alias: Bool) {
        guard nodes[ino]!.alias != alias else { return }
        nodes[ino]!.alias = alias
        aliases += alias ? 1 : -1
        guard alias else { return }
        for (child, n) in nodes where n.parent == ino && n.linked { setAlias(child, true) }
    }

    mutating func forget(_ ino: UInt64, _ count: UInt64) {
        guard ino != Self.root, nodes[ino] != nil else { return }
        nodes[ino]!.lookups -= min(count, nodes[ino]!.lookups)
        dropIfUnused(ino)
    }

    mutating func opened(_ ino: UInt64, _ handle: UInt64) { nodes[ino]?.handles.insert(handle) }

    /// The kernel may forget an inode before the release of its last handle arrives.
    mutating func released(_ ino: UInt64, _ handle: UInt64) {
        nodes[ino]?.handles.remove(handle)
        dropIfUnused(ino)
    }

    private mutating func dropIfUnused(_ ino: UInt64) {
        guard ino != Self.root, let n = nodes[ino], n.lookups == 0, n.handles.isEmpty else { return }
        nodes[ino] = nil
        if n.alias { aliases -= 1 }
        locations[ino] = nil
        let key = ChildKey(parent: n.parent, name: n.name)
        if n.linked, children[key] == ino { children[key] = nil }
    }
}
