// Not all of Foundation: it would link CoreFoundation and ICU into the small clients.
#if canImport(FoundationEssentials)
import FoundationEssentials
import Glibc
#else
import Foundation
#endif
import GitCredential
import KeychainClient
import KeychainControlProtocol
import KeychainCrypto
import KeychainModel

/// `git-credential-keychainfs get|store|erase`: git's credential helper protocol over the
/// internet passwords of the mounted keychain (the default store, or `KEYCHAINFS_STORE`).
///
/// It acts through the daemon, found from the store path whatever the environment, so the
/// mount stays the one source of truth; it never opens the store itself (and links neither
/// GRDB nor SQLite). Without a mount, or with the keychain locked, `get` prints nothing,
/// `store`/`erase` change nothing, and one line on stderr says why: git shows it, so the user
/// learns why they were asked for a password. On anything else (no match, input it cannot
/// serve, a daemon it cannot reach or of another version) it is silent.
@main
enum GitCredentialHelper {
    static func main() {
        guard let argument = CommandLine.arguments.dropFirst().first else { return }
        switch argument {
        case "--help", "-h":
            StandardStream.write(Array(usage.utf8), to: 1)
            return
        case "--version":
            StandardStream.write(Array("git-credential-keychainfs \(ControlProtocol.softwareVersion)\n".utf8), to: 1)
            return
        default: break
        }
        guard let action = CredentialAction(argument: argument) else { return }
        // A store path from a variable that is not UTF-8 would be another store's.
        if let name = CommandArguments.firstVariableNotUTF8() {
            return note("the keychain was not asked: \(CommandArguments.variableNotUTF8Message(name))")
        }
        // The daemon identifies this process as it accepts a connection (per-program access),
        // which it cannot once the process is non-dumpable: so the daemon is found (the
        // connection kept for the first call) before the helper hardens.
        let found: Result<(RemoteKeychainService, MountRecord)?, any Error>
        do { found = .success(try DaemonLocator.daemon(forStore: KeychainLocations.store())) }
        catch KeychainError.noSuchStore { found = .success(nil) }
        catch { found = .failure(error) }
        // `store` reads a password from git, `get` receives one from the daemon: before either,
        // none of the user's other processes may read this one's memory.
        ProcessProtection.makeNotDumpable()
        // Into locked memory, wiped on exit: the request may hold a password.
        let input: SecureBytes
        switch Descriptor.readSecretToEnd(0, limit: maxRequestBytes) {
        case .complete(let bytes): input = bytes
        case .tooLarge(let total): return note("the request was not read: it is \(total) bytes, more than a secret can be (16 MiB)")
        case .failed: return
        }
        defer { input.wipe() }
        // A request the helper would not serve gets no note, but a credential git asks it to
        // store that it cannot keep (an item name too long, a bad port or host, a protocol it
        // does not know): git would go on believing it saved, and ask for it every time.
        guard let request = try? CredentialRequest(parsing: input) else { return }
        if case .store = action, case .failure(let error) = Result(catching: { () throws(CredentialError) in
            try CredentialStoreRequest(request: request)
        }) {
            switch error {
            case .invalidItem(.nameTooLong(let why)): return note("the credential was not saved: \(why)")
            case .unsupportedProtocol, .invalidHost, .invalidPort: return note("the credential was not saved: \(error)")
            case .malformedLine, .missingField, .invalidItem, .unprintable: return
            }
        }
        if case .store = action, let password = request.password, password.count > maxSecretBytes {
            return note("the credential was not saved: the password is \(password.count) bytes, more than a secret can be (16 MiB)")
        }
        guard isServable(request, action) else { return }
        guard case .success(let located) = found else { return }
        let notMounted = "the keychain is not mounted, so \(consequence(action)); run 'keychainfs mount DIR'"
        guard let (keychain, _) = located else { return note(notMounted) }
        let status: KeychainStatus
        do { status = try keychain.status() }
        catch KeychainError.notMounted { return note(notMounted) }
        catch { return }
        // Locked (or before first unlock) means no answer and no change, even for items
        // whose class would allow it: the store would still delete while locked.
        guard status.state == .unlocked else {
            note("the keychain is locked, so \(consequence(action)); run 'keychainfs unlock'")
            return
        }
        switch action {
        case .get: get(request, keychain)
        case .store: store(request, keychain)
        case .erase: erase(request, keychain)
        }
    }

    /// A secret's limit and room for the rest of the request.
    static let maxRequestBytes = maxSecretBytes + 64 * 1024

    static let usage = """
        usage: git-credential-keychainfs get|store|erase

        A git credential helper that keeps git's credentials as internet passwords in the
        mounted keychainfs keychain (the store named by KEYCHAINFS_STORE, else the default
        one). Set it up with:

            git config --global credential.helper keychainfs

        git runs it with the action and the credential on standard input. When the keychain
        is not mounted or is locked, it answers nothing, changes nothing, and writes one line
        to standard error saying so. See git-credential-keychainfs(1) and gitcredentials(7).

        """

    private static func isServable(_ request: CredentialRequest, _ action: CredentialAction) -> Bool {
        switch action {
        case .get, .erase: (try? CredentialQuery(request: request)) != nil
        case .store: (try? CredentialStoreRequest(request: request)) != nil
        }
    }

    private static func consequence(_ action: CredentialAction) -> String {
        switch action {
        case .get: "git has to ask for the credential"
        case .store: "the credential was not saved"
        case .erase: "the credential was not erased"
        }
    }

    /// One line, as git passes the helper's stderr through to the user.
    private static func note(_ text: String) {
        StandardStream.write(Array("git-credential-keychainfs: \(text)\n".utf8), to: 2)
    }

    /// The items of git's kind that may match: the canonical variants on that server and port.
    static func candidates(_ query: CredentialQuery, _ keychain: KeychainService, withSecrets: Bool) -> [FoundItem] {
        let itemQuery = ItemQuery(kind: .internet, account: query.account, server: query.server, port: query.port,
                                  path: query.path, protocol: query.protocol, authenticationType: .default,
                                  securityDomain: "")
        let found = (try? keychain.find(query: itemQuery, withSecrets: withSecrets)) ?? []
        return found.filter { item in
            guard case .internet(let key) = item.record.key else { return false }
            return query.matches(key: key)
        }
    }

    static func get(_ request: CredentialRequest, _ keychain: KeychainService) {
        guard let query = try? CredentialQuery(request: request),
              let item = candidates(query, keychain, withSecrets: true).first,
              let secret = try? item.secretBytes(),
              let out = try? CredentialResponse.format(account: item.record.key.account, secret: secret,
                                                       extras: extras(of: item))
        else { return }
        out.withUnsafeBytes { StandardStream.write($0, to: 1) }
        out.wipe()
        secret.wipe()
    }

    /// The sealed extras; an item stored by an earlier version kept them in `generic`.
    static func extras(of item: FoundItem) -> CredentialExtras {
        if let sealed = item.extras { return CredentialExtras(decoding: sealed) }
        return CredentialExtras(legacy: item.record.attributes.generic)
    }

    static func store(_ request: CredentialRequest, _ keychain: KeychainService) {
        guard let stored = try? CredentialStoreRequest(request: request) else { return }
        let secret = stored.password
        // Extras are sealed like the password (empty drops earlier ones); `generic` is emptied of
        // any an earlier version kept there in the clear.
        let extras = stored.extras.encode()
        let key = ItemKey.internet(stored.key)
        // An update changes the secret and the extras, and keeps every other attribute.
        do {
            _ = try keychain.save(key: key, secret: secret, extras: extras, changes: stored.attributeChanges(updating: nil),
                                  updateExisting: false)
        } catch KeychainError.duplicateItem {
            let existing = (try? keychain.find(query: .exactly(key), withSecrets: false, limit: 1))?.first?.record.attributes
            _ = try? keychain.save(key: key, secret: secret, extras: extras,
                                   changes: stored.attributeChanges(updating: existing ?? ItemAttributes()), updateExisting: true)
        } catch {}
    }

    static func erase(_ request: CredentialRequest, _ keychain: KeychainService) {
        guard let query = try? CredentialQuery(request: request) else { return }
        for item in candidates(query, keychain, withSecrets: request.password != nil) {
            guard case .internet(let key) = item.record.key else { continue }
            let secret = try? item.secretBytes()
            defer { secret?.wipe() }
            // The exact key matches at most this one item.
            if request.erases(key: key, secret: secret) {
                _ = try? keychain.delete(query: .exactly(item.record.key), all: false)
            }
        }
    }
}

/// Standard input and output with read(2) and write(2): FileHandle would link the whole of
/// Foundation, and its start-up, into a helper git runs for every credential.
enum StandardStream {
    static func write(_ bytes: [UInt8], to fd: Int32) {
        bytes.withUnsafeBytes { write($0, to: fd) }
    }

    static func write(_ raw: UnsafeRawBufferPointer, to fd: Int32) {
        var offset = 0
        while offset < raw.count {
            let n = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
            if n < 0 { if errno == EINTR { continue }; return }
            offset += n
        }
    }

}
