#!/bin/sh
# gnome-keyring is the reference for the Secret Service: secretstorage's own test suite (3.3.3,
# its tests/ from the sdist on PyPI, fetched at run time, never committed) and python keyring's own backend tests
# (keyring.testing.backend) run against `gnome-keyring-daemon --components=secrets` and against
# a keychainfs mount with --secret-service, each on a private bus, in the same run. Every test
# that passes on gnome-keyring must pass on keychainfs.
if [ -z "${KCFS_PRIVATE_BUS:-}" ]; then
    . "$(dirname "$0")/lib.sh"
    conf="$TESTS_DIR/session_bus.conf"
    # secretstorage's own suite, as released: the sdist's tests/ directory (not in Debian's package).
    (cd "$TEST_ROOT" && /usr/bin/python3 -m pip download -q --no-deps --no-binary :all: secretstorage==3.3.3 \
        && tar xzf SecretStorage-3.3.3.tar.gz && mv SecretStorage-3.3.3/tests secretstorage_suite) >"$TEST_ROOT/pip.txt" 2>&1 \
        || { fail "secretstorage 3.3.3's test suite is fetched from PyPI"; sed 's/^/     /' "$TEST_ROOT/pip.txt" | tail -5; finish; }
    export TEST_ROOT PASSFILE KEYCHAINFS_BIN
    on_exit_unmount "$TEST_ROOT/mnt"
    KCFS_PRIVATE_BUS=gnome-keyring dbus-run-session --config-file="$conf" -- sh "$0" >"$TEST_ROOT/gnome.txt" 2>&1
    KCFS_PRIVATE_BUS=keychainfs dbus-run-session --config-file="$conf" -- sh "$0" >"$TEST_ROOT/keychainfs.txt" 2>&1
    passed_on() { grep -E ' \.\.\. ok$|^PASSED ' "$1" | sed -E 's/ \.\.\. ok$//; s/^PASSED //' | sort; }
    passed_on "$TEST_ROOT/gnome.txt" >"$TEST_ROOT/gnome.ok"
    passed_on "$TEST_ROOT/keychainfs.txt" >"$TEST_ROOT/keychainfs.ok"
    n=$(wc -l <"$TEST_ROOT/gnome.ok")
    [ "$n" -ge 30 ] && pass "gnome-keyring passes $n reference tests" || {
        fail "gnome-keyring passed only $n reference tests"; sed 's/^/     /' "$TEST_ROOT/gnome.txt" | tail -30; }
    while IFS= read -r t; do
        if grep -qxF "$t" "$TEST_ROOT/keychainfs.ok"; then pass "keychainfs: $t"; else
            fail "keychainfs: $t (passes on gnome-keyring)"
            grep -F "${t%% *}" "$TEST_ROOT/keychainfs.txt" | sed 's/^/     /' | head -5
        fi
    done <"$TEST_ROOT/gnome.ok"
    finish
fi

# Inside a private bus: serve with one, then run both suites.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "$KCFS_PRIVATE_BUS" = gnome-keyring ]; then
    export HOME="$TEST_ROOT/gk-home"
    mkdir -p "$HOME"
    # --unlock makes an unlocked login keyring from the password on stdin, as a login does.
    printf 'pw' | gnome-keyring-daemon --foreground --unlock --components=secrets >"$TEST_ROOT/gk.log" 2>&1 &
    SERVER=$!
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        busctl --user status org.freedesktop.secrets >/dev/null 2>&1 && break
        sleep 0.5
    done
else
    MNT="$TEST_ROOT/mnt"
    mkdir -p "$MNT"
    "$KEYCHAINFS_BIN" init --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
    "$KEYCHAINFS_BIN" mount "$MNT" --secret-service --passphrase-file "$PASSFILE" || echo "mount failed"
fi
cd "$HERE"
(cd "$TEST_ROOT" && /usr/bin/python3 -m unittest discover -s secretstorage_suite -t . -p 'test_*.py' -v 2>&1)
/usr/bin/python3 -m pytest -rA -p no:cacheprovider keyring_backend_test.py 2>&1
if [ "$KCFS_PRIVATE_BUS" = gnome-keyring ]; then
    kill "$SERVER"
    wait "$SERVER" 2>/dev/null
else
    "$KEYCHAINFS_BIN" unmount "$MNT"
fi
