import COpenSSL
import KeychainCrypto
import XCTest

final class ScryptTests: XCTestCase {
    /// RFC 7914 §12, first vector: N = 16 (logN = 4), r = 1, p = 1, empty password and salt.
    func testRFC7914EmptyPasswordVector() throws {
        let key = try Scrypt.deriveKey(passphrase: SecureBytes(), salt: [],
                                       parameters: ScryptParameters(logN: 4, r: 1, p: 1), length: 64)
        XCTAssertEqual(key.unprotectedArray, hex("""
            77 d6 57 62 38 65 7b 20 3b 19 ca 42 c1 8a 04 97 f1 6b 48 44 e3 07 4a e8 df df fa 3f ed e2 14 42
            fc d0 06 9d ed 09 48 f8 32 6a 75 3a 0f c8 1f 17 e8 d3 e0 fb 2e 0d 36 28 cf 35 e2 0c 38 d1 89 06
            """))
    }

    /// RFC 7914 §12, second vector: "password" / "NaCl", N = 1024 (logN = 10), r = 8, p = 16.
    func testRFC7914PasswordNaClVector() throws {
        let key = try Scrypt.deriveKey(passphrase: secure("password"), salt: Array("NaCl".utf8),
                                       parameters: ScryptParameters(logN: 10, r: 8, p: 16), length: 64)
        XCTAssertEqual(key.unprotectedArray, hex("""
            fd ba be 1c 9d 34 72 00 78 56 e7 19 0d 01 e9 fe 7c 6a d7 cb c8 23 78 30 e7 73 76 63 4b 37 31 62
            2e af 30 d9 2e 22 a3 88 6f f1 09 27 9d 98 30 da c7 27 af b9 4a 83 ee 6d 83 60 cb df a2 cc 06 40
            """))
    }

    /// The derivation is keychainfs's own (the passphrase stays in locked memory); every store,
    /// backup and sync folder made with OpenSSL's must still open. Passphrases of every length
    /// around HMAC's block (64 bytes: a longer one is hashed first), salts of the sizes used.
    func testSameKeysAsOpenSSL() throws {
        for (length, logN) in [(0, 10), (1, 11), (31, 10), (63, 10), (64, 12), (65, 10), (200, 10), (4096, 10)] {
            let passphrase = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let salt = (0..<(length % 3 == 0 ? 16 : 32)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let ours = try Scrypt.deriveKey(passphrase: SecureBytes(copying: passphrase), salt: salt,
                                            parameters: ScryptParameters(logN: UInt8(logN)), length: 32 + length % 40)
            var theirs = [UInt8](repeating: 0, count: 32 + length % 40)
            // OpenSSL wants a non-null pointer even for an empty passphrase.
            let padded = passphrase.map { CChar(bitPattern: $0) } + [0]
            let rc = EVP_PBE_scrypt(padded, passphrase.count, salt, salt.count, 1 << UInt64(logN), 8, 1, 0,
                                    &theirs, theirs.count)
            XCTAssertEqual(rc, 1)
            XCTAssertEqual(ours.unprotectedArray, theirs, "a \(length)-byte passphrase, log N \(logN)")
        }
    }

    func testParametersOutOfRangeAreRefused() {
        XCTAssertThrowsError(try Scrypt.deriveKey(passphrase: secure("pw"), salt: [1], parameters: ScryptParameters(logN: 40)))
        XCTAssertThrowsError(try Scrypt.deriveKey(passphrase: secure("pw"), salt: [1], parameters: ScryptParameters(logN: 10, r: 0)))
    }

    func testDefaultLengthIsAnAESKey() throws {
        let key = try Scrypt.deriveKey(passphrase: secure("pw"), salt: [1, 2, 3], parameters: ScryptParameters(logN: 10))
        XCTAssertEqual(key.count, AESGCM.keyBytes)
    }

    func testSaltAndPassphraseChangeTheKey() throws {
        let p = ScryptParameters(logN: 10)
        let a = try Scrypt.deriveKey(passphrase: secure("pw"), salt: [1], parameters: p)
        let b = try Scrypt.deriveKey(passphrase: secure("pw"), salt: [2], parameters: p)
        let c = try Scrypt.deriveKey(passphrase: secure("pX"), salt: [1], parameters: p)
        let a2 = try Scrypt.deriveKey(passphrase: secure("pw"), salt: [1], parameters: p)
        XCTAssertFalse(a.isEqual(to: b))
        XCTAssertFalse(a.isEqual(to: c))
        XCTAssertTrue(a.isEqual(to: a2))
    }

    func testParameterBounds() {
        XCTAssertTrue(ScryptParameters.default.isAcceptable)
        XCTAssertTrue(ScryptParameters(logN: 10).isAcceptable)
        XCTAssertTrue(ScryptParameters(logN: 22).isAcceptable)
        XCTAssertFalse(ScryptParameters(logN: 22, r: 32, p: 16).isAcceptable, "init never writes r or p other than 8 and 1")
        XCTAssertFalse(ScryptParameters(logN: 10, r: 9).isAcceptable)
        XCTAssertFalse(ScryptParameters(logN: 10, p: 2).isAcceptable)
        XCTAssertFalse(ScryptParameters(logN: 4, r: 1, p: 1).isAcceptable)
        XCTAssertFalse(ScryptParameters(logN: 9).isAcceptable)
        XCTAssertFalse(ScryptParameters(logN: 23).isAcceptable)
        XCTAssertFalse(ScryptParameters(logN: 10, r: 0).isAcceptable)
        XCTAssertFalse(ScryptParameters(logN: 10, r: 33).isAcceptable)
        XCTAssertFalse(ScryptParameters(logN: 10, p: 0).isAcceptable)
        XCTAssertFalse(ScryptParameters(logN: 10, p: 17).isAcceptable)
    }
}

final class HMACSHA256Tests: XCTestCase {
    /// RFC 4231 test case 1.
    func testRFC4231Case1() {
        let mac = HMACSHA256.authenticate(Array("Hi There".utf8), key: secure([UInt8](repeating: 0x0b, count: 20)))
        XCTAssertEqual(mac, hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"))
    }

    /// RFC 4231 test case 2.
    func testRFC4231Case2() {
        let mac = HMACSHA256.authenticate(Array("what do ya want for nothing?".utf8), key: secure("Jefe"))
        XCTAssertEqual(mac, hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"))
    }

    /// RFC 4231 test case 6: a key longer than a block is hashed first.
    func testRFC4231Case6LongKey() {
        let mac = HMACSHA256.authenticate(Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
                                          key: secure([UInt8](repeating: 0xaa, count: 131)))
        XCTAssertEqual(mac, hex("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"))
    }

    /// The MAC is computed over a digest fetched once (not OpenSSL's one-shot `HMAC()`): the
    /// same answers as OpenSSL's for keys and messages of every length around a block, empty
    /// ones included, through both forms.
    func testMatchesOpenSSLsHMACAroundABlock() {
        for keyLength in [0, 1, 20, 32, 63, 64, 65, 100] {
            let key = (0..<keyLength).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            for n in [0, 1, 31, 55, 56, 63, 64, 65, 119, 200] {
                let message = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ keyLength) }
                var want = [UInt8](repeating: 0, count: 32)
                var len: UInt32 = 32
                _ = HMAC(EVP_sha256(), key, Int32(key.count), message, message.count, &want, &len)
                let k = secure(key)
                XCTAssertEqual(HMACSHA256.authenticate(message, key: k), want, "key \(keyLength), message \(n)")
                XCTAssertEqual(message.withUnsafeBytes { HMACSHA256.authenticate(raw: $0, key: k) }, want, "raw: key \(keyLength), message \(n)")
            }
        }
    }
}

final class HKDFTests: XCTestCase {
    /// RFC 5869 test case 3: SHA-256 with zero-length salt and info, which is exactly the
    /// shape our HKDF has (it always uses an empty salt).
    func testRFC5869Case3() throws {
        let okm = try HKDF.deriveKey(from: secure([UInt8](repeating: 0x0b, count: 22)), info: "", length: 42)
        XCTAssertEqual(okm.unprotectedArray,
                       hex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"))
    }

    func testInfoSeparatesKeys() throws {
        let ikm = SecureRandom.bytes(32)
        let a = try HKDF.deriveKey(from: ikm, info: "keychainfs metadata")
        let b = try HKDF.deriveKey(from: ikm, info: "keychainfs passphrase+device")
        XCTAssertEqual(a.count, 32)
        XCTAssertFalse(a.isEqual(to: b))
    }
}

final class SHA256Tests: XCTestCase {
    func testABC() {
        XCTAssertEqual(SHA256Digest.hash(Array("abc".utf8)),
                       hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
    }

    func testEmpty() {
        XCTAssertEqual(SHA256Digest.hash([]),
                       hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"))
    }
}
