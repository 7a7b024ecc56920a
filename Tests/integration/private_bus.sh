# Sourced first by the Secret Service tests: re-runs the calling script, once, on a private
# session bus (dbus-run-session with session_bus.conf: no service files, so nothing such as
# gnome-keyring is activated in keychainfs's place), and exits with its status.
if [ -z "${KCFS_PRIVATE_BUS:-}" ]; then
    KCFS_PRIVATE_BUS=1 dbus-run-session --config-file="$(dirname "$0")/session_bus.conf" -- sh "$0" "$@"
    exit $?
fi
