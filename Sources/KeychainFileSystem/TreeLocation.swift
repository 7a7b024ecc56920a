import KeychainModel

/// What a path in the mount names, decoded from its escaped components. Whether an
/// internet entry is a directory or a file depends on the index, so that is left open here.
package enum TreeLocation: Equatable, Sendable {
    case root
    case internetRoot
    case service(String)
    case genericItem(service: String, account: String)
    case server(String)
    case port(server: String, port: UInt16)
    /// `/internet/<server>/<port>/<parent…>/<name>`: a path directory or an item.
    case internetEntry(server: String, port: UInt16, parent: [String], name: String)

    /// Byte-exact (`ExactName`): two forms of one name are two files.
    package static func == (a: Self, b: Self) -> Bool {
        let same = ExactName.equal
        switch (a, b) {
        case (.root, .root), (.internetRoot, .internetRoot): return true
        case (.service(let x), .service(let y)), (.server(let x), .server(let y)): return same(x, y)
        case (.genericItem(let s, let a), .genericItem(let t, let b)): return same(s, t) && same(a, b)
        case (.port(let s, let p), .port(let t, let q)): return p == q && same(s, t)
        case (.internetEntry(let s, let p, let parent, let n), .internetEntry(let t, let q, let otherParent, let m)):
            return p == q && same(s, t) && same(n, m) && parent.count == otherParent.count && zip(parent, otherParent).allSatisfy(same)
        default: return false
        }
    }

    /// Whether `name`, the last component a lookup was given for this location, is spelled as
    /// the tree lists it. Other spellings name the same thing (any valid escape, a protocol in
    /// capitals), but the kernel is told of a change only under the listed names, so an entry
    /// looked up under another must not be cached (`FuseOperations.entry`).
    package func isListedSpelling(_ name: String, isDirectory: Bool) -> Bool {
        switch self {
        case .root: return name.isEmpty
        case .internetRoot: return name == Self.internetName
        case .service(let service): return name.isSame(as: Self.serviceFileName(service))
        case .server(let s), .genericItem(_, let s): return name.isSame(as: TreeName.escape(s))
        case .port(_, let port): return name == String(port)
        case .internetEntry(_, let port, _, let n):
            guard isDirectory else { return InternetVariantName.isListedSpelling(n, port: port) }
            return TreeName.unescape(n).map { name.isSame(as: TreeName.escape($0)) } ?? false
        }
    }

    /// The reserved root name, and how a generic service of that name is spelled.
    package static let internetName = "internet"
    package static let escapedInternetService = "%69nternet"

    /// Parses an absolute mount path. Throws ENOENT-free errors only for names that cannot
    /// exist: invalid escapes (EINVAL), bad ports (EINVAL), over-long names (ENAMETOOLONG).
    package static func parse(_ path: String) throws(FileSystemError) -> TreeLocation {
        let parts = PathText.split(path)
        guard let first = parts.first else { return .root }
        if first == internetName { return try parseInternet(Array(parts.dropFirst())) }
        let service = try decode(first)
        switch parts.count {
        case 1: return .service(service)
        case 2: return .genericItem(service: service, account: try decode(parts[1]))
        default: throw .notDirectory
        }
    }

    /// What `name` names inside this directory: the same as `parse` of this location's path
    /// followed by `/name`, with no path built and parsed again (the FUSE binding keeps each
    /// inode's location and is handed its children's names).
    package func child(_ name: String) throws(FileSystemError) -> TreeLocation {
        switch self {
        case .root:
            return name == Self.internetName ? .internetRoot : .service(try Self.decode(name))
        case .internetRoot:
            return .server(try Self.decode(name))
        case .service(let service):
            return .genericItem(service: service, account: try Self.decode(name))
        case .genericItem:
            throw .notDirectory
        case .server(let server):
            do { return .port(server: server, port: try InternetPort.parseDirectoryName(name)) } catch { throw .invalid }
        case .port(let server, let port):
            guard name.utf8.count <= TreeName.maxBytes else { throw .nameTooLong }
            return .internetEntry(server: server, port: port, parent: [], name: name)
        case .internetEntry(let server, let port, let parent, let directory):
            let segment = try Self.segment(directory)
            guard name.utf8.count <= TreeName.maxBytes else { throw .nameTooLong }
            return .internetEntry(server: server, port: port, parent: parent + [segment], name: name)
        }
    }

    private static func parseInternet(_ parts: [String]) throws(FileSystemError) -> TreeLocation {
        guard let serverName = parts.first else { return .internetRoot }
        let server = try decode(serverName)
        guard parts.count > 1 else { return .server(server) }
        let port: UInt16
        do { port = try InternetPort.parseDirectoryName(parts[1]) } catch { throw .invalid }
        guard parts.count > 2 else { return .port(server: server, port: port) }
        var parent: [String] = []
        for p in parts[2..<(parts.count - 1)] { parent.append(try segment(p)) }
        let last = parts[parts.count - 1]
        guard last.utf8.count <= TreeName.maxBytes else { throw .nameTooLong }
        return .internetEntry(server: server, port: port, parent: parent, name: last)
    }

    /// A path segment: paths are split on `/`, so a segment can hold neither `/` nor nothing.
    static func segment(_ component: String) throws(FileSystemError) -> String {
        let s = try decode(component)
        guard !s.isEmpty, !s.utf8.contains(UInt8(ascii: "/")) else { throw .invalid }
        return s
    }

    static func decode(_ component: String) throws(FileSystemError) -> String {
        guard component.utf8.count <= TreeName.maxBytes else { throw .nameTooLong }
        guard let name = TreeName.unescape(component) else { throw .invalid }
        return name
    }

    /// The file name a service is listed under in the root.
    package static func serviceFileName(_ service: String) -> String {
        service == internetName ? escapedInternetService : TreeName.escape(service)
    }
}
