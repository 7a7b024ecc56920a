// The routes' common vocabulary (`KeychainService`, `FoundItem`, ...) and the daemon's client
// come with this module, whose API is made of them.
@_exported import KeychainClient
@_exported import KeychainControlProtocol
@_exported import KeychainBatch
