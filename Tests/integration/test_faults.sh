#!/bin/sh
# Faults through the mount: a tampered row, a full disk, a corrupt store. Each gives a clear
# error and loses nothing else.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

echo "== a tampered row fails alone"
init_store
kc add-generic-password -s svc -a good -w good-secret --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password -s svc -a bad -w bad-secret --passphrase-file "$PASSFILE" >/dev/null
# The second item added has the highest id; flip the last byte of its sealed secret (the tag).
sqlite3 "$KEYCHAINFS_STORE" "UPDATE items SET secret = substr(secret, 1, length(secret) - 1) ||
    CASE WHEN substr(secret, -1) = X'00' THEN X'01' ELSE X'00' END WHERE id = (SELECT MAX(id) FROM items)"
expect_exit 0 "a store with a tampered row still mounts" mount_kc "$MP"
expect_errno "reading the tampered item fails with EBADMSG" "Bad message" cat "$MP/svc/bad"
expect_eq "good-secret" "$(cat "$MP/svc/good")" "every other item still reads"
expect_exit 93 "verify reports it" kc verify
expect_contains "$(cat "$OUT" "$ERR")" "fails authentication" "and says why"
kc unmount "$MP" >/dev/null
LOG="$XDG_STATE_HOME/keychainfs/daemon.log"
expect_contains "$LOG" "serving" "the daemon logs its mount to \$XDG_STATE_HOME/keychainfs/daemon.log"
expect_contains "$LOG" "Bad message: Integrity check failed: item #" "the log names the cause of an EBADMSG by item id"
expect_not_contains "$LOG" "bad-secret" "the log holds no secret"
expect_not_contains "$LOG" "svc/bad" "nor a name"
expect_contains "$LOG" "unmounted" "and the unmount"

echo "== a full disk"
if small_store small 2m; then
    FS=$SMALL_FS S=$SMALL_STORE
    kc mount "$MP" --store "$S" --passphrase-file "$PASSFILE" >/dev/null
    on_exit_unmount "$MP"
    pid=$(daemon_pid "$MP"); [ -n "$pid" ] && on_exit_kill "$pid"
    mkdir -p "$MP/svc"
    sh -c "printf kept > '$MP/svc/item'"
    dd if=/dev/zero of="$FS/filler" bs=4k 2>/dev/null
    expect_errno "a write to a full disk fails with ENOSPC" "No space left on device" sh -c "head -c 500000 /dev/urandom > '$MP/svc/item'"
    expect_eq "kept" "$(cat "$MP/svc/item")" "the old value is intact"
    expect_errno "a new file that cannot be stored fails at close with ENOSPC" "No space left on device" \
        sh -c "head -c 500000 /dev/urandom > '$MP/svc/new'"
    expect_eq "item" "$(ls "$MP/svc")" "and is gone, not left empty"
    expect_contains "$LOG" "a new file could not be stored: " "the daemon's log says so"
    head -c 500000 /dev/urandom >"$TEST_ROOT/big"
    expect_exit 73 "the CLI gets the disk-full exit code" kc add-generic-password --store "$S" -s svc -a other -U <"$TEST_ROOT/big"
    rm -f "$FS/filler"
    sh -c "printf after > '$MP/svc/item'"
    expect_eq "after" "$(cat "$MP/svc/item")" "with space again, writes work"
    kc unmount "$MP" >/dev/null
    expect_exit 0 "and the store verifies" kc verify --store "$S" --passphrase-file "$PASSFILE"
else
    fail "mount a small tmpfs (needs root)"
fi

echo "== a store on a machine without its device key"
kc add-generic-password -s dev -a tdo -w bound --accessible when-unlocked-this-device-only --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password -s dev -a plain -w portable --passphrase-file "$PASSFILE" >/dev/null
mv "$XDG_STATE_HOME/keychainfs/device.key" "$TEST_ROOT/device.key.away"
on_exit "mv '$TEST_ROOT/device.key.away' '$XDG_STATE_HOME/keychainfs/device.key'"
expect_exit 0 "the passphrase still mounts the store" mount_kc "$MP"
expect_eq "portable" "$(cat "$MP/dev/plain")" "items that are not device-bound read"
# Their names are sealed under a key that needs the device key too, so they are not even listed.
expect_eq "plain" "$(ls "$MP/dev")" "this-device-only items are neither listed"
expect_errno "nor readable" "No such file or directory" cat "$MP/dev/tdo"
kc unmount "$MP" >/dev/null
mv "$TEST_ROOT/device.key.away" "$XDG_STATE_HOME/keychainfs/device.key"
expect_exit 0 "with the device key back" mount_kc "$MP"
expect_eq "bound" "$(cat "$MP/dev/tdo")" "they read again"

echo "== wrong passphrases through the mount back off"
kc lock "$MP" >/dev/null
echo wrong >"$TEST_ROOT/wrong"
for i in 1 2 3; do kc unlock "$MP" --passphrase-file "$TEST_ROOT/wrong" >/dev/null 2>&1; done
expect_exit 52 "after three wrong passphrases even the right one must wait" kc unlock "$MP" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "try again in" "and the message says how long"
expect_exit 52 "at a terminal, unlock says how long before asking" timeout -k 5 20 python3 "$TESTS_DIR/terminal.py" -- "$KEYCHAINFS_BIN" unlock "$MP"
expect_contains "$OUT" "try again in" "the wait is shown"
expect_not_contains "$OUT" "Passphrase for" "and no passphrase is asked that would not be heard"
kc status "$MP" >"$OUT" 2>&1
expect_contains "$OUT" "the next is heard in" "status says how long too"
expect_contains "$XDG_STATE_HOME/keychainfs/daemon.log" "unlock refused: The passphrase is wrong" "refused unlocks are logged"
expect_eq "locked" "$(getfattr --only-values -n user.keychain.state "$MP" 2>/dev/null)" "nothing was unlocked"
sleep 6
expect_exit 0 "after the wait the right passphrase unlocks" kc unlock "$MP" --passphrase-file "$PASSFILE"
kc unmount "$MP" >/dev/null

echo "== a row whose columns hold the wrong SQLite types fails alone"
T="$TEST_ROOT/typed.db"
kc init --store "$T" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password --store "$T" -s svc -a good -w good-secret --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password --store "$T" -s svc -a victim -w victim-secret --passphrase-file "$PASSFILE" >/dev/null
victim=$(sqlite3 "$T" "SELECT MAX(id) FROM items")
for change in "kind = 'x'" "class = X'01'" "blind = 7" "group_blind = 'g'" \
              "wrapped_key = 1.5" "attributes = X'00' || 'a'" "secret = 42" "secret = CAST(X'00414243' AS TEXT)"; do
    cp "$T" "$T.orig"
    sqlite3 "$T" "UPDATE items SET $change WHERE id = $victim"
    expect_exit 93 "verify names the damaged row ($change)" kc verify --store "$T" --passphrase-file "$PASSFILE"
    expect_contains "$OUT" "item #$victim" "  the report names item #$victim"
    expect_exit 0 "  find of another item still works" kc find-generic-password --store "$T" -s svc -a good -w --passphrase-file "$PASSFILE"
    kc dump-keychain --store "$T" -d --passphrase-file "$PASSFILE" >"$OUT" 2>"$ERR"
    rc=$?
    if [ $rc -eq 0 ] || [ $rc -eq 93 ]; then pass "  dump-keychain does not trap (exit $rc)"; else fail "  dump-keychain trapped (exit $rc)"; show_output; fi
    expect_exit 0 "  the store still mounts" mount_kc "$MP" --store "$T"
    expect_eq "good-secret" "$(cat "$MP/svc/good")" "  and the other item reads"
    expect_errno "  the damaged one fails with EBADMSG, or is not listed" "Bad message\|No such file" cat "$MP/svc/victim"
    kc unmount "$MP" >/dev/null 2>&1
    mv "$T.orig" "$T"
    rm -f "$T-wal" "$T-shm"
done

echo "== an export that leaves a damaged item out never replaces a backup"
BK="$TEST_ROOT/backups"
mkdir -p "$BK"
expect_exit 0 "a complete backup" kc export "$BK/full.kcb" --store "$T" --scrypt-log-n 10 \
    --passphrase-file "$PASSFILE" --backup-passphrase-file "$PASSFILE"
cp "$BK/full.kcb" "$BK/full.before"
cp "$T" "$T.orig"
sqlite3 "$T" "UPDATE items SET secret = randomblob(60) WHERE id = $victim"
expect_exit 93 "export --force over it, of a store with a damaged item" kc export "$BK/full.kcb" --force --store "$T" \
    --scrypt-log-n 10 --passphrase-file "$PASSFILE" --backup-passphrase-file "$PASSFILE"
expect_contains "$ERR" "1 damaged item could not be exported, so $BK/full.kcb was left as it was" "  it says the backup was kept"
expect_exit 0 "  the complete backup is still there, byte for byte" cmp "$BK/full.kcb" "$BK/full.before"
expect_eq "full.before full.kcb" "$(ls -A "$BK" | tr '\n' ' ' | sed 's/ $//')" "  and no temporary file is left"
expect_exit 93 "export to a new file keeps the rest, and says what is missing" kc export "$BK/rest.kcb" --store "$T" \
    --scrypt-log-n 10 --passphrase-file "$PASSFILE" --backup-passphrase-file "$PASSFILE"
expect_contains "$ERR" "1 damaged item could not be exported" "  naming the count"
kc init --store "$TEST_ROOT/restored.db" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
expect_exit 0 "  the complete backup restores both items" kc import "$BK/full.kcb" --store "$TEST_ROOT/restored.db" \
    --passphrase-file "$PASSFILE" --backup-passphrase-file "$PASSFILE"
expect_exit 0 "  the damaged one among them" kc find-generic-password --store "$TEST_ROOT/restored.db" -s svc -a victim -w --passphrase-file "$PASSFILE"
expect_eq "victim-secret" "$(cat "$OUT")" "  with its secret"
mv "$T.orig" "$T"; rm -f "$T-wal" "$T-shm"

echo "== a mistyped version is a replay of that row: the store is refused until accepted"
cp "$T" "$T.orig"
sqlite3 "$T" "UPDATE items SET version = 'v' WHERE id = $victim"
expect_exit 93 "verify refuses a store whose row versions are not those it recorded" kc verify --store "$T" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "not those the store recorded" "  and says why"
expect_exit 93 "  mount refuses it too" kc mount "$MP" --store "$T" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "--accept-rollback" "  naming the flag that takes it as it is"
expect_exit 0 "  mount --accept-rollback takes it" mount_kc "$MP" --store "$T" --accept-rollback
expect_eq "good-secret" "$(cat "$MP/svc/good")" "  and the other item reads"
kc unmount "$MP" >/dev/null 2>&1
expect_exit 93 "  verify then names the damaged row" kc verify --store "$T" --passphrase-file "$PASSFILE"
expect_contains "$OUT" "item #$victim" "  as item #$victim"
mv "$T.orig" "$T"; rm -f "$T-wal" "$T-shm"

echo "== a corrupt store"
head -c 8192 /dev/urandom >"$TEST_ROOT/random.db"
expect_exit 49 "mounting a file that is not a store fails" kc mount "$MP" --store "$TEST_ROOT/random.db" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "not a keychainfs store" "and says so"
expect_exit 32 "nothing is mounted" mountpoint -q "$MP"

finish
