import COpenSSL
import KeychainCrypto
import KeychainModel
@testable import KeychainSecretService
import Testing

struct SecretItemMappingTests {
    @Test func libsecretServiceAndUsernameAreAGenericItem() throws {
        let key = try SecretItemMapping.key(for: ["service": "web", "username": "alice", "application": "x"])
        #expect(key == .generic(try GenericPasswordKey(service: "web", account: "alice")))
    }

    @Test func gitsSchemaIsAnInternetItem() throws {
        let key = try SecretItemMapping.key(for: ["xdg:schema": "org.git.Password", "server": "example.org", "user": "bob",
                                                  "protocol": "https", "port": "8443", "object": "repo.git"])
        #expect(key == .internet(try InternetPasswordKey(server: "example.org", port: 8443, path: "repo.git", protocol: .https,
                                                         account: "bob")))
    }

    @Test func otherSchemasGoUnderTheSchemaWithAStableName() throws {
        let a = ["xdg:schema": "org.example.Thing", "foo": "bar"]
        let key = try SecretItemMapping.key(for: a)
        guard case .generic(let g) = key else { Issue.record("not generic: \(key)"); return }
        #expect(g.service == "org.example.Thing")
        #expect(g.account.hasPrefix("item-"))
        #expect(try SecretItemMapping.key(for: a) == key)
        #expect(try SecretItemMapping.key(for: ["xdg:schema": "org.example.Thing", "foo": "baz"]) != key)
    }

    @Test func aBadPortIsRefused() {
        #expect(throws: ModelError.self) { try SecretItemMapping.key(for: ["server": "h", "port": "99999"]) }
    }

    @Test func naturalAttributesOfTreeItems() throws {
        let g = ItemKey.generic(try GenericPasswordKey(service: "s", account: "a"))
        #expect(SecretItemMapping.attributes(of: g, stored: nil) == ["service": "s", "account": "a", "username": "a"])
        let i = ItemKey.internet(try InternetPasswordKey(server: "h", account: "u"))
        let a = SecretItemMapping.attributes(of: i, stored: nil)
        #expect(a["xdg:schema"] == "org.git.Password" && a["user"] == "u" && a["port"] == "443" && a["protocol"] == "https")
    }

    @Test func storedNameFieldsFollowARename() throws {
        let renamed = ItemKey.generic(try GenericPasswordKey(service: "new", account: "bea"))
        let a = SecretItemMapping.attributes(of: renamed, stored: ["service": "old", "username": "ann", "app": "x"])
        #expect(a == ["service": "new", "username": "bea", "app": "x"])
        // A name made distinct (`ann (2)`) keeps the account its client gave.
        let distinct = ItemKey.generic(try GenericPasswordKey(service: "old", account: "ann (2)"))
        #expect(SecretItemMapping.attributes(of: distinct, stored: ["service": "old", "username": "ann"])["username"] == "ann")
        let other = ItemKey.generic(try GenericPasswordKey(service: "old", account: "ann (x)"))
        #expect(SecretItemMapping.attributes(of: other, stored: ["service": "old", "username": "ann"])["username"] == "ann (x)")
    }

    /// The model test found it: CreateItem without `replace` over an item with a 255-byte
    /// account failed, as ` (2)` made no file name; the account is cut to fit, and the item
    /// keeps the account its client gave.
    @Test func aLongNameMadeDistinctIsCutToFit() throws {
        let long = String(repeating: "x", count: 255)
        let first = ItemKey.generic(try GenericPasswordKey(service: "s", account: long))
        guard case .generic(let g) = try SecretItemMapping.disambiguated(first, 2) else { Issue.record("not generic"); return }
        #expect(g.account == String(repeating: "x", count: 251) + " (2)")
        #expect(SecretItemMapping.attributes(of: .generic(g), stored: ["service": "s", "account": long])["account"] == long)
        // Cut by characters: an escaped `/` is three bytes, a 2-byte letter is not split.
        let slashes = String(repeating: "/", count: 85)
        guard case .generic(let s) = try SecretItemMapping.disambiguated(.generic(try GenericPasswordKey(service: "s", account: slashes)), 10)
        else { Issue.record("not generic"); return }
        #expect(s.account == String(repeating: "/", count: 83) + " (10)")
        let wide = String(repeating: "ü", count: 127)
        guard case .internet(let i) = try SecretItemMapping.disambiguated(.internet(try InternetPasswordKey(server: "h", account: wide)), 3)
        else { Issue.record("not internet"); return }
        #expect(i.account == String(repeating: "ü", count: 125) + " (3)")
        // Another name that merely starts like it is not taken for it.
        let other = ItemKey.generic(try GenericPasswordKey(service: "s", account: String(repeating: "x", count: 10) + " (2)"))
        #expect(SecretItemMapping.attributes(of: other, stored: ["service": "s", "account": long])["account"] == String(repeating: "x", count: 10) + " (2)")
    }

    @Test func aStoredSchemaIsKept() throws {
        let i = ItemKey.internet(try InternetPasswordKey(server: "h", account: "u"))
        let a = SecretItemMapping.attributes(of: i, stored: ["xdg:schema": "org.gnome.keyring.NetworkPassword", "user": "old",
                                                              "server": "h", "protocol": "https"])
        #expect(a == ["xdg:schema": "org.gnome.keyring.NetworkPassword", "user": "u", "server": "h", "protocol": "https"])
    }

    @Test func extrasRoundTripAndKeepGitsLines() {
        let git = SecureBytes(copying: Array("password_expiry_utc=123\noauth_refresh_token=tok\n".utf8))
        let map = ["we=ird": "new\nline%", "ключ": "значение", "": "empty name"]
        let extras = SecretItemMapping.extras(attributes: map, contentType: "text/plain; x=y", keeping: git)
        let (decoded, type, _) = SecretItemMapping.decode(extras: extras)
        #expect(decoded == map)
        #expect(type == "text/plain; x=y")
        let text = String(decoding: extras.unprotectedArray, as: UTF8.self)
        #expect(text.hasPrefix("password_expiry_utc=123\noauth_refresh_token=tok\n"))
        // Writing again replaces ours, keeps git's.
        let again = SecretItemMapping.extras(attributes: ["a": "b"], contentType: "text/plain", keeping: extras)
        #expect(SecretItemMapping.decode(extras: again).attributes == ["a": "b"])
        #expect(String(decoding: again.unprotectedArray, as: UTF8.self).hasPrefix("password_expiry_utc=123\n"))
        #expect(SecretItemMapping.decode(extras: git).attributes == nil)
    }
}

struct SecretTransferTests {
    /// A client's side of the exchange, as libsecret does it, computed here with OpenSSL.
    @Test func dhAgreesWithAClientAndRoundTripsASecret() throws {
        let p = BN_bin2bn(SecretTransfer.prime, Int32(SecretTransfer.prime.count), nil)!
        let g = BN_new()!, a = BN_new()!, pub = BN_new()!, shared = BN_new()!, ctx = BN_CTX_new()!
        defer { [p, g, a, pub, shared].forEach { BN_free($0) }; BN_CTX_free(ctx) }
        BN_set_word(g, 2)
        BN_rand_range(a, p)
        BN_mod_exp(pub, g, a, p, ctx)
        var clientPublic = [UInt8](repeating: 0, count: 128)
        BN_bn2binpad(pub, &clientPublic, 128)
        let (serverPublic, transfer) = try SecretTransfer.negotiate(clientPublic: clientPublic)
        #expect(serverPublic.count == 128)
        let y = BN_bin2bn(serverPublic, 128, nil)!
        defer { BN_free(y) }
        BN_mod_exp(shared, y, a, p, ctx)
        let ikm = SecureBytes(count: 128)
        _ = ikm.withUnsafeMutableBytes { BN_bn2binpad(shared, $0.bindMemory(to: UInt8.self).baseAddress, 128) }
        let clientSide = SecretTransfer.aes(key: try HKDF.deriveKey(from: ikm, info: "", length: 16))

        let secret = SecureBytes(copying: [0, 1, 2, 0x0A, 0xFF] + Array("a secret of some length".utf8))
        let (iv, ciphertext) = try transfer.encode(secret)
        #expect(ciphertext.count % 16 == 0 && ciphertext.count > secret.count)
        #expect(!ciphertext.isEqual(to: secret) && !ciphertext.unprotectedArray.starts(with: secret.unprotectedArray))
        let opened = try clientSide.decode(parameters: iv, value: ciphertext)
        #expect(opened.isEqual(to: secret))
        // A wrong key fails (padding), it does not return garbage silently.
        let wrong = SecretTransfer.aes(key: SecureBytes(copying: [UInt8](repeating: 7, count: 16)))
        let garbled = try? wrong.decode(parameters: iv, value: ciphertext)
        #expect(garbled == nil || !garbled!.isEqual(to: secret))
    }

    @Test func degeneratePublicKeysAreRefused() {
        let p = SecretTransfer.prime
        var pMinus1 = p
        pMinus1[pMinus1.count - 1] -= 1
        for bad in [[0], [1], pMinus1, p, [UInt8](repeating: 0xFF, count: 129), []] as [[UInt8]] {
            #expect(throws: (any Error).self) { try SecretTransfer.negotiate(clientPublic: bad) }
        }
    }
}

struct SecretCollectionsTests {
    @Test func theRecordRoundTripsAndAlwaysHasLogin() {
        var r = SecretCollections()
        let id = r.newID(for: "Work Stuff!")
        #expect(id == "work_stuff_")
        r.collections.append(.init(id: id, label: "Work\tStuff\n=%", created: 1, modified: 2))
        r.aliases["a\tb"] = id
        #expect(SecretCollections(decoding: r.encoded()) == r)
        #expect(r.newID(for: "work stuff!") == "work_stuff_2")
        #expect(r.newID(for: "") == "collection")
        // A damaged or foreign record still has login, and no alias to a missing collection.
        let junk = SecretCollections(decoding: SecureBytes(copying: Array("x\na=dangling\tnowhere\nc=bad\n".utf8)))
        #expect(junk.ids == ["login"] && junk.aliases.isEmpty)
    }
}
