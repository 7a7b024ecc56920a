import Foundation
import XCTest
@testable import KeychainModel

/// PathText stands in for NSString's path methods in the small clients: it must answer as they do.
final class PathTextTests: XCTestCase {
    /// Paths as the clients meet them (NSString itself traps on "" and on "a").
    private let paths = ["/a/b", "/a/b/", "/a", "/", "a/b", "/a/b//", "/tmp/x.db", "/run/user/0/keychainfs/1f.sock"]

    func testParentIsDeletingLastPathComponent() {
        for p in paths {
            XCTAssertEqual(PathText.parent(p), (p as NSString).deletingLastPathComponent, p)
        }
        XCTAssertEqual(PathText.parent("/a/b"), "/a")
        XCTAssertEqual(PathText.parent("/a"), "/")
        XCTAssertEqual(PathText.parent("a"), "")
        XCTAssertEqual(PathText.parent(""), "")
        XCTAssertEqual(PathText.lastComponent("a"), "a")
    }

    func testLastComponentIsLastPathComponent() {
        for p in paths {
            XCTAssertEqual(PathText.lastComponent(p), (p as NSString).lastPathComponent, p)
        }
    }

    func testStandardizedResolvesDotsByName() {
        XCTAssertEqual(PathText.standardized("/a/./b/../c"), "/a/c")
        XCTAssertEqual(PathText.standardized("//a//b/"), "/a/b")
        XCTAssertEqual(PathText.standardized("/../a"), "/a")
        XCTAssertEqual(PathText.standardized("/"), "/")
    }

    /// A `/` followed by a combining mark is one Swift character with it; the kernel splits there all the same.
    func testPathsSplitOnBytesBeforeACombiningMark() {
        let mark = "\u{301}"
        XCTAssertEqual(PathText.split("/a/\(mark)b//c"), ["a", "\(mark)b", "c"])
        XCTAssertEqual(PathText.split("x,\(mark)y,,z", on: UInt8(ascii: ","), maxSplits: 2, omittingEmpty: false), ["x", "\(mark)y", ",z"])
        XCTAssertEqual(PathText.parent("/a/\(mark)b"), "/a")
        XCTAssertEqual(PathText.lastComponent("/a/\(mark)b/"), "\(mark)b")
        XCTAssertEqual(PathText.standardized("/a/\(mark)b/../c"), "/a/c")
        XCTAssertEqual(PathText.parent("/\(mark)"), "/")
    }

    func testHexIsPaddedLowercase() {
        XCTAssertEqual(PathText.hex(UInt8(0x0a), width: 2), "0a")
        XCTAssertEqual(PathText.hex(UInt64(0xfe), width: 2), "fe")
        XCTAssertEqual(PathText.hex(UInt64(0x1234), width: 2), "1234")
        for b in [0, 1, 15, 16, 200, 255] as [UInt8] {
            XCTAssertEqual(PathText.hex(b, width: 2), String(format: "%02x", b))
        }
    }
}
