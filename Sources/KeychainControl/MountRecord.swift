import Foundation

/// What a running daemon publishes about itself, as `<runtimeDir>/<storeID>.json` (0600),
/// removed when it exits. Paths are real paths.
public struct MountRecord: Codable, Sendable, Equatable {
    public var pid: Int32
    public var storePath: String
    public var mountpoint: String
    public var socketPath: String

    public init(pid: Int32, storePath: String, mountpoint: String, socketPath: String) {
        self.pid = pid; self.storePath = storePath; self.mountpoint = mountpoint; self.socketPath = socketPath
    }
}
