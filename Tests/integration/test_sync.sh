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

# Device B: its own HOME and XDG directories, so its own store, device key, config and runtime dir.
mkdir -p "$T/b/home" "$T/b/data" "$T/b/state" "$T/b/config" "$T/b/run"
chmod 700 "$T/b/run"
kcb() {
    HOME="$T/b/home" XDG_DATA_HOME="$T/b/data" XDG_STATE_HOME="$T/b/state" XDG_CONFIG_HOME="$T/b/config" \
        XDG_RUNTIME_DIR="$T/b/run" KEYCHAINFS_STORE="$T/b/data/keychainfs/keychain.db" "$KEYCHAINFS_BIN" "$@"
}

init_store
kcb init --scrypt-log-n 10 $P >/dev/null

echo "== the synchronizable attribute"
expect_exit 0 "add --synchronizable" kc add-generic-password $P -s mail -a alice -w 'alice-secret-1' --synchronizable
expect_contains "$(kc find-generic-password $P -s mail -a alice)" "synchronizable: yes" "find prints synchronizable: yes"
expect_exit 78 "--synchronizable on a this-device-only item: 78" \
    kc add-generic-password $P -s mail -a local -w x --synchronizable --accessible when-unlocked-this-device-only
expect_contains "$ERR" "cannot be synchronizable" "the refusal says why"
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
expect_exit 48 "sync init on a folder that has a key envelope: 48" kcb sync init "$FOLDER" $P $S --scrypt-log-n 10
printf 'wrong\n' >"$T/wrong-pass"
expect_exit 51 "sync join with a wrong passphrase: 51" kcb sync join "$FOLDER" $P --sync-passphrase-file "$T/wrong-pass"
expect_exit 69 "and B does not sync" kcb sync status $P
expect_exit 0 "sync join" kcb sync join "$FOLDER" $P $S
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

echo "== tampering and rollback"
kc sync now $P >/dev/null
dev_a=$(kc sync status --json $P | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["device"])')
f=$(ls "$FOLDER/devices/$dev_a/items" | head -1)
cp "$FOLDER/devices/$dev_a/items/$f" "$T/saved-item"
printf 'X' | dd of="$FOLDER/devices/$dev_a/items/$f" bs=1 seek=30 conv=notrunc 2>/dev/null
expect_exit 93 "a tampered file: sync now exits 93" kcb sync now $P
expect_contains "$ERR" "does not match its manifest" "and names the refusal"
expect_contains "$(kcb sync status $P)" "refused: " "sync status shows it"
cp "$T/saved-item" "$FOLDER/devices/$dev_a/items/$f"
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

echo "== passwd on one device"
printf 'a new store passphrase\n' >"$T/new-pass"
expect_exit 0 "passwd on B" kcb passwd $P --new-passphrase-file "$T/new-pass"
kc add-generic-password $P -s mail -a carol -w 'carol-secret' --synchronizable
kc sync now $P >/dev/null
expect_exit 0 "sync now on B after passwd" kcb sync now --passphrase-file "$T/new-pass"
expect_eq "carol-secret" "$(kcb find-generic-password --passphrase-file "$T/new-pass" -s mail -a carol -w)" "sync still works"

echo "== leave"
expect_exit 0 "sync leave on B" kcb sync leave --passphrase-file "$T/new-pass"
expect_eq "1" "$(ls "$FOLDER/devices" | wc -l | tr -d ' ')" "only A's directory is left"
expect_exit 69 "B does not sync any more" kcb sync status --passphrase-file "$T/new-pass"
expect_eq "carol-secret" "$(kcb find-generic-password --passphrase-file "$T/new-pass" -s mail -a carol -w)" "B's items stay"

finish
