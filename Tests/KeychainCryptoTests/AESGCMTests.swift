import KeychainCrypto
import XCTest

/// Known answers from McGrew & Viega, "The Galois/Counter Mode of Operation", test cases 13–16
/// (the 256-bit-key cases).
final class AESGCMTests: XCTestCase {
    struct Vector {
        var name: String
        var key: [UInt8]
        var nonce: [UInt8]
        var plaintext: [UInt8]
        var aad: [UInt8]
        var ciphertext: [UInt8]
        var tag: [UInt8]
        var sealed: [UInt8] { nonce + ciphertext + tag }
    }

    static let key15 = hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
    static let plain15 = hex("""
        d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72
        1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255
        """)
    static let cipher15 = hex("""
        522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa
        8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad
        """)

    static let vectors: [Vector] = [
        Vector(name: "13", key: [UInt8](repeating: 0, count: 32), nonce: [UInt8](repeating: 0, count: 12),
               plaintext: [], aad: [], ciphertext: [], tag: hex("530f8afbc74536b9a963b4f1c4cb738b")),
        Vector(name: "14", key: [UInt8](repeating: 0, count: 32), nonce: [UInt8](repeating: 0, count: 12),
               plaintext: [UInt8](repeating: 0, count: 16), aad: [],
               ciphertext: hex("cea7403d4d606b6e074ec5d3baf39d18"), tag: hex("d0d1c8a799996bf0265b98b5d48ab919")),
        Vector(name: "15", key: key15, nonce: hex("cafebabefacedbaddecaf888"), plaintext: plain15, aad: [],
               ciphertext: cipher15, tag: hex("b094dac5d93471bdec1a502270e3cc6c")),
        Vector(name: "16", key: key15, nonce: hex("cafebabefacedbaddecaf888"), plaintext: Array(plain15.prefix(60)),
               aad: hex("feedfacedeadbeeffeedfacedeadbeefabaddad2"),
               ciphertext: Array(cipher15.prefix(60)), tag: hex("76fc6ece0f4e1768cddf8853bb2d551b")),
    ]

    func testSealMatchesKnownAnswers() throws {
        for v in Self.vectors {
            let sealed = try v.plaintext.withUnsafeBytes {
                try AESGCM.seal($0, key: secure(v.key), aad: v.aad, nonce: v.nonce)
            }
            XCTAssertEqual(sealed, v.sealed, "test case \(v.name)")
        }
    }

    func testOpenRecoversKnownPlaintexts() throws {
        for v in Self.vectors {
            let opened = try AESGCM.open(v.sealed, key: secure(v.key), aad: v.aad)
            XCTAssertEqual(opened.unprotectedArray, v.plaintext, "test case \(v.name)")
        }
    }

    func testFlippingAnyByteOfNonceCiphertextOrTagFails() {
        let v = Self.vectors[3]
        for i in v.sealed.indices {
            var bad = v.sealed
            bad[i] ^= 0x01
            XCTAssertThrowsError(try AESGCM.open(bad, key: secure(v.key), aad: v.aad), "byte \(i)") { error in
                XCTAssertEqual(error as? CryptoError, .authenticationFailed)
            }
        }
    }

    func testFlippingAnyByteOfAADFails() {
        let v = Self.vectors[3]
        for i in v.aad.indices {
            var bad = v.aad
            bad[i] ^= 0x80
            XCTAssertThrowsError(try AESGCM.open(v.sealed, key: secure(v.key), aad: bad), "aad byte \(i)") { error in
                XCTAssertEqual(error as? CryptoError, .authenticationFailed)
            }
        }
    }

    func testMissingOrExtraAADFails() {
        let with = Self.vectors[3], without = Self.vectors[2]
        XCTAssertThrowsError(try AESGCM.open(with.sealed, key: secure(with.key), aad: [])) {
            XCTAssertEqual($0 as? CryptoError, .authenticationFailed)
        }
        XCTAssertThrowsError(try AESGCM.open(without.sealed, key: secure(without.key), aad: [1])) {
            XCTAssertEqual($0 as? CryptoError, .authenticationFailed)
        }
    }

    func testWrongKeyFails() {
        let v = Self.vectors[2]
        var key = v.key
        key[31] ^= 1
        XCTAssertThrowsError(try AESGCM.open(v.sealed, key: secure(key), aad: v.aad)) {
            XCTAssertEqual($0 as? CryptoError, .authenticationFailed)
        }
    }

    func testTruncatedOrExtendedInputFails() {
        let v = Self.vectors[2]
        for bad in [Array(v.sealed.dropLast()), Array(v.sealed.prefix(27)), [], v.sealed + [0]] {
            XCTAssertThrowsError(try AESGCM.open(bad, key: secure(v.key), aad: v.aad), "\(bad.count) bytes") {
                XCTAssertEqual($0 as? CryptoError, .authenticationFailed)
            }
        }
    }

    func testKeyOfWrongLengthIsMalformed() {
        let v = Self.vectors[2]
        XCTAssertThrowsError(try AESGCM.open(v.sealed, key: secure(Array(v.key.prefix(16))), aad: v.aad)) {
            XCTAssertEqual($0 as? CryptoError, .malformed)
        }
    }

    func testRandomNonceSealRoundTripsAndDiffersEachTime() throws {
        let key = SecureRandom.bytes(AESGCM.keyBytes)
        let plain = secure("correct horse battery staple")
        let aad = Array("item|1".utf8)
        let a = try AESGCM.seal(plain, key: key, aad: aad)
        let b = try AESGCM.seal(plain, key: key, aad: aad)
        XCTAssertEqual(a.count, plain.count + AESGCM.overhead)
        XCTAssertNotEqual(a, b)
        XCTAssertNotEqual(a.prefix(12), b.prefix(12))
        XCTAssertTrue(try AESGCM.open(a, key: key, aad: aad).isEqual(to: plain))
        XCTAssertTrue(try AESGCM.open(b, key: key, aad: aad).isEqual(to: plain))
    }

    func testEmptyPlaintextRoundTrips() throws {
        let key = SecureRandom.bytes(AESGCM.keyBytes)
        let sealed = try AESGCM.seal(SecureBytes(), key: key, aad: [1, 2, 3])
        XCTAssertEqual(sealed.count, AESGCM.overhead)
        XCTAssertEqual(try AESGCM.open(sealed, key: key, aad: [1, 2, 3]).count, 0)
    }

    /// `openUnlocked` opens what `open` opens, into a buffer handed to its body, and refuses
    /// the same damage.
    func testOpenUnlockedMatchesOpen() throws {
        let key = SecureBytes(copying: Self.key15)
        for size in [0, 1, 100, 5000] {
            let plain = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let sealed = try plain.withUnsafeBytes { try AESGCM.seal($0, key: key, aad: [9]) }
            XCTAssertEqual(try AESGCM.openUnlocked(sealed, key: key, aad: [9]) { Array($0) }, plain)
            XCTAssertThrowsError(try AESGCM.openUnlocked(sealed, key: key, aad: [8]) { _ in XCTFail("opened") })
            var flipped = sealed
            flipped[flipped.count - 1] ^= 1
            XCTAssertThrowsError(try AESGCM.openUnlocked(flipped, key: key, aad: [9]) { _ in XCTFail("opened") })
        }
        XCTAssertThrowsError(try AESGCM.openUnlocked(Array(repeating: 0, count: AESGCM.overhead - 1), key: key, aad: []) { _ in })
    }
}
