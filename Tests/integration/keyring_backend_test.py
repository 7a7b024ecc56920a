"""python keyring's own backend tests (keyring.testing.backend.BackendBasicTests, as its
tests/backends/test_SecretService.py uses them) against whatever serves the session bus's
org.freedesktop.secrets: test_secret_service_reference.sh runs it against gnome-keyring and
keychainfs."""
from keyring.backends import SecretService
from keyring.testing.backend import BackendBasicTests


class TestSecretServiceKeyring(BackendBasicTests):
    __test__ = True

    def init_keyring(self):
        return SecretService.Keyring()
