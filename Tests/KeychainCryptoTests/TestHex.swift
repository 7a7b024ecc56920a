import KeychainCrypto

func hex(_ s: String) -> [UInt8] {
    let chars = Array(s.filter { !$0.isWhitespace })
    precondition(chars.count % 2 == 0)
    return stride(from: 0, to: chars.count, by: 2).map { UInt8(String(chars[$0...$0 + 1]), radix: 16)! }
}

func secure(_ bytes: [UInt8]) -> SecureBytes { SecureBytes(copying: bytes) }
func secure(_ text: String) -> SecureBytes { SecureBytes(copying: Array(text.utf8)) }
