// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif

/// What a running daemon publishes about itself, as `<store>.daemon` beside the store (0600),
/// removed when it exits. Paths are real paths. JSON with these keys; readers ignore keys they
/// do not know, so that any version can read any other's record and name its version.
public struct MountRecord: Codable, Sendable, Equatable {
    public var pid: Int32
    public var storePath: String
    public var mountpoint: String
    public var socketPath: String
    /// keychainfs's version, for messages.
    public var version: String
    /// `ControlProtocol.version` of the daemon; a client of another one refuses to talk to it.
    public var protocolVersion: UInt16

    public init(pid: Int32, storePath: String, mountpoint: String, socketPath: String,
                version: String = ControlProtocol.softwareVersion, protocolVersion: UInt16 = ControlProtocol.version) {
        self.pid = pid; self.storePath = storePath; self.mountpoint = mountpoint; self.socketPath = socketPath
        self.version = version; self.protocolVersion = protocolVersion
    }

    enum CodingKeys: String, CodingKey {
        case pid, storePath, mountpoint, socketPath, version
        case protocolVersion = "protocol"
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        pid = try c.decode(Int32.self, forKey: .pid)
        storePath = try c.decode(String.self, forKey: .storePath)
        mountpoint = try c.decode(String.self, forKey: .mountpoint)
        socketPath = try c.decode(String.self, forKey: .socketPath)
        version = try c.decodeIfPresent(String.self, forKey: .version) ?? "unknown"
        protocolVersion = try c.decodeIfPresent(UInt16.self, forKey: .protocolVersion) ?? 0
    }
}
