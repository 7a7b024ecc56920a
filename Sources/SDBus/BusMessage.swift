import CSystemd
import Glibc
import KeychainCrypto

/// A D-Bus error to answer a call with: its name (`org.freedesktop.Secret.Error.NoSuchObject`)
/// and a message for people.
package struct BusError: Error, Sendable, Equatable, CustomStringConvertible {
    package var description: String { "\(name): \(message)" }
    package var name: String
    package var message: String

    package init(_ name: String, _ message: String) {
        self.name = name
        self.message = message
    }

    package static func invalidArgs(_ message: String) -> BusError {
        BusError("org.freedesktop.DBus.Error.InvalidArgs", message)
    }
    package static func notSupported(_ message: String) -> BusError {
        BusError("org.freedesktop.DBus.Error.NotSupported", message)
    }
    package static func failed(_ message: String) -> BusError {
        BusError("org.freedesktop.DBus.Error.Failed", message)
    }
    package static func limitsExceeded(_ message: String) -> BusError {
        BusError("org.freedesktop.DBus.Error.LimitsExceeded", message)
    }

    /// sd-bus's negative errno, as an error of the message being read or written: a call whose
    /// arguments do not have the signature it claims, or a value the bus cannot carry.
    static func errno(_ r: Int32, _ what: String) -> BusError {
        .invalidArgs("\(what): \(String(cString: strerror(-r)))")
    }
}

/// One sd-bus message, read or written in order, as sd-bus does. Every call here is made on
/// the thread that runs the bus (`BusConnection`), which owns the message.
package struct BusMessage {
    package let raw: OpaquePointer

    package init(_ raw: OpaquePointer) { self.raw = raw }

    private func check(_ r: Int32, _ what: String) throws {
        if r < 0 { throw BusError.errno(r, what) }
    }

    // MARK: what it is

    package var path: String? { sd_bus_message_get_path(raw).map { String(cString: $0) } }
    package var member: String? { sd_bus_message_get_member(raw).map { String(cString: $0) } }
    package var interface: String? { sd_bus_message_get_interface(raw).map { String(cString: $0) } }
    package var sender: String? { sd_bus_message_get_sender(raw).map { String(cString: $0) } }
    package var signature: String { sd_bus_message_get_signature(raw, 1).map { String(cString: $0) } ?? "" }

    /// The calling process's id, as the bus daemon reports it (GetConnectionCredentials), not
    /// as the message claims.
    package func senderPID() -> pid_t? {
        var creds: OpaquePointer?
        // SD_BUS_CREDS_PID (1 << 0 in sd-bus.h): an anonymous 64-bit enum that a release build's
        // importer does not bring in, so its value is written here.
        let credsPID: UInt64 = 1 << 0
        guard sd_bus_query_sender_creds(raw, credsPID, &creds) >= 0, let creds else { return nil }
        defer { sd_bus_creds_unref(creds) }
        var pid: pid_t = 0
        return sd_bus_creds_get_pid(creds, &pid) >= 0 ? pid : nil
    }

    // MARK: writing

    private func appendBasic(_ type: Character, _ value: UnsafeRawPointer) throws {
        try check(sd_bus_message_append_basic(raw, CChar(type.asciiValue!), value), "append \(type)")
    }

    package func append(_ s: String) throws {
        try s.withCString { p in try appendBasic("s", p) }
    }

    package func append(objectPath s: String) throws {
        try s.withCString { p in try appendBasic("o", p) }
    }

    package func append(_ b: Bool) throws {
        var v: Int32 = b ? 1 : 0
        try appendBasic("b", &v)
    }

    package func append(_ v: UInt64) throws {
        var v = v
        try appendBasic("t", &v)
    }

    package func append(_ v: UInt32) throws {
        var v = v
        try appendBasic("u", &v)
    }

    /// An `ay` from bytes that are not secret.
    package func append(bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { b in
            try check(sd_bus_message_append_array(raw, CChar(UInt8(ascii: "y")), b.baseAddress, b.count), "append ay")
        }
    }

    /// An `ay` of a secret: copied from locked memory straight into the message.
    package func append(secret: SecureBytes) throws {
        try secret.withUnsafeBytes { b in
            // sd-bus wants a non-null pointer even for an empty array.
            var empty: UInt8 = 0
            let base = b.baseAddress ?? UnsafeRawPointer(&empty)
            try check(sd_bus_message_append_array(raw, CChar(UInt8(ascii: "y")), base, b.count), "append ay")
        }
    }

    package func open(_ type: Character, _ contents: String) throws {
        try contents.withCString { c in
            try check(sd_bus_message_open_container(raw, CChar(type.asciiValue!), c), "open \(type)\(contents)")
        }
    }

    package func close() throws {
        try check(sd_bus_message_close_container(raw), "close container")
    }

    package func append(strings: [String]) throws {
        try open("a", "s")
        for s in strings { try append(s) }
        try close()
    }

    package func append(objectPaths: [String]) throws {
        try open("a", "o")
        for s in objectPaths { try append(objectPath: s) }
        try close()
    }

    /// An `a{ss}`, sorted so that replies do not depend on a dictionary's order.
    package func append(dictionary: [String: String]) throws {
        try open("a", "{ss}")
        for (k, v) in dictionary.sorted(by: { $0.key < $1.key }) {
            try open("e", "ss")
            try append(k)
            try append(v)
            try close()
        }
        try close()
    }

    // MARK: reading

    /// The type of the next value, and its contents when it is a container; nil at the end.
    package func peek() throws -> (type: Character, contents: String)? {
        var type: CChar = 0
        var contents: UnsafePointer<CChar>?
        let r = sd_bus_message_peek_type(raw, &type, &contents)
        try check(r, "read")
        guard r > 0 else { return nil }
        return (Character(UnicodeScalar(UInt8(bitPattern: type))), contents.map { String(cString: $0) } ?? "")
    }

    private func readBasic(_ type: Character, _ value: UnsafeMutableRawPointer) throws {
        let r = sd_bus_message_read_basic(raw, CChar(type.asciiValue!), value)
        try check(r, "read \(type)")
        if r == 0 { throw BusError.invalidArgs("missing argument of type \(type)") }
    }

    package func readString() throws -> String {
        var p: UnsafePointer<CChar>?
        try readBasic("s", &p)
        return String(cString: p!)
    }

    package func readObjectPath() throws -> String {
        var p: UnsafePointer<CChar>?
        try readBasic("o", &p)
        return String(cString: p!)
    }

    package func readBool() throws -> Bool {
        var v: Int32 = 0
        try readBasic("b", &v)
        return v != 0
    }

    package func readUInt32() throws -> UInt32 {
        var v: UInt32 = 0
        try readBasic("u", &v)
        return v
    }

    /// An `ay` of bytes that are not secret, at most `limit` long.
    package func readBytes(limit: Int) throws -> [UInt8] {
        try withByteArray(limit: limit) { Array($0) }
    }

    /// An `ay` of a secret, copied from the message into locked memory.
    package func readSecret(limit: Int) throws -> SecureBytes {
        try withByteArray(limit: limit) { SecureBytes(copying: $0) }
    }

    private func withByteArray<R>(limit: Int, _ body: (UnsafeRawBufferPointer) -> R) throws -> R {
        var p: UnsafeRawPointer?
        var n = 0
        let r = sd_bus_message_read_array(raw, CChar(UInt8(ascii: "y")), &p, &n)
        try check(r, "read ay")
        if r == 0 { throw BusError.invalidArgs("missing argument of type ay") }
        guard n <= limit else { throw BusError.limitsExceeded("a byte array of \(n) bytes; the limit is \(limit)") }
        return body(UnsafeRawBufferPointer(start: p, count: n))
    }

    /// Enters a container; false at the end of the enclosing one.
    package func enter(_ type: Character, _ contents: String) throws -> Bool {
        let r = contents.withCString { sd_bus_message_enter_container(raw, CChar(type.asciiValue!), $0) }
        try check(r, "read \(type)\(contents)")
        return r > 0
    }

    package func exit() throws {
        try check(sd_bus_message_exit_container(raw), "leave container")
    }

    /// Enters a variant, whatever it holds; returns the signature of what it holds.
    package func enterVariant() throws -> String {
        guard let (type, contents) = try peek(), type == "v" else { throw BusError.invalidArgs("expected a variant") }
        guard try enter("v", contents) else { throw BusError.invalidArgs("expected a variant") }
        return contents
    }

    /// Skips the next complete value, whatever its type.
    package func skipOne() throws {
        guard let (type, contents) = try peek() else { return }
        let signature = type == "a" ? "a" + contents : (type == "r" ? "(" + contents + ")" : (type == "e" ? "{" + contents + "}" : String(type)))
        try skip(signature)
    }

    package func skip(_ signature: String) throws {
        try signature.withCString { s in try check(sd_bus_message_skip(raw, s), "skip \(signature)") }
    }

    package func readObjectPaths(limit: Int) throws -> [String] {
        guard try enter("a", "o") else { throw BusError.invalidArgs("missing argument of type ao") }
        var out: [String] = []
        while try peek() != nil {
            guard out.count < limit else { throw BusError.limitsExceeded("more than \(limit) object paths") }
            out.append(try readObjectPath())
        }
        try exit()
        return out
    }

    /// An `a{ss}` of at most `limit` entries and `byteLimit` bytes of names and values; a name
    /// given twice is refused.
    package func readDictionary(limit: Int, byteLimit: Int) throws -> [String: String] {
        guard try enter("a", "{ss}") else { throw BusError.invalidArgs("missing argument of type a{ss}") }
        var out: [String: String] = [:]
        var bytes = 0
        while try enter("e", "ss") {
            let k = try readString()
            let v = try readString()
            try exit()
            bytes += k.utf8.count + v.utf8.count
            guard out.count < limit, bytes <= byteLimit else {
                throw BusError.limitsExceeded("an attribute map over \(limit) entries or \(byteLimit) bytes")
            }
            guard out.updateValue(v, forKey: k) == nil else { throw BusError.invalidArgs("attribute '\(k)' given twice") }
        }
        try exit()
        return out
    }
}
