// Users of the library need the model and SecureBytes; one import brings them.
@_exported import KeychainCrypto
@_exported import KeychainModel
@_exported import KeychainBatch
