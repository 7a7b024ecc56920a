#!/bin/sh
# The sync folder is private from its creation whatever the umask: every directory keychainfs
# or git makes in it is 0700 and every file 0600 (`sync init`, a device's first files, `sync
# git`'s .git, and the other devices' directories a git merge checks out).
# Engine-free but for git: two stores with no daemon, a bare repository as the remote.
. "$(dirname "$0")/lib.sh"

have git || { fail "git is installed (scripts/install-deps)"; finish; }

T=$TEST_ROOT
P="--passphrase-file $PASSFILE"
SYNCPASS="$T/sync-pass"
printf 'the sync passphrase\n' >"$SYNCPASS"
S="--sync-passphrase-file $SYNCPASS"
REMOTE="$T/remote.git"
FA="$T/folder-a" FB="$T/folder-b"

mkdir -p "$T/b/home" "$T/b/data" "$T/b/state" "$T/b/config" "$T/b/run"
chmod 700 "$T/b/run"
kcb() {
    HOME="$T/b/home" XDG_DATA_HOME="$T/b/data" XDG_STATE_HOME="$T/b/state" XDG_CONFIG_HOME="$T/b/config" \
        XDG_RUNTIME_DIR="$T/b/run" KEYCHAINFS_STORE="$T/b/data/keychainfs/keychain.db" "$KEYCHAINFS_BIN" "$@"
}

# private DIR WHAT: nothing under DIR (itself included) has a group or other permission bit.
private() {
    open=$(find "$1" -perm /077 -printf '%m %P\n' 2>&1 | head -20)
    if [ -z "$open" ]; then pass "$2"; else fail "$2" "open to others:" "$open"; fi
}

init_store
kcb init --scrypt-log-n 10 $P >/dev/null
git init -q --bare --initial-branch=main "$REMOTE"
# The widest umask: nothing the commands make may depend on it.
umask 000

echo "== sync init and a device's first files"
kc add-generic-password $P -s mail -a alice -w 'alice-secret' --synchronizable >/dev/null
expect_exit 0 "sync init" kc sync init "$FA" $P $S --scrypt-log-n 10
private "$FA" "the folder, devices/, the device's directory, its items/ and every file are private"
expect_eq "700" "$(stat -c %a "$FA/devices/"*)" "the device's own directory is 0700"

echo "== sync git"
expect_exit 0 "A: sync git REMOTE" kc sync git "$REMOTE" $P
[ -d "$FA/.git" ] && pass "the folder is a git work tree" || fail "the folder is a git work tree"
expect_eq "600 600" "$(stat -c %a "$FA/.git/info/exclude" "$FA/.git/info/attributes" | tr '\n' ' ' | sed 's/ $//')" \
    "the ignore rules and attributes it writes in .git/info are 0600"
private "$FA" "after sync git: .git and the devices' files are private"

echo "== a second device: a clone (as the README says), join, sync git"
(umask 077 && git clone -q "$REMOTE" "$FB") 2>/dev/null
expect_exit 0 "B: sync join" kcb sync join "$FB" $P $S
kcb add-generic-password $P -s mail -a bob -w 'bob-secret' --synchronizable >/dev/null
expect_exit 0 "B: sync git REMOTE" kcb sync git "$REMOTE" $P
expect_eq "alice-secret" "$(kcb find-generic-password $P -s mail -a alice -w)" "A's item arrived on B"
private "$FB" "B's folder is private"
expect_exit 0 "A: sync git REMOTE again" kc sync git "$REMOTE" $P
expect_eq "bob-secret" "$(kc find-generic-password $P -s mail -a bob -w)" "B's item arrived on A (a git merge)"
expect_eq "2" "$(ls "$FA/devices" | wc -l)" "A's folder holds both devices' directories"
private "$FA" "the directory and files git checked out for B's device are private on A"
finish
