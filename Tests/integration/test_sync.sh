#!/bin/sh
# Sync across devices (issue 20), engine-free: two stores on one machine, each with its own XDG
# directories, device key (and later daemon and mount), syncing through a shared folder on the
# same disk. First the synchronizable attribute, then `sync` through the CLI.
. "$(dirname "$0")/lib.sh"

T=$TEST_ROOT
P="--passphrase-file $PASSFILE"
SYNCPASS="$T/sync-pass"
printf 'the sync passphrase\n' >"$SYNCPASS"
S="--sync-passphrase-file $SYNCPASS"
FOLDER="$T/folder"

# device_dirs NAME: the directories of another device under $T/NAME (its data and state are
# made by init, or copied from A's for a copy of A). kc_as NAME ARGS...: keychainfs as that
# device: its own HOME and XDG directories, so its own store, device key, config and runtime dir.
device_dirs() {
    mkdir -p "$T/$1/home" "$T/$1/config" "$T/$1/run"
    chmod 700 "$T/$1/run"
}
kc_as() {
    kc_as_dir="$T/$1"
    shift
    HOME="$kc_as_dir/home" XDG_DATA_HOME="$kc_as_dir/data" XDG_STATE_HOME="$kc_as_dir/state" \
        XDG_CONFIG_HOME="$kc_as_dir/config" XDG_RUNTIME_DIR="$kc_as_dir/run" \
        KEYCHAINFS_STORE="$kc_as_dir/data/keychainfs/keychain.db" "$KEYCHAINFS_BIN" "$@"
}

# device_of COMMAND ARGS...: the device id `COMMAND sync status --json ARGS` names (COMMAND is
# kc or a device's kc_as wrapper).
device_of() {
    device_of_kc=$1
    shift
    $device_of_kc sync status --json "$@" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["device"])'
}

# Device B.
device_dirs b
kcb() { kc_as b "$@"; }

init_store
kcb init --scrypt-log-n 10 $P >/dev/null

echo "== the synchronizable attribute"
expect_exit 0 "add --synchronizable" kc add-generic-password $P -s mail -a alice -w 'alice-secret-1' --synchronizable
expect_contains "$(kc find-generic-password $P -s mail -a alice)" "synchronizable: yes" "find prints synchronizable: yes"
expect_exit 78 "--synchronizable on a this-device-only item: 78" \
    kc add-generic-password $P -s mail -a local -w x --synchronizable --accessible when-unlocked-this-device-only
expect_contains "$ERR" "an item of class 'when-unlocked-this-device-only' cannot be synchronizable" "the refusal says why"
expect_exit 44 "nothing was added" kc find-generic-password $P -s mail -a local
kc add-generic-password $P -s mail -a local -w 'local-only-secret' --accessible when-unlocked-this-device-only
expect_exit 78 "-U --synchronizable on a this-device-only item: 78" \
    kc add-generic-password $P -U -s mail -a local -w y --synchronizable
expect_eq "local-only-secret" "$(kc find-generic-password $P -s mail -a local -w)" "and it did not change"
expect_exit 78 "making a synchronizable item this-device-only: 78" \
    kc add-generic-password $P -U -s mail -a alice -w z --accessible always-this-device-only
expect_eq "alice-secret-1" "$(kc find-generic-password $P -s mail -a alice -w)" "and it did not change"
expect_exit 0 "--no-synchronizable" kc add-generic-password $P -s mail -a plain -w 'plain-secret' --no-synchronizable
expect_contains "$(kc find-generic-password $P -s mail -a plain)" "synchronizable: no" "find prints synchronizable: no"
expect_contains "$(kc dump-keychain $P --json)" '"synchronizable" : true' "dump --json carries it"
# config.toml's default applies to new items whose class may travel.
mkdir -p "$XDG_CONFIG_HOME/keychainfs"
printf 'default-synchronizable = true\n' >"$XDG_CONFIG_HOME/keychainfs/config.toml"
kc add-generic-password $P -s mail -a bob -w 'bob-secret'
expect_contains "$(kc find-generic-password $P -s mail -a bob)" "synchronizable: yes" "the configured default applies"
expect_exit 0 "the default never makes a this-device-only add fail" \
    kc add-generic-password $P -s mail -a local2 -w 'local-two' --accessible always-this-device-only
expect_not_contains "$(kc find-generic-password $P -s mail -a local2)" "synchronizable: yes" "and does not apply there"
printf 'default-synchronizable = "sometimes"\n' >"$XDG_CONFIG_HOME/keychainfs/config.toml"
expect_exit 65 "a bad default-synchronizable: 65" kc mount "$T/nowhere" $P
rm "$XDG_CONFIG_HOME/keychainfs/config.toml"
# export and import carry it.
kc export "$T/a.kcb" $P --backup-passphrase-file "$SYNCPASS" --scrypt-log-n 10 >/dev/null
init_store --store "$T/imported.db"
kc import "$T/a.kcb" --store "$T/imported.db" $P --backup-passphrase-file "$SYNCPASS" >/dev/null
expect_contains "$(kc find-generic-password --store "$T/imported.db" $P -s mail -a alice)" "synchronizable: yes" "import carries it"
expect_contains "$(kc find-generic-password --store "$T/imported.db" $P -s mail -a plain)" "synchronizable: no" "import carries no too"

echo "== sync init, join, now"
expect_exit 0 "sync init" kc sync init "$FOLDER" $P $S --scrypt-log-n 10
expect_eq "700" "$(stat -c %a "$FOLDER")" "the folder sync init makes is private (0700)"
expect_eq "600" "$(stat -c %a "$FOLDER/sync.key")" "its key envelope is 0600"
expect_exit 48 "sync init on a folder that has a key envelope: 48" kcb sync init "$FOLDER" $P $S --scrypt-log-n 10
expect_contains "$ERR" "is a sync folder already" "it says what the folder is"
expect_contains "$ERR" "keychainfs sync join $FOLDER" "and that it is joined instead"
expect_exit 48 "sync init on it with no terminal and no sync passphrase: 48, not asked" kcb sync init "$FOLDER" $P </dev/null
printf 'wrong\n' >"$T/wrong-pass"
expect_exit 51 "sync join with a wrong passphrase: 51" kcb sync join "$FOLDER" $P --sync-passphrase-file "$T/wrong-pass"
expect_exit 69 "and B does not sync" kcb sync status $P
mkdir -p "$T/planted/devices"; ln -s /dev/zero "$T/planted/sync.key"
expect_exit 93 "sync join of a folder whose sync.key is a symlink to /dev/zero: refused (93), not read forever" \
    env HOME="$T/b/home" XDG_DATA_HOME="$T/b/data" XDG_STATE_HOME="$T/b/state" XDG_CONFIG_HOME="$T/b/config" \
    XDG_RUNTIME_DIR="$T/b/run" KEYCHAINFS_STORE="$T/b/data/keychainfs/keychain.db" timeout 30 "$KEYCHAINFS_BIN" sync join "$T/planted" $P $S
expect_exit 69 "and B does not sync" kcb sync status $P
expect_exit 65 "sync join --tombstone-days 0: 65" kcb sync join "$FOLDER" $P $S --tombstone-days 0
expect_exit 0 "sync join" kcb sync join "$FOLDER" $P $S --tombstone-days 30
expect_eq "2592000" "$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tombstoneExpiry"])' "$T/b/data/keychainfs/keychain.db.sync.json")" "--tombstone-days is kept for this device"
expect_eq "600" "$(stat -c %a "$T/b/data/keychainfs/keychain.db.sync.json")" "the local sync state is 0600"
dev_b=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["device"])' "$T/b/data/keychainfs/keychain.db.sync.json")
expect_eq "700 600" "$(stat -c %a "$FOLDER/devices/$dev_b") $(stat -c %a "$FOLDER/devices/$dev_b/state")" "a device's own directory is 0700, its files 0600"
expect_eq "alice-secret-1" "$(kcb find-generic-password $P -s mail -a alice -w)" "A's synchronizable item is on B"
expect_eq "bob-secret" "$(kcb find-generic-password $P -s mail -a bob -w)" "every one of them"
expect_exit 44 "a this-device-only item is not" kcb find-generic-password $P -s mail -a local
expect_exit 44 "nor an item not synchronizable" kcb find-generic-password $P -s mail -a plain

echo "== nothing in clear in the folder"
for needle in alice-secret bob-secret local-only-secret plain-secret mail alice bob local plain 'sync passphrase' keychainfs-sync; do
    if grep -rqa -- "$needle" "$FOLDER"; then fail "no '$needle' in the folder's files"; else pass "no '$needle' in the folder's files"; fi
    if find "$FOLDER" | grep -q -- "$needle"; then fail "no '$needle' in the folder's names"; else pass "no '$needle' in the folder's names"; fi
done

echo "== edits, deletes and conflicts"
kcb add-generic-password $P -U -s mail -a alice -w 'alice-secret-2'
expect_exit 0 "sync now on B" kcb sync now $P
expect_contains "$OUT" "published 1" "B published its change"
expect_exit 0 "sync now on A" kc sync now $P
expect_eq "alice-secret-2" "$(kc find-generic-password $P -s mail -a alice -w)" "B's edit is on A"
kc delete-generic-password $P -s mail -a bob >/dev/null
kc sync now $P >/dev/null; kcb sync now $P >/dev/null
expect_exit 44 "A's delete went to B" kcb find-generic-password $P -s mail -a bob
kc add-generic-password $P -U -s mail -a alice -w 'from-a'
kcb add-generic-password $P -U -s mail -a alice -w 'from-b'
kc sync now $P >/dev/null; kcb sync now $P >/dev/null; kc sync now $P >/dev/null
winner=$(kc find-generic-password $P -s mail -a alice -w)
expect_eq "$winner" "$(kcb find-generic-password $P -s mail -a alice -w)" "one winner on both devices"
both="$(kc dump-keychain -d $P) $(kcb dump-keychain -d $P)"
expect_contains "$both" '"from-a"' "A's concurrent value is kept"
expect_contains "$both" '"from-b"' "B's concurrent value is kept"
expect_contains "$(kc dump-keychain $P)" 'account: alice.conflict-' "as a conflict copy beside the item"
expect_exit 0 "sync status" kc sync status $P
expect_contains "$OUT" "conflict: /mail/alice.conflict-" "sync status names the conflict copy"
expect_contains "$OUT" "pending changes: 0" "sync status: nothing pending"
expect_exit 0 "sync status --json" kc sync status --json $P
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["devices"])==2 and len(d["conflicts"])==1, d' "$OUT" \
    && pass "sync status --json: two devices, one conflict" || fail "sync status --json: two devices, one conflict" "$(cat "$OUT")"
kc add-generic-password $P -U -s mail -a alice -w 'after-the-conflict'
expect_contains "$(kc sync status $P)" "pending changes: 1" "a local change is pending until the next exchange"

echo "== a name held on one device by an item that does not sync"
kcb add-generic-password $P -s held -a me -w b-local --no-synchronizable
kc add-generic-password $P -s held -a me -w a-synced --synchronizable
kc sync now $P >/dev/null
expect_exit 0 "sync now on B" kcb sync now $P
expect_contains "$OUT" "deferred 1" "the folder's item is deferred"
expect_contains "$ERR" "waiting: generic-password service \"held\" account \"me\" is an item here that does not sync" \
    "and sync now says which, and why"
expect_eq "b-local" "$(kcb find-generic-password $P -s held -a me -w)" "B's own item is as it was"
kcb add-generic-password $P -U -s held -a me -w b-local --synchronizable
kcb sync now $P >/dev/null; kc sync now $P >/dev/null; kcb sync now $P >/dev/null
expect_not_contains "$(kcb sync now $P 2>&1)" "waiting:" "made synchronizable, it merges: nothing waits"
both="$(kc dump-keychain -d $P) $(kcb dump-keychain -d $P)"
expect_contains "$both" '"a-synced"' "  A's value is kept"
expect_contains "$both" '"b-local"' "  and B's, one of them as a conflict copy"
expect_eq "$(kc find-generic-password $P -s held -a me -w)" "$(kcb find-generic-password $P -s held -a me -w)" "  one winner on both"

echo "== tampering and rollback"
kc sync now $P >/dev/null
kcb sync now $P >/dev/null
kc add-generic-password $P -U -s mail -a alice -w 'tamper-me'
kc sync now $P >/dev/null
dev_a=$(device_of kc $P)
# Every file of A is altered: B has merged all but the newest version, which it must refuse.
cp -a "$FOLDER/devices/$dev_a/items" "$T/saved-items"
for f in "$FOLDER/devices/$dev_a/items/"*; do printf 'X' | dd of="$f" bs=1 seek=30 conv=notrunc 2>/dev/null; done
expect_exit 93 "a tampered file: sync now exits 93" kcb sync now $P
expect_contains "$ERR" "does not match its manifest" "and names the refusal"
expect_contains "$(kcb sync status $P)" "refused: " "sync status shows it"
rm -r "$FOLDER/devices/$dev_a/items"; cp -a "$T/saved-items" "$FOLDER/devices/$dev_a/items"
cp -a "$FOLDER/devices/$dev_a" "$T/old-tree"
kc add-generic-password $P -U -s mail -a alice -w 'newest'
kc sync now $P >/dev/null
expect_exit 0 "the repaired file merges" kcb sync now $P
expect_eq "newest" "$(kcb find-generic-password $P -s mail -a alice -w)" "B has A's newest value"
rm -rf "$FOLDER/devices/$dev_a"; cp -a "$T/old-tree" "$FOLDER/devices/$dev_a"
expect_exit 93 "a rolled-back device directory: 93" kcb sync now $P
expect_contains "$ERR" "rolled back" "is detected"
expect_eq "newest" "$(kcb find-generic-password $P -s mail -a alice -w)" "and nothing of the old tree applies"
kc sync now $P >/dev/null 2>&1
expect_exit 0 "A writes its directory again; B merges" kcb sync now $P

echo "== what an engine or remote plants in the folder is refused, never followed"
# git carries symbolic links and a shared folder can hold anything: an exchange must not read
# /dev/zero forever, block on a FIFO, or follow a link out of the folder (nor write through one).
kcb_t() {
    HOME="$T/b/home" XDG_DATA_HOME="$T/b/data" XDG_STATE_HOME="$T/b/state" XDG_CONFIG_HOME="$T/b/config" \
        XDG_RUNTIME_DIR="$T/b/run" KEYCHAINFS_STORE="$T/b/data/keychainfs/keychain.db" timeout 30 "$KEYCHAINFS_BIN" "$@"
}
kc add-generic-password $P -U -s mail -a alice -w 'before-the-plant'
kc sync now $P >/dev/null
kcb sync now $P >/dev/null
da="$FOLDER/devices/$dev_a"
mv "$da/state" "$T/state-a"
ln -s /dev/zero "$da/state"
expect_exit 93 "a state file that is a symlink to /dev/zero: refused (93), not read forever" kcb_t sync now $P
expect_contains "$ERR" "symbolic link" "the refusal says so"
rm "$da/state"; mkfifo "$da/state"
expect_exit 93 "a state file that is a FIFO: refused (93), no exchange blocks on it" kcb_t sync now $P
expect_contains "$ERR" "not a regular file" "the refusal says so"
rm "$da/state"; mv "$T/state-a" "$da/state"
kc add-generic-password $P -U -s mail -a alice -w 'read-through-a-link'
kc sync now $P >/dev/null
# The newest version: the file named with the greatest Lamport counter (<item>.<counter>).
f=$(ls "$da/items" | sort -t. -k2,2n | tail -1)
mv "$da/items/$f" "$T/item-a"; cp "$T/item-a" "$T/outside-item"; ln -s "$T/outside-item" "$da/items/$f"
expect_exit 93 "an item file that is a symlink out of the folder: refused (93)" kcb_t sync now $P
expect_contains "$ERR" "symbolic link" "the refusal says so"
expect_eq "before-the-plant" "$(kcb find-generic-password $P -s mail -a alice -w)" "and nothing was read through it"
rm "$da/items/$f"; mv "$T/item-a" "$da/items/$f"
mv "$da" "$T/dir-a"; ln -s "$T/dir-a" "$da"
expect_exit 93 "a device directory that is a symlink out of the folder: refused (93)" kcb_t sync now $P
expect_contains "$ERR" "symbolic link" "the refusal says so"
rm "$da"; mv "$T/dir-a" "$da"
expect_exit 0 "with the folder repaired, B merges again" kcb_t sync now $P
expect_eq "read-through-a-link" "$(kcb find-generic-password $P -s mail -a alice -w)" "and has A's value"
dev_b=$(device_of kcb $P)
db="$FOLDER/devices/$dev_b"
mkdir "$T/elsewhere"
mv "$db/items" "$T/b-items"; ln -s "$T/elsewhere" "$db/items"
kcb add-generic-password $P -U -s mail -a alice -w 'b-through-the-link'
kcb_t sync now $P >/dev/null 2>&1
expect_eq "0" "$(ls -A "$T/elsewhere" | wc -l | tr -d ' ')" "B writes nothing through a symlink planted as its own items directory"
rm "$db/items"; mv "$T/b-items" "$db/items"; rmdir "$T/elsewhere"
expect_exit 0 "with its directory repaired, B publishes" kcb_t sync now $P
kc sync now $P >/dev/null 2>&1
expect_eq "b-through-the-link" "$(kc find-generic-password $P -s mail -a alice -w)" "and A merges it"
# A writer killed mid-write leaves a temporary file holding a sealed value; the next exchange
# removes it, so a deleted item's value does not outlive it there.
cp "$db/items/$(ls "$db/items" | head -1)" "$db/items/.0123.tmp-999999"
cp "$db/state" "$db/.state.tmp-999999"
kcb_t sync now $P >/dev/null 2>&1
expect_eq "" "$(ls -A "$db" "$db/items" | grep '\.tmp-')" "the next exchange removes temporaries a killed writer left"

echo "== passwd on one device"
printf 'a new store passphrase\n' >"$T/new-pass"
expect_exit 0 "passwd on B" kcb passwd $P --new-passphrase-file "$T/new-pass"
kc add-generic-password $P -s mail -a carol -w 'carol-secret' --synchronizable
kc sync now $P >/dev/null
expect_exit 0 "sync now on B after passwd" kcb sync now --passphrase-file "$T/new-pass"
expect_eq "carol-secret" "$(kcb find-generic-password --passphrase-file "$T/new-pass" -s mail -a carol -w)" "sync still works"

echo "== a copy of a device"
# A cloned machine or home directory: A's store with its sync state and its device key (without
# the key the copy could not read its sync key, a this-device-only item). The copy writes as A.
device_dirs d
cp -a "$XDG_DATA_HOME" "$T/d/data"
cp -a "$XDG_STATE_HOME" "$T/d/state"
kcd() { kc_as d "$@"; }
dev_a=$(device_of kc $P)
expect_eq "$dev_a" "$(device_of kcd $P)" "the copy has A's identity"
kc add-generic-password $P -s mail -a dora -w 'dora-on-a' --synchronizable
expect_exit 0 "A writes first" kc sync now $P
a_state=$(sha256sum "$FOLDER/devices/$dev_a/state")
kcd add-generic-password $P -s mail -a dora -w 'dora-on-the-copy' --synchronizable
expect_exit 93 "the copy's sync now: 93" kcd sync now $P
expect_contains "$ERR" "another keychain syncs with this device's identity" "it says what happened"
expect_contains "$ERR" "remove $T/d/data/keychainfs/keychain.db.sync.json" "and names the copy's state to remove"
expect_eq "$a_state" "$(sha256sum "$FOLDER/devices/$dev_a/state")" "the copy wrote nothing over A's directory"
expect_eq "dora-on-the-copy" "$(kcd find-generic-password $P -s mail -a dora -w)" "and merged nothing"
expect_contains "$(kcd sync status $P)" "refused: this device's own directory holds a state it did not write" "sync status on the copy shows it"
expect_exit 0 "A goes on" kc sync now $P
expect_exit 0 "B merges A's change" kcb sync now --passphrase-file "$T/new-pass"
expect_eq "dora-on-a" "$(kcb find-generic-password --passphrase-file "$T/new-pass" -s mail -a dora -w)" "B has A's value"
expect_exit 93 "the copy stays stopped" kcd sync now $P
rm "$T/d/data/keychainfs/keychain.db.sync.json"
expect_exit 0 "the copy joins again, as a device of its own" kcd sync join "$FOLDER" $P $S
dev_d=$(device_of kcd $P)
[ -n "$dev_d" ] && [ "$dev_d" != "$dev_a" ] && pass "with an identity of its own" || fail "with an identity of its own" "$dev_d"
kc sync now $P >/dev/null; kcd sync now $P >/dev/null; kc sync now $P >/dev/null
expect_eq "$(kc find-generic-password $P -s mail -a dora -w)" "$(kcd find-generic-password $P -s mail -a dora -w)" "A and the copy agree on the item"
copy_name=$(kcd sync status $P | sed -n 's|.*conflict: /mail/\(dora\.conflict-[^ ]*\).*|\1|p' | head -1)
kept=$(kcd find-generic-password $P -s mail -a dora -w)
kept_copy=$(kcd find-generic-password $P -s mail -a "$copy_name" -w)
expect_eq "dora-on-a dora-on-the-copy" "$(printf '%s\n%s\n' "$kept" "$kept_copy" | sort | tr '\n' ' ' | sed 's/ $//')" \
    "and neither value is lost: the other is kept as a conflict copy"
expect_exit 0 "the copy leaves" kcd sync leave $P
kc sync now $P >/dev/null

echo "== leave"
kcb add-generic-password --passphrase-file "$T/new-pass" -s mail -a fromb -w 'written-on-b' --synchronizable
kcb sync now --passphrase-file "$T/new-pass" >/dev/null
kc sync now $P >/dev/null
expect_exit 0 "sync leave on B" kcb sync leave --passphrase-file "$T/new-pass"
expect_eq "1" "$(ls "$FOLDER/devices" | wc -l | tr -d ' ')" "only A's directory is left"
expect_exit 69 "B does not sync any more" kcb sync status --passphrase-file "$T/new-pass"
expect_eq "carol-secret" "$(kcb find-generic-password --passphrase-file "$T/new-pass" -s mail -a carol -w)" "B's items stay"
# A device that joins after B left still gets what B wrote: A publishes it again.
device_dirs c
kcc() { kc_as c "$@"; }
kcc init --scrypt-log-n 10 $P >/dev/null
expect_exit 0 "sync now on A after B left" kc sync now $P
expect_exit 0 "C joins after B left" kcc sync join "$FOLDER" $P $S
expect_exit 0 "sync now on C" kcc sync now $P
expect_eq "written-on-b" "$(kcc find-generic-password $P -s mail -a fromb -w)" "C gets the item B wrote before it left"
expect_exit 0 "C leaves" kcc sync leave $P

# wait_for NAME CMD...: CMD succeeds within 10 s.
wait_for() {
    name=$1
    shift
    i=0
    while ! "$@" >/dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -ge 100 ]; then fail "$name" "still not after 10 s: $*"; return 1; fi
        sleep 0.1
    done
    pass "$name"
}
reads() { [ "$(cat "$1" 2>/dev/null)" = "$2" ]; }
gone() { [ ! -e "$1" ]; }

if [ -c /dev/fuse ] && have fusermount3 && have setfattr; then
    . "$(dirname "$0")/mount_lib.sh"
    echo "== two daemons and two mounts"
    A2="$T/a2.db" B2="$T/b/b2.db" F2="$T/folder2" MPA="$T/mnta" MPB="$T/mntb"
    mkdir -p "$MPA" "$MPB"
    init_store --store "$A2"
    kcb init --scrypt-log-n 10 --store "$B2" $P >/dev/null
    kc add-generic-password --store "$A2" $P -s web -a erin -w 'erin-1' --synchronizable
    kc sync init "$F2" --store "$A2" $P $S --scrypt-log-n 10 >/dev/null
    mount_b() { mount_with kcb "$MPB" --store "$B2" $P; }
    expect_exit 0 "mount A" mount_kc "$MPA" --store "$A2"
    expect_exit 0 "mount B (its own XDG dirs and device key)" mount_b
    expect_exit 0 "sync join while mounted, through B's daemon, without the store's passphrase" kcb sync join "$F2" --store "$B2" $S
    expect_eq "erin-1" "$(cat "$MPB/web/erin")" "B's mount shows what it merged at join, at once"
    expect_exit 0 "sync now while mounted, through the daemon" kc sync now --store "$A2"
    expect_contains "$OUT" "published 0, applied 0" "nothing was left to do: the daemon had exchanged"
    printf 'erin-2' >"$MPA/web/erin"
    wait_for "a change through A's mount appears on B's mount" reads "$MPB/web/erin" "erin-2"
    kc add-generic-password --store "$A2" -U -s web -a erin -w 'erin-3'
    wait_for "a change through A's CLI (its daemon) appears on B's mount" reads "$MPB/web/erin" "erin-3"
    # A merged value of another length: no size the kernel cached from before may cut it short.
    stat -c %s "$MPB/web/erin" >/dev/null
    kc add-generic-password --store "$A2" -U -s web -a erin -w 'erin-three-is-longer'
    wait_for "a longer value merged on B reads whole through B's mount" reads "$MPB/web/erin" "erin-three-is-longer"
    expect_eq "20" "$(stat -c %s "$MPB/web/erin")" "and stat shows its new size at once"
    kc add-generic-password --store "$A2" -U -s web -a erin -w 'erin-3'
    wait_for "a shorter one too" reads "$MPB/web/erin" "erin-3"
    expect_eq "6" "$(stat -c %s "$MPB/web/erin")" "with its size"
    printf 'frank-1' >"$MPB/web/frank"
    setfattr -n user.keychain.synchronizable -v yes "$MPB/web/frank"
    wait_for "an item made synchronizable on B's mount appears on A's" reads "$MPA/web/frank" "frank-1"
    rm "$MPA/web/frank"
    wait_for "a delete on A's mount goes from B's" gone "$MPB/web/frank"
    printf 'device-only-secret' >"$MPA/web/local"
    setfattr -n user.keychain.accessible -v when-unlocked-this-device-only "$MPA/web/local"
    if setfattr -n user.keychain.synchronizable -v yes "$MPA/web/local" 2>"$ERR"; then
        fail "setfattr synchronizable=yes on a this-device-only item fails"
    else
        expect_contains "$ERR" "Operation not permitted" "setfattr synchronizable=yes on a this-device-only item: EPERM"
    fi
    expect_eq "no" "$(getfattr --only-values -n user.keychain.synchronizable "$MPA/web/local" 2>/dev/null || echo no)" "and it stays unsynchronizable"
    sleep 0.5
    [ ! -e "$MPB/web/local" ] && pass "the this-device-only item is not on B" || fail "the this-device-only item is not on B"
    for needle in erin frank device-only-secret web 'erin-3'; do
        if grep -rqa -- "$needle" "$F2"; then fail "no '$needle' in the folder"; else pass "no '$needle' in the folder"; fi
    done

    echo "== concurrent edits, with daemons"
    # A is offline (unmounted) while both change one item; its daemon merges when it mounts again.
    kc unmount "$MPA" >/dev/null
    kc add-generic-password --store "$A2" $P -U -s web -a erin -w 'erin-offline-a'
    printf 'erin-online-b' >"$MPB/web/erin"
    sleep 0.3
    expect_exit 0 "mount A again" mount_kc "$MPA" --store "$A2"
    wait_for "A's mount shows a conflict copy" sh -c "ls '$MPA/web' | grep -q '^erin\.conflict-'"
    wait_for "so does B's" sh -c "ls '$MPB/web' | grep -q '^erin\.conflict-'"
    winner=$(cat "$MPA/web/erin")
    expect_eq "$winner" "$(cat "$MPB/web/erin")" "one winner in place on both mounts"
    loser=$(cat "$MPA/web/"erin.conflict-*)
    expect_eq "erin-offline-a erin-online-b" "$(printf '%s\n%s\n' "$winner" "$loser" | sort | tr '\n' ' ' | sed 's/ $//')" "both values are kept"
    expect_contains "$(kc sync status --store "$A2" $P)" "conflict: " "sync status lists the conflict while mounted"
    # A second conflict on the item, the first copy still there: each keeps a copy of its own.
    kc unmount "$MPA" >/dev/null
    kc add-generic-password --store "$A2" $P -U -s web -a erin -w 'erin-offline-a2'
    printf 'erin-online-b2' >"$MPB/web/erin"
    sleep 0.3
    expect_exit 0 "mount A again" mount_kc "$MPA" --store "$A2"
    copies() { ls "$1/web" | grep -c '^erin\.conflict-'; }
    two_copies() { [ "$(copies "$1")" -eq 2 ]; }
    wait_for "a second conflict: A's mount shows two conflict copies" two_copies "$MPA"
    wait_for "so does B's" two_copies "$MPB"
    winner2=$(cat "$MPA/web/erin")
    values() { for f in "$1/web/"erin.conflict-*; do cat "$f"; echo; done | sort | tr '\n' ' '; }
    lost=$(printf '%s\n%s\n%s\n' "$loser" erin-offline-a2 erin-online-b2 | grep -vx "$winner2" | sort | tr '\n' ' ')
    expect_eq "$lost" "$(values "$MPA")" "the first conflict's losing value and the second's are both kept on A"
    expect_eq "$lost" "$(values "$MPB")" "and on B"
    rm "$MPA/web/"erin.conflict-* "$MPB/web/"erin.conflict-*
    printf 'erin-resolved' >"$MPA/web/erin"
    wait_for "an edit after the conflict settles it on both" reads "$MPB/web/erin" "erin-resolved"

    echo "== a tampered file, with daemons"
    dev_b=$(device_of kcb --store "$B2" $P)
    printf 'gina-1' >"$MPB/web/gina"
    setfattr -n user.keychain.synchronizable -v yes "$MPB/web/gina"
    wait_for "B's new item reaches A" reads "$MPA/web/gina" "gina-1"
    # A's daemon is stopped while B publishes; then B's is stopped (so it cannot publish again)
    # while the folder is tampered with and A goes on.
    pid_a=$(daemon_pid "$MPA") pid_b=$(daemon_pid "$MPB")
    kill -STOP "$pid_a"
    printf 'gina-2' >"$MPB/web/gina"
    sleep 0.5
    kill -STOP "$pid_b"
    for f in "$F2/devices/$dev_b/items/"*; do printf 'XXXX' | dd of="$f" bs=1 seek=40 conv=notrunc 2>/dev/null; done
    kill -CONT "$pid_a"
    sleep 1.5
    expect_eq "gina-1" "$(cat "$MPA/web/gina")" "A applies nothing of the tampered file"
    kill -CONT "$pid_b"
    expect_contains "$(cat "$XDG_STATE_HOME/keychainfs/daemon.log")" "refused" "A's daemon logs the refusal"
    expect_contains "$(cat "$XDG_STATE_HOME/keychainfs/daemon.log")" "does not match its manifest" "the refusal names the file's fault"
    # B finds its own files damaged at its next exchange and publishes its values again.
    wait_for "B publishes its real value again, and A merges it" reads "$MPA/web/gina" "gina-2"
    printf 'gina-3' >"$MPB/web/gina"
    wait_for "B's next change merges" reads "$MPA/web/gina" "gina-3"

    echo "== passwd on one device"
    printf 'newer store passphrase\n' >"$T/newer-pass"
    kc unmount "$MPA" >/dev/null
    expect_exit 0 "passwd on A" kc passwd --store "$A2" $P --new-passphrase-file "$T/newer-pass"
    mount_a() { mount_with kc "$MPA" --store "$A2" --passphrase-file "$T/newer-pass" "$@"; }
    mount_a
    printf 'erin-4' >"$MPA/web/erin"
    wait_for "sync still works after passwd" reads "$MPB/web/erin" "erin-4"

    echo "== kill -9 of a daemon during a merge"
    i=0
    # Not beside web/local: a new file in a directory that holds a this-device-only item is made
    # this-device-only (the tree's rule), and so cannot be synchronizable.
    mkdir "$MPA/bulk"
    while [ $i -lt 60 ]; do printf 'bulk-%s' "$i" >"$MPA/bulk/item$i"; setfattr -n user.keychain.synchronizable -v yes "$MPA/bulk/item$i"; i=$((i + 1)); done &
    writer=$!
    sleep 0.4
    kill -9 "$pid_b"
    wait "$writer"
    wait_gone "$pid_b"
    fusermount3 -u -z "$MPB" 2>/dev/null
    expect_exit 0 "B mounts again after kill -9" mount_b
    wait_for "every change reaches B after the restart" reads "$MPB/bulk/item59" "bulk-59"
    missing=0
    i=0
    while [ $i -lt 60 ]; do [ "$(cat "$MPB/bulk/item$i" 2>/dev/null)" = "bulk-$i" ] || missing=$((missing + 1)); i=$((i + 1)); done
    expect_eq 0 "$missing" "nothing was lost"
    expect_eq "erin-4" "$(cat "$MPB/web/erin")" "B's older items kept their values"
    expect_eq "gina-3" "$(cat "$MPB/web/gina")" "and so did B's own"

    echo "== many quick writes on both sides: no false refusal"
    # Each write makes its daemon publish an item's new version and then its manifest, while the
    # other daemon reads that manifest: a file a manifest names must never change under it.
    log_a="$XDG_STATE_HOME/keychainfs/daemon.log" log_b="$T/b/state/keychainfs/daemon.log"
    lines_a=$(wc -l <"$log_a" 2>/dev/null || echo 0) lines_b=$(wc -l <"$log_b" 2>/dev/null || echo 0)
    # race_items DIR PREFIX: eight synchronizable items PREFIX0..PREFIX7 holding PREFIX-0.
    race_items() {
        i=0
        while [ $i -lt 8 ]; do
            printf '%s-0' "$2" >"$1/$2$i"; setfattr -n user.keychain.synchronizable -v yes "$1/$2$i"
            i=$((i + 1))
        done
    }
    mkdir "$MPA/race"
    race_items "$MPA/race" a
    wait_for "the race directory reaches B" reads "$MPB/race/a7" "a-0"
    race_items "$MPB/race" b
    wait_for "B's race items reach A" reads "$MPA/race/b7" "b-0"
    (i=1; while [ $i -le 80 ]; do printf 'a-%s' "$i" >"$MPA/race/a$((i % 8))"; i=$((i + 1)); done) &
    writer_a=$!
    (i=1; while [ $i -le 80 ]; do printf 'b-%s' "$i" >"$MPB/race/b$((i % 8))"; i=$((i + 1)); done) &
    writer_b=$!
    wait "$writer_a"; wait "$writer_b"
    wait_for "A's last write reaches B" reads "$MPB/race/a0" "a-80"
    wait_for "B's last write reaches A" reads "$MPA/race/b0" "b-80"
    same=0
    for n in a0 a1 a2 a3 a4 a5 a6 a7 b0 b1 b2 b3 b4 b5 b6 b7; do
        [ "$(cat "$MPA/race/$n")" = "$(cat "$MPB/race/$n")" ] && same=$((same + 1))
    done
    expect_eq 16 "$same" "both mounts converge"
    expect_exit 0 "sync now on A exits 0" kc sync now --store "$A2"
    expect_exit 0 "sync now on B exits 0" kcb sync now --store "$B2"
    new_a=$(tail -n +$((lines_a + 1)) "$log_a") new_b=$(tail -n +$((lines_b + 1)) "$log_b")
    expect_not_contains "$new_a" "does not match its manifest" "A's daemon refused no file as tampered"
    expect_not_contains "$new_b" "does not match its manifest" "B's daemon refused no file as tampered"
    expect_not_contains "$new_a$new_b" "refused" "and neither daemon refused anything"
    # Versions written over are gone from the folder: each device keeps the files its manifest names.
    for d in "$F2/devices/"*; do
        named=$(/usr/bin/python3 -c 'import json,sys; print(len(json.loads(open(sys.argv[1],"rb").read()[32:])["entries"]))' "$d/state")
        expect_eq "$named" "$(ls "$d/items" | wc -l | tr -d ' ')" "device ${d##*/}: as many item files as its manifest names"
    done

    echo "== two idle daemons"
    # With nothing new to say they write nothing: each used to answer the other's manifest
    # with one of its own, about 30 a second each, for as long as both ran.
    seqs() { /usr/bin/python3 -c 'import json,sys; print(*(json.load(open(f))["seq"] for f in sys.argv[1:]))' "$A2.sync.json" "$B2.sync.json"; }
    quiet() { q=$(seqs); sleep 1; [ "$q" = "$(seqs)" ]; }
    wait_for "A and B settle: neither writes a manifest for a second" quiet

    echo "== a copy of a device, mounted"
    # A's mounted store copied with its sync state and device key (a cloned machine), the copy
    # mounted by a daemon of its own: that daemon's exchanges stop before they write, and its
    # mount goes on serving what it holds.
    kc unmount "$MPA" >/dev/null 2>&1
    E2="$T/e/a2.db" MPE="$T/mnte"
    device_dirs e
    mkdir -p "$MPE"
    cp -a "$XDG_STATE_HOME" "$T/e/state"
    for f in "$A2" "$A2"-* "$A2".sync.json*; do [ -e "$f" ] && cp -a "$f" "$T/e/${f##*/}"; done
    kce() { kc_as e "$@"; }
    mount_a
    dev_a2=$(device_of kc --store "$A2")
    state_a2() { sha256sum "$F2/devices/$dev_a2/state" | cut -d' ' -f1; }
    state_a2_is_not() { [ "$(state_a2)" != "$1" ]; }
    before=$(state_a2)
    printf 'erin-on-a-after-the-copy' >"$MPA/web/erin"
    wait_for "A's daemon publishes its change" state_a2_is_not "$before"
    mount_e() { mount_with kce "$MPE" --store "$E2" --passphrase-file "$T/newer-pass"; }
    expect_exit 0 "mount the copy" mount_e
    printf 'erin-on-the-copy' >"$MPE/web/erin"
    copy_stopped() { kce sync status --store "$E2" | grep -q "another keychain syncs with this device's identity"; }
    wait_for "the copy's daemon stops its exchange" copy_stopped
    expect_exit 93 "sync now through the copy's daemon: 93" kce sync now --store "$E2"
    expect_contains "$ERR" "remove $E2.sync.json" "it names the copy's state to remove"
    own_a2() { [ "$(state_a2)" = "$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ownDigest"])' "$A2.sync.json")" ]; }
    wait_for "the copy's daemon wrote nothing over A's directory: the manifest there is the one A wrote" own_a2
    expect_eq "erin-on-the-copy" "$(cat "$MPE/web/erin")" "the copy's mount merged nothing and still serves its value"
    expect_eq "erin-on-a-after-the-copy" "$(cat "$MPA/web/erin")" "A's mount keeps its own"
    after=$(state_a2)
    printf 'erin-on-a-again' >"$MPA/web/erin"
    wait_for "A goes on publishing" state_a2_is_not "$after"
    expect_exit 0 "B merges A's later change" kcb sync now --store "$B2"
    expect_eq "erin-on-a-again" "$(cat "$MPB/web/erin")" "B has it"
    kce unmount "$MPE" >/dev/null 2>&1

    echo "== a device put back from a backup, mounted"
    # A's data directory backed up while unmounted (its own directory in the folder beside it,
    # as a home directory with the folder's git work tree would have it); A then changes an
    # item, publishes it and B merges it. Put back, the store mounts with --accept-rollback
    # and its daemon stops before it writes: with its data directory alone, its own directory
    # holds a state it did not write; with that directory put back too, B merged a later state.
    kc unmount "$MPA" >/dev/null 2>&1
    BK="$T/backup-a"
    mkdir -p "$BK/own"
    for f in "$A2" "$A2"-* "$A2".sync.json*; do [ -e "$f" ] && cp -a "$f" "$BK/"; done
    cp -a "$F2/devices/$dev_a2/." "$BK/own/"
    put_back() {
        rm -f "$A2" "$A2"-* "$A2".sync.json*
        for f in "$BK"/*; do [ -f "$f" ] && cp -a "$f" "$T/"; done
    }
    mount_a >/dev/null 2>&1
    before=$(state_a2)
    printf 'erin-after-the-backup' >"$MPA/web/erin"
    wait_for "A publishes a change made after its backup" state_a2_is_not "$before"
    after_backup=$(state_a2)
    wait_for "B's mount merges it" reads "$MPB/web/erin" "erin-after-the-backup"
    kc unmount "$MPA" >/dev/null 2>&1
    put_back
    expect_exit 93 "the store put back is refused as rolled back at mount" mount_a
    expect_exit 0 "and mounts with --accept-rollback" mount_a --accept-rollback
    put_back_stopped() { kc sync status --store "$A2" | grep -q "$1"; }
    wait_for "its daemon stops: its own directory holds a state it did not write" \
        put_back_stopped "own directory holds a state it did not write"
    expect_exit 93 "sync now through it: 93" kc sync now --store "$A2"
    expect_contains "$ERR" "or this store put back from a backup" "it names the backup among the causes"
    expect_eq "$after_backup" "$(state_a2)" "it wrote nothing over its directory"
    expect_eq "erin-on-a-again" "$(cat "$MPA/web/erin")" "its mount serves the store as put back: the value before the backup"
    kc unmount "$MPA" >/dev/null 2>&1
    rm -rf "$F2/devices/$dev_a2"
    cp -a "$BK/own" "$F2/devices/$dev_a2"
    put_back
    expect_exit 0 "with its own directory put back too, it mounts (--accept-rollback)" mount_a --accept-rollback
    wait_for "its daemon stops once it reads that B merged a later state of it" \
        put_back_stopped "not the one the folder has merged from it"
    expect_exit 93 "sync now through it: 93" kc sync now --store "$A2"
    expect_contains "$ERR" "put back from a backup" "it says why"
    expect_eq "$(sha256sum "$BK/own/state" | cut -d' ' -f1)" "$(state_a2)" "it wrote nothing over its directory"
    expect_eq "erin-after-the-backup" "$(cat "$MPB/web/erin")" "B keeps the value A wrote after its backup"
    kc unmount "$MPA" >/dev/null 2>&1
    rm "$A2.sync.json"
    expect_exit 0 "mounted again without its sync state" mount_a
    expect_exit 0 "it joins again, as a device of its own" kc sync join "$F2" --store "$A2" $S
    expect_eq "erin-after-the-backup" "$(cat "$MPA/web/erin")" "and gets back, from B, what it wrote after its backup"
    wait_for "B's mount still has it" reads "$MPB/web/erin" "erin-after-the-backup"
    expect_exit 93 "B refuses the old directory put back, at every exchange" kcb sync now --store "$B2"
    rm -r "$F2/devices/$dev_a2"
    expect_exit 0 "once it is removed, B's exchanges refuse nothing" kcb sync now --store "$B2"
    expect_exit 0 "nor A's" kc sync now --store "$A2"
    expect_eq "erin-after-the-backup erin-after-the-backup" "$(cat "$MPA/web/erin") $(cat "$MPB/web/erin")" "and both keep the value"

    echo "== leave and init through a daemon"
    expect_exit 0 "sync leave while mounted" kcb sync leave --store "$B2"
    expect_exit 69 "B does not sync any more" kcb sync status --store "$B2"
    expect_exit 0 "sync init of a new folder while mounted" kcb sync init "$T/folder3" --store "$B2" $S --scrypt-log-n 10
    expect_exit 0 "and its sync key is in B's mount" sh -c "ls '$MPB/keychainfs-sync/' | grep -q ."
    expect_eq "1" "$(ls "$T/folder3/devices" | wc -l | tr -d ' ')" "B's directory is in the new folder"
    kc unmount "$MPA" >/dev/null 2>&1
    kcb unmount "$MPB" >/dev/null 2>&1
else
    skip "two daemons and two mounts" "no /dev/fuse here"
fi

finish
