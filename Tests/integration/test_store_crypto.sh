#!/bin/sh
# Attacks on the store's crypto with the tools an attacker has (sqlite3, python, libcrypto):
# a forged keybag row, damaged key-derivation data, a clock in the future, rows rolled back,
# replayed or removed, a whole store put back to an older copy; and processes that hold a
# passphrase are not dumpable.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

ATTACK="$TESTS_DIR/keybag_attack.py"
DEVICE_KEY="$XDG_STATE_HOME/keychainfs/device.key"

# new_store NAME: a fresh store at $TEST_ROOT/NAME/keychain.db, set as $S.
new_store() {
    S="$TEST_ROOT/$1/keychain.db"
    init_store --store "$S"
}

# expect_mount_refused NAME ARGS...: `mount` with ARGS exits 93; a mount that happens anyway is undone.
expect_mount_refused() {
    name=$1
    shift
    on_exit_unmount "$MP"
    expect_exit 93 "$name" kc mount "$MP" "$@"
    pid=$(daemon_pid "$MP")
    if [ -n "$pid" ]; then on_exit_kill "$pid"; kc unmount "$MP" >/dev/null 2>&1; fi
}

# meta NAME: the meta value as text.
meta() { sqlite3 "$S" "SELECT CAST(value AS TEXT) FROM meta WHERE name = '$1'"; }

# save_row ID: keeps a copy of item ID's row as it is now; put_back ID: writes that copy back.
save_row() { sqlite3 "$S" "ATTACH '$TEST_ROOT/saved-$1.db' AS s; DROP TABLE IF EXISTS s.r; CREATE TABLE s.r AS SELECT * FROM items WHERE id = $1"; }
put_back() { sqlite3 "$S" "ATTACH '$TEST_ROOT/saved-$1.db' AS s; DELETE FROM items WHERE id = $1; INSERT INTO items SELECT * FROM s.r"; }

echo "== a device-wrapped keybag row for a passphrase class is refused"
new_store forged
printf 'before' | kc add-generic-password --store "$S" -s vault -a old --accessible when-passcode-set-this-device-only \
    --passphrase-file "$PASSFILE" >/dev/null
chosen=$(python3 "$ATTACK" forge "$S" "$DEVICE_KEY" when-passcode-set-this-device-only)
expect_exit 93 "adding an item after the forged row is an integrity failure" \
    kc add-generic-password --store "$S" -s vault -a new -w topsecret --accessible when-passcode-set-this-device-only \
    --passphrase-file "$PASSFILE"
expect_contains "$ERR" "keybag" "and names the keybag"
new_id=$(sqlite3 "$S" "SELECT MAX(id) FROM items")
recovered=$(python3 "$ATTACK" open "$S" "$chosen" "$new_id" 2>/dev/null)
expect_not_contains "$recovered" "topsecret" "the attacker's key opens no new item"
expect_exit 93 "verify reports it" kc verify --store "$S" --passphrase-file "$PASSFILE"
expect_mount_refused "and a mount refuses it" --store "$S" --passphrase-file "$PASSFILE"

echo "== a deleted keybag row is reported by verify"
new_store deleted-row
kc add-generic-password --store "$S" -s svc -a a -w x --accessible always --passphrase-file "$PASSFILE" >/dev/null
sqlite3 "$S" "DELETE FROM wrapped_keys WHERE name = 'class.always' AND wrapping = 'd'"
expect_exit 93 "verify fails" kc verify --store "$S" --passphrase-file "$PASSFILE"
expect_contains "$OUT" "'class.always' wrapped by 'd' is missing" "and says which entry is missing"

echo "== damaged key-derivation data is no wrong passphrase"
for what in salt params verifier; do
    new_store "kdf-$what"
    case $what in
        salt) sqlite3 "$S" "UPDATE meta SET value = randomblob(16) WHERE name = 'salt'" ;;
        params) sqlite3 "$S" "UPDATE meta SET value = CAST('{\"logN\":10,\"r\":9,\"p\":1}' AS BLOB) WHERE name = 'scrypt'" ;;
        verifier) sqlite3 "$S" "UPDATE wrapped_keys SET blob = substr(blob, 1, 20) || X'00' || substr(blob, 22)
                                 WHERE name = 'index' AND wrapping = 'p'" ;;
    esac
    expect_exit 49 "a tampered $what is a damaged store (49)" kc verify --store "$S" --passphrase-file "$PASSFILE"
    expect_contains "$ERR" "key-derivation data is damaged" "and says so"
    expect_eq "" "$(meta failed_unlocks)" "and counts no failed attempt"
done
new_store kdf-huge
sqlite3 "$S" "UPDATE meta SET value = CAST('{\"logN\":22,\"r\":32,\"p\":16}' AS BLOB) WHERE name = 'scrypt'"
expect_exit 49 "scrypt parameters init never writes are refused before any work" \
    timeout 10 "$KEYCHAINFS_BIN" verify --store "$S" --passphrase-file "$PASSFILE"

echo "== a failure time in the future waits no longer than the backoff"
new_store clock
future=$(( $(date +%s) + 10 * 365 * 24 * 3600 ))
sqlite3 "$S" "INSERT OR REPLACE INTO meta VALUES ('failed_unlocks', CAST('3' AS BLOB)), ('last_failed_unlock', CAST('$future' AS BLOB))"
expect_exit 52 "three failures still make the next attempt wait" kc verify --store "$S" --passphrase-file "$PASSFILE"
wait_s=$(sed -n 's/.*try again in \([0-9]*\) second.*/\1/p' "$ERR")
expect_eq 1 "$([ -n "$wait_s" ] && [ "$wait_s" -le 5 ] && echo 1)" "but only the 5 s of three failures, not years (said: $wait_s)"

echo "== rows replayed, put back or removed"
new_store replay
printf 'v1' | kc add-generic-password --store "$S" -s svc -a acct --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password --store "$S" -s svc -a other -w keep --passphrase-file "$PASSFILE" >/dev/null
id=$(sqlite3 "$S" "SELECT MIN(id) FROM items")
save_row "$id"
printf 'v2' | kc add-generic-password --store "$S" -s svc -a acct -U --passphrase-file "$PASSFILE" >/dev/null
put_back "$id"
expect_exit 93 "an older copy of a row is detected at open" kc find-generic-password --store "$S" -s svc -a acct -w \
    --passphrase-file "$PASSFILE"
expect_not_contains "$OUT" "v1" "and the old value is not served"
expect_exit 93 "verify reports it" kc verify --store "$S" --passphrase-file "$PASSFILE"
expect_mount_refused "a mount refuses it" --store "$S" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "--accept-rollback" "and says how to take it"
expect_exit 0 "mount --accept-rollback takes the store as it is" mount_kc "$MP" --store "$S" --accept-rollback
expect_eq "v1" "$(cat "$MP/svc/acct")" "(the replayed value, accepted)"
kc unmount "$MP" >/dev/null
expect_exit 0 "after that, verify is clean" kc verify --store "$S" --passphrase-file "$PASSFILE"

new_store putback
kc add-generic-password --store "$S" -s svc -a gone -w deleted-secret --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password --store "$S" -s svc -a stays -w x --passphrase-file "$PASSFILE" >/dev/null
id=$(sqlite3 "$S" "SELECT MIN(id) FROM items")
save_row "$id"
kc delete-generic-password --store "$S" -s svc -a gone --passphrase-file "$PASSFILE" >/dev/null
sqlite3 "$S" "ATTACH '$TEST_ROOT/saved-$id.db' AS s; INSERT INTO items SELECT * FROM s.r"
expect_exit 93 "a deleted row put back is detected" kc find-generic-password --store "$S" -s svc -a gone -w \
    --passphrase-file "$PASSFILE"

new_store removed
kc add-generic-password --store "$S" -s svc -a a -w x --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password --store "$S" -s svc -a b -w y --passphrase-file "$PASSFILE" >/dev/null
sqlite3 "$S" "DELETE FROM items WHERE id = (SELECT MAX(id) FROM items)"
expect_exit 93 "a row silently removed is detected" kc verify --store "$S" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "not those the store recorded" "and says what"

echo "== a damaged next item id: no id is reused, and the error says what"
# Ids are never reused (an old row cannot pose as a later item with its id). A next id that is
# not a number, or one behind the rows, is damage, not a duplicate item.
new_store nextid
kc add-generic-password --store "$S" -s svc -a first -w one --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password --store "$S" -s svc -a second -w two --passphrase-file "$PASSFILE" >/dev/null
kc delete-generic-password --store "$S" -s svc -a first --passphrase-file "$PASSFILE" >/dev/null
ids=$(sqlite3 "$S" "SELECT group_concat(id) FROM items")
sqlite3 "$S" "UPDATE meta SET value = CAST('x1' AS BLOB) WHERE name = 'next_id'"
expect_exit 93 "a next id that is not a number fails a create" kc add-generic-password --store "$S" -s svc -a third -w three \
    --passphrase-file "$PASSFILE"
expect_contains "$ERR" "next item id" "and says so"
expect_eq "$ids" "$(sqlite3 "$S" "SELECT group_concat(id) FROM items")" "and no row took the deleted item's id"
sqlite3 "$S" "UPDATE meta SET value = CAST('$ids' AS BLOB) WHERE name = 'next_id'"
expect_exit 93 "a next id behind the rows fails a create as damage" kc add-generic-password --store "$S" -s svc -a third -w three \
    --passphrase-file "$PASSFILE"
expect_contains "$ERR" "next item id" "not as a duplicate item"

echo "== a whole store put back to an older copy"
new_store whole
kc add-generic-password --store "$S" -s svc -a a -w first --passphrase-file "$PASSFILE" >/dev/null
cp "$S" "$TEST_ROOT/whole.backup"
printf 'second' | kc add-generic-password --store "$S" -s svc -a a -U --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password --store "$S" -s svc -a b -w later --passphrase-file "$PASSFILE" >/dev/null
cp "$TEST_ROOT/whole.backup" "$S"
rm -f "$S-wal" "$S-shm"
expect_exit 93 "verify reports a rolled-back store" kc verify --store "$S" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "rolled back" "and says so"
expect_mount_refused "mount refuses it" --store "$S" --passphrase-file "$PASSFILE"
expect_exit 0 "mount --accept-rollback mounts it" mount_kc "$MP" --store "$S" --accept-rollback
expect_eq "first" "$(cat "$MP/svc/a")" "(the older copy)"
kc unmount "$MP" >/dev/null
expect_exit 0 "and then it is the store of record" kc verify --store "$S" --passphrase-file "$PASSFILE"

echo "== processes that hold a passphrase are not dumpable"
# Only visible to another uid: /proc/PID files of a non-dumpable process belong to root.
DUMP="$(mktemp -d /tmp/kcfs-secrets-dump.XXXXXX)"
on_exit "rm -rf '$DUMP'"
mkdir -p "$DUMP/state" "$DUMP/data"
cp "$PASSFILE" "$DUMP/pass"
mkfifo "$DUMP/fifo"
chown -R nobody:nogroup "$DUMP"
as_nobody() {
    setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$DUMP" XDG_STATE_HOME="$DUMP/state" \
        XDG_DATA_HOME="$DUMP/data" XDG_RUNTIME_DIR="$DUMP/run" KEYCHAINFS_STORE="$DUMP/data/k.db" "$@"
}
as_nobody "$KEYCHAINFS_BIN" init --scrypt-log-n 10 --passphrase-file "$DUMP/pass" >/dev/null
for cmd in "verify" "passwd --new-passphrase-file $DUMP/pass" "find-generic-password -s x"; do
    # The command waits for its passphrase on the FIFO, holding the store's keys or about to.
    setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$DUMP" XDG_STATE_HOME="$DUMP/state" \
        XDG_DATA_HOME="$DUMP/data" XDG_RUNTIME_DIR="$DUMP/run" KEYCHAINFS_STORE="$DUMP/data/k.db" \
        "$KEYCHAINFS_BIN" $cmd --passphrase-fd 3 3<"$DUMP/fifo" >/dev/null 2>&1 &
    pid=$!
    exec 4>"$DUMP/fifo"
    sleep 0.5
    owner=$(stat -c %u "/proc/$pid/mem" 2>/dev/null)
    exec 4>&-
    wait $pid 2>/dev/null
    expect_eq 0 "$owner" "'$cmd' reading a passphrase is not dumpable"
done

finish
