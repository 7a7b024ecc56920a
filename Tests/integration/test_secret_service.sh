#!/bin/sh
# The Secret Service (mount --secret-service) with real clients on a private session bus:
# secret-tool, python secretstorage and keyring, busctl, raw calls through jeepney; every item
# also read through the tree and the CLI. The bus has no service files, so nothing (such as
# gnome-keyring) is activated in keychainfs's place.
. "$(dirname "$0")/private_bus.sh"

. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export PASSFILE
MNT="$TEST_ROOT/mnt"
mkdir -p "$MNT"
init_store
on_exit_unmount "$MNT"
expect_exit 0 "mount --secret-service" kc mount "$MNT" --secret-service --passphrase-file "$PASSFILE"

# busctl shows the specified interfaces.
busctl --user introspect org.freedesktop.secrets /org/freedesktop/secrets >"$OUT" 2>&1
expect_contains "$OUT" "org.freedesktop.Secret.Service" "busctl introspect: Service"
expect_contains "$OUT" ".OpenSession" "busctl introspect: OpenSession"
busctl --user introspect org.freedesktop.secrets /org/freedesktop/secrets/collection/login >"$OUT" 2>&1
expect_contains "$OUT" "org.freedesktop.Secret.Collection" "busctl introspect: Collection"
expect_contains "$OUT" ".CreateItem" "busctl introspect: CreateItem"
expect_contains "$OUT" ".ItemCreated" "busctl introspect: ItemCreated"

# secret-tool: store, lookup, search, clear.
printf 'hunter2\nsecond line' | secret-tool store --label='Web login' service web username alice
expect_eq 0 $? "secret-tool store"
expect_eq "$(printf 'hunter2\nsecond line')" "$(secret-tool lookup service web username alice)" "secret-tool lookup"
expect_eq "$(printf 'hunter2\nsecond line')" "$(cat "$MNT/web/alice")" "secret-tool's item is the file web/alice"
expect_eq "$(printf 'hunter2\nsecond line')" "$(kc find-generic-password -s web -a alice -w)" "and the CLI finds it"
kc find-generic-password -s web -a alice >"$OUT" 2>&1
expect_contains "$OUT" "Web login" "its label is the item's label"
secret-tool search --all --unlock service web >"$OUT" 2>&1
expect_contains "$OUT" "label = Web login" "secret-tool search --all --unlock: label"
expect_contains "$OUT" "attribute.username = alice" "secret-tool search: attributes"
expect_contains "$OUT" "secret = hunter2" "secret-tool search --unlock: secret"
item=$(busctl --user call org.freedesktop.secrets /org/freedesktop/secrets org.freedesktop.Secret.Service \
    SearchItems 'a{ss}' 2 service web username alice | sed -n 's/^aoao 1 "\([^"]*\)".*/\1/p')
busctl --user introspect org.freedesktop.secrets "$item" >"$OUT" 2>&1
expect_contains "$OUT" "org.freedesktop.Secret.Item" "busctl introspect of an item: Item"
expect_contains "$OUT" ".GetSecret" "busctl introspect of an item: GetSecret"
busctl --user tree org.freedesktop.secrets >"$OUT" 2>&1
expect_contains "$OUT" "$item" "busctl tree lists the item"
printf 'v2' | secret-tool store --label='Web login' service web username alice
expect_eq "v2" "$(cat "$MNT/web/alice")" "secret-tool store again replaces the same item"

# An item made through the tree and one through the CLI, looked up by their natural attributes.
mkdir "$MNT/treesvc" && printf 'from-tree' >"$MNT/treesvc/tom"
expect_eq "from-tree" "$(secret-tool lookup service treesvc account tom)" "a tree item over D-Bus (service, account)"
kc add-internet-password -s git.example.org -a gina -r htps -w git-secret >/dev/null
expect_eq "git-secret" "$(secret-tool lookup xdg:schema org.git.Password server git.example.org user gina protocol https)" \
    "an internet item carries git's org.git.Password attributes"
expect_eq "git-secret" "$(secret-tool lookup server git.example.org port 443 protocol https)" "and server/port/protocol"

# git's own libsecret helper (built from the source Debian's git ships) and ours find each
# other's credentials.
GCL="$TEST_ROOT/git-credential-libsecret"
GCK=$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs
src=/usr/share/doc/git/contrib/credential/libsecret/git-credential-libsecret.c
if gcc -o "$GCL" "$src" $(pkg-config --cflags --libs libsecret-1 glib-2.0) 2>"$ERR"; then
    printf 'protocol=https\nhost=code.example.com\nusername=lib\npassword=from-libsecret\n\n' | "$GCL" store >/dev/null
    printf 'protocol=https\nhost=code.example.com\n\n' | "$GCK" get >"$OUT"
    expect_contains "$OUT" "password=from-libsecret" "git-credential-libsecret store, git-credential-keychainfs get"
    expect_contains "$OUT" "username=lib" "with its user"
    expect_eq "from-libsecret" "$(cat "$MNT/internet/code.example.com/443/lib")" "and it is the internet item's file"
    printf 'protocol=https\nhost=other.example.com\nusername=kc\npassword=from-keychainfs\n\n' | "$GCK" store
    printf 'protocol=https\nhost=other.example.com\n\n' | "$GCL" get >"$OUT"
    expect_contains "$OUT" "password=from-keychainfs" "git-credential-keychainfs store, git-credential-libsecret get"
    printf 'protocol=https\nhost=code.example.com\nusername=lib\n\n' | "$GCL" erase >/dev/null
    expect_exit 44 "git-credential-libsecret erase removes it" kc find-internet-password -s code.example.com -a lib
else
    fail "cannot build git-credential-libsecret (libsecret-1-dev)"
    show_output
fi

secret-tool clear service web username alice
expect_eq 0 $? "secret-tool clear"
expect_exit 1 "secret-tool clear removes the file at once (test -e)" test -e "$MNT/web/alice"
expect_not_contains "$(ls "$MNT/web")" "alice" "and ls does not list it"
expect_exit 44 "and the CLI no longer finds it" kc find-generic-password -s web -a alice

run_py() {
    step=$1
    $PY "$TESTS_DIR/secret_service.py" "$step" "$MNT" "$KEYCHAINFS_BIN" >"$TEST_ROOT/py.out" 2>&1
    code=$?
    while IFS= read -r line; do
        case $line in
            "ok   "*) pass "$step: ${line#ok   }" ;;
            "FAIL "*) fail "$step: ${line#FAIL }" ;;
            *) printf '     %s\n' "$line" ;;
        esac
    done <"$TEST_ROOT/py.out"
    [ $code -eq 0 ] || grep -q '^FAIL' "$TEST_ROOT/py.out" || fail "$step: the script failed (exit $code)"
}
run_py secretstorage
run_py aliases
run_py plain
run_py signals
run_py keyring
run_py concurrent
run_py lock
run_py busy
if [ "$(id -u)" -eq 0 ]; then
    run_py memory
else
    skip "memory: what crosses the bus is wiped" "needs root: the daemon is not dumpable, so only root reads its memory"
fi
run_py collections
run_py uncommitted
# Sealed: no collection label or alias, and no attribute value, in the store's files.
for f in "$KEYCHAINFS_STORE" "$KEYCHAINFS_STORE-wal"; do
    [ -f "$f" ] || continue
    for needle in "Work Stuff" Renamed worktest collections-test-value work_stuff; do
        if strings "$f" | grep -q "$needle"; then fail "'$needle' in clear in $f"; else pass "'$needle' not in clear in ${f##*/}"; fi
    done
done
sqlite3 "$KEYCHAINFS_STORE" "SELECT name FROM meta" >"$OUT" 2>&1
expect_contains "$OUT" "sealed.secret-service.collections" "the collections are a sealed record in the store"

# The name is never taken from its owner: a second mount with --secret-service says who has it.
STORE2="$TEST_ROOT/second.db"
MNT2="$TEST_ROOT/mnt2"
mkdir -p "$MNT2"
init_store --store "$STORE2"
on_exit_unmount "$MNT2"
expect_exit 70 "a second --secret-service mount is refused" kc mount "$MNT2" --store "$STORE2" --secret-service --passphrase-file "$PASSFILE"
expect_contains "$ERR" "already served on the session bus by" "it names the owner"
expect_contains "$ERR" "systemctl --user mask" "and says how to switch"
expect_eq "v2" "$(printf 'v2' | secret-tool store --label=x service after username a && secret-tool lookup service after username a)" \
    "the first mount still serves"

kc unmount "$MNT2" >/dev/null 2>&1
kc unmount "$MNT" >/dev/null 2>&1

# Collections and aliases outlive the daemon; before first unlock items are listed, locked.
expect_exit 0 "mount --locked --secret-service" kc mount "$MNT" --locked --secret-service
run_py collections_after
kc unmount "$MNT" >/dev/null 2>&1

# Unlock through a configured pinentry (a scripted one).
export PINENTRY_DIR="$TEST_ROOT/pinentry"
mkdir -p "$PINENTRY_DIR" "$XDG_CONFIG_HOME/keychainfs"
cp "$TESTS_DIR/fake_pinentry.sh" "$PINENTRY_DIR/pinentry"
chmod 755 "$PINENTRY_DIR/pinentry"
printf '%s' "$PASSPHRASE" >"$PINENTRY_DIR/passphrase"
printf '[access]\npinentry = "%s"\nprompt-timeout = 7\n' "$PINENTRY_DIR/pinentry" >"$XDG_CONFIG_HOME/keychainfs/config.toml"
expect_exit 0 "mount with [access] pinentry" kc mount "$MNT" --secret-service --passphrase-file "$PASSFILE"
run_py prompt
# The passphrase came through pinentry's D line (and through --passphrase-file at mount):
# none of it is left anywhere in the daemon's memory (read as root reads any process's).
# The wrong one is looked for as pinentry sent it (escaped) and as unescaped.
scanned="after a pinentry unlock, no passphrase it answered is in the daemon's memory"
if [ "$(id -u)" -ne 0 ]; then
    skip "$scanned" "needs root: the daemon is not dumpable, so only root reads its memory"
else
    pid=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$KEYCHAINFS_STORE.daemon")
    python3 "$TESTS_DIR/memscan.py" "$pid" --context "passphrase=$PASSPHRASE" "wrong=not%the" "sent=not%25the" >"$OUT" 2>"$ERR"
    case $? in
        0) pass "$scanned" ;;
        1) fail "$scanned" "$(cat "$OUT")" ;;
        *) fail "$scanned" "the scan failed: $(cat "$ERR")" ;;
    esac
fi
kc unmount "$MNT" >/dev/null 2>&1
rm "$XDG_CONFIG_HOME/keychainfs/config.toml"
# Nothing of the daemon's reaches the prompt program: its standard input and output are its
# own socket, the rest is the shell's (the script, the file it writes, a command
# substitution's pipe).
cat "$PINENTRY_DIR/fds" >"$OUT"
expect_contains "$OUT" "stdin -> socket:" "the prompt program ran, on a socket of its own"
expect_eq "" "$(grep -v '^stdin -> ' "$OUT" | grep -E 'socket:|/dev/fuse')" "it was given no socket or FUSE device of the daemon's"
expect_eq "" "$(grep -v "$PINENTRY_DIR/" "$OUT" | grep "$TEST_ROOT/")" "nor any file of the store's"

echo "== items a crash left with their index entries waiting are found after it, through the mount"
# A create's entries wait in attribute_pending until commits pause (0.1 s after it); a daemon
# killed before then leaves them there. The next mount finds the items by search, before the
# first unlock and after it, and moves the entries at the unlock.
STORE4="$TEST_ROOT/crash.db"
kc init --store "$STORE4" --passphrase-file "$PASSFILE" --scrypt-log-n 10 >/dev/null
export KEYCHAINFS_STORE="$STORE4"
expect_exit 0 "mount a new store with --secret-service" kc mount "$MNT" --secret-service --passphrase-file "$PASSFILE"
pid=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$STORE4.daemon")
mkdir "$MNT/crashsvc" && printf 'a' >"$MNT/crashsvc/ann" && printf 'b' >"$MNT/crashsvc/bob" && kill -9 "$pid"
wait_gone() { i=0; while kill -0 "$1" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done; }
wait_gone "$pid"
fusermount3 -u -z "$MNT" 2>/dev/null
pending=$(sqlite3 -readonly "$STORE4" "SELECT COUNT(*) FROM attribute_pending" 2>&1)
expect_eq 1 "$([ "$pending" -gt 0 ] 2>/dev/null && echo 1)" "the kill left the creates' index entries waiting ($pending)"
# found SERVICE: how many items a SearchItems for service=SERVICE returns, unlocked and locked.
found() {
    busctl --user call org.freedesktop.secrets /org/freedesktop/secrets org.freedesktop.Secret.Service \
        SearchItems 'a{ss}' 1 service "$1" 2>&1 | grep -o '/org/freedesktop/secrets/[^"]*' | grep -c .
}
expect_exit 0 "mount it again before the first unlock" kc mount "$MNT" --secret-service --locked
expect_eq 2 "$(found crashsvc)" "a search before the first unlock finds both items"
expect_exit 0 "unlock" kc unlock --passphrase-file "$PASSFILE"
expect_eq 2 "$(found crashsvc)" "and after it"
expect_eq "a b" "$(secret-tool lookup service crashsvc account ann) $(secret-tool lookup service crashsvc account bob)" \
    "secret-tool looks them up"
expect_eq 0 "$(sqlite3 -readonly "$STORE4" "SELECT COUNT(*) FROM attribute_pending")" "the unlock moved the entries into the index"
kc unmount "$MNT" >/dev/null 2>&1

# A store with no passphrase: Unlock needs no prompt.
STORE3="$TEST_ROOT/nopass.db"
kc init --store "$STORE3" --no-passphrase >/dev/null
expect_exit 0 "mount a store with no passphrase, --secret-service" kc mount "$MNT" --store "$STORE3" --secret-service
export KEYCHAINFS_STORE="$STORE3"
run_py nopass
kc unmount "$MNT" >/dev/null 2>&1
finish
