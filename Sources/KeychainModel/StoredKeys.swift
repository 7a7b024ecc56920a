extension GenericPasswordKey {
    /// A key as a store already holds it, taken as it is, so that an item saved under older
    /// rules can still be listed and deleted. New keys go through the validating initializer.
    package init(storedService service: String, account: String, accessGroup: String) {
        self.service = service
        self.account = account
        self.accessGroup = accessGroup
    }
}

extension InternetPasswordKey {
    /// A key as a store already holds it, taken as it is (see `GenericPasswordKey`).
    package init(storedServer server: String, port: UInt16, path: String, protocol proto: InternetProtocol,
                 authenticationType: AuthenticationType, securityDomain: String, account: String,
                 accessGroup: String) {
        self.server = server
        self.port = port
        self.path = path
        self.protocol = proto
        self.authenticationType = authenticationType
        self.securityDomain = securityDomain
        self.account = account
        self.accessGroup = accessGroup
    }
}
