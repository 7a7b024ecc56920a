#!/bin/sh
# The commands that only look (status, and mount before its daemon starts) change nothing
# of the store: no byte and no modification time of its database, WAL, reserve file, or the
# commit counter and file-state record kept beside the device key; and a command reaches a
# daemon over one connection: the one that found it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

S=$KEYCHAINFS_STORE
STORES="$XDG_STATE_HOME/keychainfs/stores"

# fingerprint: every file beside the store and in the counter directory, with its size,
# content hash and modification time to the nanosecond; files that appear or go show too.
fingerprint() {
    for f in "$(dirname "$S")"/* "$STORES"/*; do
        [ -f "$f" ] || continue
        case $f in *-shm) continue ;; esac  # SQLite's shared memory: readers write it by design
        printf '%s %s %s\n' "$f" "$(sha256sum <"$f" | cut -c1-16)" "$(stat -c '%s %.9Y' "$f")"
    done
}

init_store
kc add-generic-password -s svc -a acct -w secret1 --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password -s svc -a gone -w secret2 --passphrase-file "$PASSFILE" >/dev/null
kc delete-generic-password -s svc -a gone --passphrase-file "$PASSFILE" >/dev/null 2>&1

echo "== status, not mounted"
expect_eq 1 "$(ls "$STORES" | grep -c '\.files$')" "the store has a file-state record beside its counter"
expect_eq 1 "$(test -f "$S-reserve" && echo 1)" "and a reserve file"
before=$(fingerprint)
sleep 0.05  # a write now would show as a later modification time
expect_exit 69 "status without a mount: 69" kc status
expect_contains "$OUT" "passphrase: yes" "it still reads the store"
expect_exit 69 "status --json too" kc status --json
after=$(fingerprint)
expect_eq "$before" "$after" "status changed no file of the store"

echo "== status, not mounted, with frames left in the WAL"
# A WAL that still holds commits (a crash before the checkpoint) is read, not folded in.
/usr/bin/python3 - "$S" <<'PY'
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA wal_autocheckpoint = 0")
c.execute("INSERT INTO meta (name, value) VALUES ('probe-marker', x'00')")
c.execute("DELETE FROM meta WHERE name = 'probe-marker'")
os._exit(0)  # as a crash: no close, so no checkpoint
PY
walsize=$(stat -c %s "$S-wal" 2>/dev/null || echo 0)
expect_eq 1 "$([ "$walsize" -gt 0 ] && echo 1)" "the WAL holds frames ($walsize bytes)"
before=$(fingerprint)
sleep 0.05
expect_exit 69 "status: 69" kc status
expect_contains "$OUT" "passphrase: yes" "it reads the store through its WAL"
expect_eq "$before" "$(fingerprint)" "and leaves the WAL as it was"
rm -f "$S-shm"

echo "== mount: the check before the daemon starts"
: >"$TEST_ROOT/notdir"
before=$(fingerprint)
sleep 0.05
expect_exit 70 "mount on a file fails before the daemon starts" kc mount "$TEST_ROOT/notdir" --passphrase-file "$PASSFILE"
expect_eq "$before" "$(fingerprint)" "and changed no file of the store"

echo "== status, mounted"
mount_kc "$MP"
expect_eq 0 "$?" "mounted"
[ -s "$ERR" ] && show_output
expect_eq secret1 "$(cat "$MP/svc/acct" 2>/dev/null)" "the mount serves"
before=$(fingerprint)
sleep 0.05
expect_exit 0 "status with a mount: 0" kc status
expect_contains "$OUT" "state: unlocked" "it asks the daemon"
expect_exit 0 "status --json" kc status --json
expect_eq "$before" "$(fingerprint)" "status changed no file of the store"

echo "== one connection per command"
SOCKET=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["socketPath"])' "$S.daemon")
# connects COMMAND...: how many times the command (and what it execs) connects to the daemon's socket.
connects() {
    strace -f -qq -e trace=connect -o "$TEST_ROOT/trace" "$KEYCHAINFS_BIN" "$@" >"$OUT" 2>"$ERR" </dev/null
    grep -c "sun_path=\"$SOCKET\"" "$TEST_ROOT/trace"
}
expect_eq 1 "$(connects find-generic-password -s svc -a acct -w)" "find-generic-password -w connects once"
expect_eq secret1 "$(cat "$OUT")" "and prints the secret"
expect_eq 1 "$(connects find-generic-password -s svc -a acct)" "the full tool's find-generic-password connects once"
expect_contains "$OUT" "acct" "and prints the item"
expect_eq 1 "$(connects add-generic-password -s svc -a new -w secret3)" "add-generic-password connects once"
expect_eq 1 "$(connects status)" "status connects once"
expect_contains "$OUT" "state: unlocked" "and reports the mount"
# A command that waits longer than the daemon keeps an idle connection connects again.
slow() { (sleep 6; printf 'slow secret') | "$KEYCHAINFS_BIN" add-generic-password -s svc -a slow; }
expect_exit 0 "a command that read its secret slowly still adds the item" slow
expect_eq "slow secret" "$(cat "$MP/svc/slow" 2>/dev/null)" "which the mount serves"

echo "== mount --foreground keeps no handle of its own on the store"
pid=$(daemon_pid "$MP")
kc unmount "$MP" >/dev/null 2>&1
wait_gone "$pid"
# store_fds PID: how many of the process's descriptors are open on the store's database file.
store_fds() {
    n=0
    for fd in /proc/"$1"/fd/*; do [ "$(readlink "$fd")" = "$S" ] && n=$((n + 1)); done
    echo $n
}
mount_kc "$MP"
bg_pid=$(daemon_pid "$MP")
bg=$(store_fds "$bg_pid")
kc unmount "$MP" >/dev/null 2>&1
wait_gone "$bg_pid"
on_exit_unmount "$MP"
"$KEYCHAINFS_BIN" mount "$MP" --foreground --passphrase-file "$PASSFILE" >/dev/null 2>"$TEST_ROOT/fg.err" &
fg_pid=$!
on_exit_kill "$fg_pid"
i=0
while [ "$(daemon_pid "$MP")" != "$fg_pid" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
expect_eq "$fg_pid" "$(daemon_pid "$MP")" "mount --foreground serves, from the process that was started"
expect_eq "$bg" "$(store_fds "$fg_pid")" "the foreground daemon holds as many descriptors on the store as a background one ($bg)"
kc unmount "$MP" >/dev/null 2>&1
wait "$fg_pid"
rc=$?
expect_eq 0 "$rc" "and exits 0 at unmount"
[ "$rc" -eq 0 ] || sed "s/^/     daemon: /" "$TEST_ROOT/fg.err"

finish
