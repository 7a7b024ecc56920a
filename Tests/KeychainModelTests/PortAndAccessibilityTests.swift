import KeychainModel
import XCTest

final class InternetPortTests: XCTestCase {
    func testValidPortsParse() throws {
        XCTAssertEqual(try InternetPort.parse("1"), 1)
        XCTAssertEqual(try InternetPort.parse("443"), 443)
        XCTAssertEqual(try InternetPort.parse("65535"), 65535)
    }

    func testZeroIsRefusedUnlessUnspecifiedIsAllowed() throws {
        XCTAssertThrowsError(try InternetPort.parse("0"))
        XCTAssertEqual(try InternetPort.parse("0", allowUnspecified: true), 0)
    }

    func testBadPortsAreRefused() {
        for bad in ["65536", "99999", "100000", "abc", "+1", " 1", "1 ", "-1", "", "1.0", "0x10", "١"] {
            XCTAssertThrowsError(try InternetPort.parse(bad), "'\(bad)' should be refused") { error in
                guard case ModelError.invalid = error else { return XCTFail("\(error)") }
            }
        }
    }

    /// A port directory has one name, the one the tree lists: `0443` is not `443` again.
    func testAPortDirectoryNameHasNoLeadingZeros() throws {
        XCTAssertEqual(try InternetPort.parseDirectoryName("443"), 443)
        XCTAssertEqual(try InternetPort.parse("0443"), 443)
        for bad in ["0443", "00443", "0", "00", "01"] {
            XCTAssertThrowsError(try InternetPort.parseDirectoryName(bad), "'\(bad)' should be refused")
        }
    }
}

final class AccessibilityClassTests: XCTestCase {
    /// The table in DESIGN §2: before first unlock, unlocked, locked.
    private let table: [AccessibilityClass: (Bool, Bool, Bool)] = [
        .always: (true, true, true),
        .alwaysThisDeviceOnly: (true, true, true),
        .afterFirstUnlock: (false, true, true),
        .afterFirstUnlockThisDeviceOnly: (false, true, true),
        .whenUnlocked: (false, true, false),
        .whenUnlockedThisDeviceOnly: (false, true, false),
        .whenPasscodeSetThisDeviceOnly: (false, true, false),
    ]

    func testTableCoversEveryClass() {
        XCTAssertEqual(Set(table.keys), Set(AccessibilityClass.allCases))
    }

    func testAvailabilityBeforeFirstUnlock() {
        for (c, row) in table { XCTAssertEqual(c.isAvailable(in: .beforeFirstUnlock), row.0, c.rawValue) }
    }

    func testAvailabilityWhenUnlocked() {
        for (c, row) in table { XCTAssertEqual(c.isAvailable(in: .unlocked), row.1, c.rawValue) }
    }

    func testAvailabilityWhenLocked() {
        for (c, row) in table { XCTAssertEqual(c.isAvailable(in: .locked), row.2, c.rawValue) }
    }

    func testThisDeviceOnlyClasses() {
        let expected: Set<AccessibilityClass> = [.whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly,
                                                 .alwaysThisDeviceOnly, .whenPasscodeSetThisDeviceOnly]
        XCTAssertEqual(Set(AccessibilityClass.allCases.filter(\.isThisDeviceOnly)), expected)
    }

    func testCodesAreStableAndRoundTrip() {
        XCTAssertEqual(AccessibilityClass.allCases.map(\.code), [1, 2, 3, 4, 5, 6, 7])
        for c in AccessibilityClass.allCases { XCTAssertEqual(AccessibilityClass(code: c.code), c) }
        XCTAssertNil(AccessibilityClass(code: 0))
        XCTAssertNil(AccessibilityClass(code: 8))
    }

    func testParsingNamesAndDefault() throws {
        XCTAssertEqual(AccessibilityClass.default, .whenUnlocked)
        for c in AccessibilityClass.allCases { XCTAssertEqual(try AccessibilityClass(parsing: c.rawValue), c) }
        XCTAssertThrowsError(try AccessibilityClass(parsing: "sometimes"))
        XCTAssertThrowsError(try AccessibilityClass(parsing: "When-Unlocked"))
    }
}

/// The class of an item created in the tree: the strictest of the mount's default and its directory.
final class NewItemClassTests: XCTestCase {
    func c(_ d: AccessibilityClass, _ siblings: [AccessibilityClass]) -> AccessibilityClass {
        AccessibilityClass.forNewItem(mountDefault: d, siblings: siblings)
    }

    func testAnEmptyDirectoryTakesTheMountDefault() {
        for d in AccessibilityClass.allCases { XCTAssertEqual(c(d, []), d) }
    }

    func testOneThisDeviceOnlySiblingMakesItThisDeviceOnly() {
        XCTAssertEqual(c(.whenUnlocked, [.whenUnlocked, .whenUnlockedThisDeviceOnly]), .whenUnlockedThisDeviceOnly)
        XCTAssertEqual(c(.whenUnlocked, [.alwaysThisDeviceOnly]), .whenUnlockedThisDeviceOnly, "and keeps the stricter tier")
        XCTAssertEqual(c(.always, [.alwaysThisDeviceOnly]), .alwaysThisDeviceOnly)
        XCTAssertEqual(c(.afterFirstUnlock, [.alwaysThisDeviceOnly]), .afterFirstUnlockThisDeviceOnly)
        XCTAssertEqual(c(.whenUnlocked, [.whenPasscodeSetThisDeviceOnly]), .whenPasscodeSetThisDeviceOnly)
    }

    func testTheMostRestrictiveTierWins() {
        XCTAssertEqual(c(.always, [.afterFirstUnlock]), .afterFirstUnlock)
        XCTAssertEqual(c(.always, [.always, .whenUnlocked]), .whenUnlocked)
        XCTAssertEqual(c(.whenUnlocked, [.always]), .whenUnlocked, "a sibling never weakens the default")
        XCTAssertEqual(c(.whenUnlockedThisDeviceOnly, [.always]), .whenUnlockedThisDeviceOnly)
    }

    func testNeverWeakerThanAnyInput() {
        for d in AccessibilityClass.allCases {
            for s in AccessibilityClass.allCases {
                let r = c(d, [s])
                for input in [d, s] {
                    XCTAssertTrue(!input.isThisDeviceOnly || r.isThisDeviceOnly, "\(d) \(s) → \(r)")
                    XCTAssertTrue(input.isAvailable(in: .locked) || !r.isAvailable(in: .locked), "\(d) \(s) → \(r)")
                    XCTAssertTrue(input.isAvailable(in: .beforeFirstUnlock) || !r.isAvailable(in: .beforeFirstUnlock))
                }
            }
        }
    }
}
