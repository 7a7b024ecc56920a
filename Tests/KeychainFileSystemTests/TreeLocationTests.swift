import XCTest
@testable import KeychainFileSystem
import KeychainModel

final class TreeLocationTests: XCTestCase {
    func testGenericPaths() throws {
        XCTAssertEqual(try TreeLocation.parse("/"), .root)
        XCTAssertEqual(try TreeLocation.parse("/github"), .service("github"))
        XCTAssertEqual(try TreeLocation.parse("/github/alice"), .genericItem(service: "github", account: "alice"))
        XCTAssertEqual(try TreeLocation.parse("/a%2Fb/%25"), .genericItem(service: "a/b", account: "%"))
        XCTAssertEqual(try TreeLocation.parse("/%69nternet"), .service("internet"))
        XCTAssertEqual(try TreeLocation.parse("/svc/%"), .genericItem(service: "svc", account: ""))
        XCTAssertEqual(try TreeLocation.parse("/svc/%2E%2E"), .genericItem(service: "svc", account: ".."))
    }

    func testGenericPathErrors() {
        XCTAssertThrowsError(try TreeLocation.parse("/svc/acct/more")) { XCTAssertEqual($0 as? FileSystemError, .notDirectory) }
        XCTAssertThrowsError(try TreeLocation.parse("/svc/100%")) { XCTAssertEqual($0 as? FileSystemError, .invalid) }
        XCTAssertThrowsError(try TreeLocation.parse("/" + String(repeating: "x", count: 256))) {
            XCTAssertEqual($0 as? FileSystemError, .nameTooLong)
        }
    }

    func testInternetPaths() throws {
        XCTAssertEqual(try TreeLocation.parse("/internet"), .internetRoot)
        XCTAssertEqual(try TreeLocation.parse("/internet/github.com"), .server("github.com"))
        XCTAssertEqual(try TreeLocation.parse("/internet/github.com/443"), .port(server: "github.com", port: 443))
        XCTAssertEqual(try TreeLocation.parse("/internet/github.com/443/alice"),
                       .internetEntry(server: "github.com", port: 443, parent: [], name: "alice"))
        XCTAssertEqual(try TreeLocation.parse("/internet/h/8443/a/b/bob%~ssh"),
                       .internetEntry(server: "h", port: 8443, parent: ["a", "b"], name: "bob%~ssh"))
    }

    func testBadPortsAreEINVAL() {
        for port in ["0", "65536", "abc", "-1", "+80", "080x"] {
            XCTAssertThrowsError(try TreeLocation.parse("/internet/h/\(port)"), port) {
                XCTAssertEqual($0 as? FileSystemError, .invalid)
            }
        }
    }

    func testServiceFileNames() {
        XCTAssertEqual(TreeLocation.serviceFileName("internet"), "%69nternet")
        XCTAssertEqual(TreeLocation.serviceFileName("a/b"), "a%2Fb")
        XCTAssertEqual(TreeLocation.serviceFileName("."), "%2E")
    }

    /// The FUSE binding finds a child's location from its directory's, never parsing a path:
    /// it must name what `parse` of the joined path names, and fail where `parse` fails.
    func testChildIsParseOfTheJoinedPath() throws {
        let directories = ["/", "/internet", "/svc", "/svc/acct", "/internet/h.example", "/internet/h.example/443",
                           "/internet/h.example/443/a%2Fb", "/internet/h.example/443/docs/sub"]
        let names = ["internet", "%69nternet", "a b", ".dot", "ünï", "a%2Fb", "bad%zz", "443", "0", "x%~ssh",
                     String(repeating: "x", count: 255), String(repeating: "x", count: 256)]
        for dir in directories {
            for name in names {
                let joined = dir == "/" ? "/" + name : dir + "/" + name
                let viaParse = Result { () throws(FileSystemError) in try TreeLocation.parse(joined) }
                let viaChild = Result { () throws(FileSystemError) in try TreeLocation.parse(dir).child(name) }
                XCTAssertEqual(viaChild, viaParse, "\(dir) + \(name)")
            }
        }
    }

    /// The kernel caches only the spellings the tree lists (the daemon tells it of changes under
    /// those); every other spelling a lookup accepts is an alias.
    func testListedSpellingsAndAliases() throws {
        func listed(_ path: String, directory: Bool = false) throws -> Bool {
            try TreeLocation.parse(path).isListedSpelling(String(path.split(separator: "/").last!), isDirectory: directory)
        }
        XCTAssertTrue(try listed("/github/Alice"))
        XCTAssertFalse(try listed("/github/%41lice"))
        XCTAssertTrue(try listed("/github/a%2Fb"))
        XCTAssertFalse(try listed("/github/a%2fb"), "lower-case hex")
        XCTAssertTrue(try listed("/%69nternet", directory: true))
        XCTAssertFalse(try listed("/%67ithub", directory: true))
        XCTAssertTrue(try listed("/internet/example.org", directory: true))
        XCTAssertFalse(try listed("/internet/%65xample.org", directory: true))
        XCTAssertTrue(try listed("/internet/example.org/22/u"))
        XCTAssertTrue(try listed("/internet/example.org/22/u%~ssh"), "the tagged name of the canonical variant")
        XCTAssertFalse(try listed("/internet/example.org/22/u%~SSH"))
        XCTAssertTrue(try listed("/internet/example.org/443/u%~https,html-form"))
        XCTAssertFalse(try listed("/internet/example.org/443/u%~https,HTML-form"))
        XCTAssertTrue(try listed("/internet/example.org/443/docs", directory: true))
        XCTAssertFalse(try listed("/internet/example.org/443/%64ocs", directory: true))
    }
}

