/// How a name (service, account, server, path segment) appears as one file name in the tree.
///
/// Almost every name maps straight through. `%`, `/` and the control characters (NUL to
/// U+001F, and DEL) become `%25`, `%2F`, `%00`…`%1F`, `%7F`: a name may hold any character, but
/// a raw newline or escape in a file name would break `ls`, line-based tools and terminals.
/// The names `.` and `..` become `%2E` and `%2E%2E`; the empty name becomes a lone `%`.
/// Because `%` is always escaped, a `%` that is not followed by two hex digits can never come
/// from a name, which leaves room for the variant suffix (`%~`) used under `internet/`.
package enum TreeName {
    package static let maxBytes = 255

    package static func escape(_ name: String) -> String {
        if name.isEmpty { return "%" }
        if name == "." { return "%2E" }
        if name == ".." { return "%2E%2E" }
        var out = ""
        out.reserveCapacity(name.utf8.count)
        for scalar in name.unicodeScalars {
            switch scalar {
            case "%": out += "%25"
            case "/": out += "%2F"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                out += "%" + String(hexDigits[Int(scalar.value >> 4)]) + String(hexDigits[Int(scalar.value & 0xF)])
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// The inverse of `escape`, or nil for a file name that no name escapes to.
    package static func unescape(_ fileName: String) -> String? {
        if fileName == "%" { return "" }
        let bytes = Array(fileName.utf8)
        guard !bytes.isEmpty else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if b == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, let hi = hex(bytes[i + 1]), let lo = hex(bytes[i + 2]) else { return nil }
                out.append(hi << 4 | lo)
                i += 3
            } else {
                if b == 0 || b == UInt8(ascii: "/") { return nil }
                out.append(b)
                i += 1
            }
        }
        // Any valid escape is accepted (`%69nternet` is how the service `internet` is typed),
        // but only `escape(name)` is ever listed.
        return String(validating: out, as: UTF8.self)
    }

    /// Throws unless `name` fits in one file name once escaped.
    package static func validate(_ name: String, as what: String) throws(ModelError) {
        let n = escape(name).utf8.count
        if n > maxBytes {
            throw .nameTooLong("\(what) is \(n) bytes once escaped; the limit is \(maxBytes)")
        }
    }

    private static let hexDigits = Array("0123456789ABCDEF")

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}
