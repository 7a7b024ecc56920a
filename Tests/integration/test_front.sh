#!/bin/sh
# keychainfs is a small front: it answers `find-generic-password [-s S] [-a A] [--store P] -w`
# through a running daemon itself, and runs keychainfs-full (beside it, or in
# ../libexec/keychainfs) with the same arguments for everything else. These check that both
# paths give the same bytes, messages and exit statuses, that the front really answers
# lookups alone, and that it says so when it cannot find the whole tool.
. "$(dirname "$0")/lib.sh"
. "$TESTS_DIR/mount_lib.sh"

FULL=$(dirname "$KEYCHAINFS_BIN")/keychainfs-full
P="--passphrase-file $PASSFILE"
S=$KEYCHAINFS_STORE

init_store
printf 'direct' | kc add-generic-password $P -s plain -a one

echo "== without a daemon: the whole tool opens the store"
expect_exit 0 "find -w without a mount" kc find-generic-password $P -s plain -a one -w
expect_eq "direct" "$(cat "$OUT")" "the secret, read by the store opened in-process"
expect_exit 65 "find -w without a mount and without a passphrase: the whole tool asks, there is no terminal" \
    setsid -w "$KEYCHAINFS_BIN" find-generic-password -s plain -a one -w </dev/null

expect_exit 0 "mount" mount_kc "$MP"
# Binary, with a NUL, and no newline: the exact bytes must come back.
printf 'a\000b\377\n' >"$TEST_ROOT/binary"
kc add-generic-password -s bin -a one <"$TEST_ROOT/binary"
mkdir -p "$MP/svc"
printf 'through the mount' >"$MP/svc/acct"

echo "== lookups through the daemon"
expect_exit 0 "find -w" kc find-generic-password -s bin -a one -w
cmp -s "$OUT" "$TEST_ROOT/binary" && pass "exact bytes, NUL and all" || fail "exact bytes, NUL and all"
expect_exit 0 "find -w, --store and -a before -s" kc find-generic-password -a acct --store "$S" -w -s svc
expect_eq "through the mount" "$(cat "$OUT")" "options in any order"
expect_exit 0 "find -w with only -s" kc find-generic-password -s svc -w
expect_eq "through the mount" "$(cat "$OUT")" "-a left out matches any account"

echo "== the same answers as the whole tool"
same_as_full() {
    name=$1
    shift
    "$KEYCHAINFS_BIN" "$@" >"$TEST_ROOT/front.out" 2>"$TEST_ROOT/front.err"
    front=$?
    "$FULL" "$@" >"$TEST_ROOT/full.out" 2>"$TEST_ROOT/full.err"
    full=$?
    expect_eq "$full" "$front" "$name: same exit status ($full)"
    cmp -s "$TEST_ROOT/front.out" "$TEST_ROOT/full.out" && pass "$name: same output" || fail "$name: same output"
    expect_eq "$(cat "$TEST_ROOT/full.err")" "$(cat "$TEST_ROOT/front.err")" "$name: same message"
}
same_as_full "found" find-generic-password -s svc -a acct -w
same_as_full "not found" find-generic-password -s svc -a nobody -w
expect_eq "44" "$front" "not found exits 44"
same_as_full "no such store" find-generic-password --store "$TEST_ROOT/none.db" -s svc -w
same_as_full "attributes (no -w)" find-generic-password -s svc -a acct
same_as_full "-g" find-generic-password -s svc -a acct -g
same_as_full "a value that looks like an option" find-generic-password -s -a -w
same_as_full "-w twice" find-generic-password -s svc -w -w
same_as_full "an unknown option" find-generic-password -s svc -w --bogus
kc lock
same_as_full "locked" find-generic-password -s svc -a acct -w
expect_eq "1" "$([ "$front" -ne 0 ] && echo 1)" "a locked item is refused"
kc unlock $P

echo "== the front answers lookups alone"
ALONE="$TEST_ROOT/alone"
mkdir "$ALONE"
cp "$KEYCHAINFS_BIN" "$ALONE/keychainfs"
expect_exit 0 "find -w with no keychainfs-full anywhere" "$ALONE/keychainfs" find-generic-password -s svc -a acct -w
expect_eq "through the mount" "$(cat "$OUT")" "the front read it from the daemon"
expect_exit 74 "any other command without keychainfs-full" "$ALONE/keychainfs" status
expect_contains "$ERR" "cannot run $ALONE/keychainfs-full" "the message names where it looked"
expect_contains "$ERR" "install keychainfs-full in one of them" "and what to do"

echo "== the front's process"
# No dynamic loader: mapping and relocating shared libraries was most of a lookup's time.
readelf -lW "$KEYCHAINFS_BIN" | grep -q "Requesting program interpreter" \
    && fail "the front is a static executable" || pass "the front is a static executable"
# Its home, with no HOME, from /etc/passwd read without NSS (test_git.sh says why).
if [ "$(id -u)" -eq 0 ] && ! getent passwd 4321 >/dev/null; then
    setpriv --reuid 4321 --regid 4321 --clear-groups env -i PATH=/usr/bin:/bin \
        "$KEYCHAINFS_BIN" find-generic-password -s svc -a acct -w >"$OUT" 2>"$ERR"
    expect_eq 50 $? "the front as a user with no passwd entry and no HOME: no store (it crashed)"
else
    skip "the front as a user with no passwd entry" "needs root and a free uid 4321"
fi
strace -o "$TEST_ROOT/front.trace" -e trace=prctl,recvfrom "$KEYCHAINFS_BIN" find-generic-password -s svc -a acct -w >"$OUT"
expect_eq "through the mount" "$(cat "$OUT")" "the lookup under strace"
dumpable=$(grep -nE "PR_SET_DUMPABLE, (0|SUID_DUMP_DISABLE)\\)" "$TEST_ROOT/front.trace" | head -1 | cut -d: -f1)
# The daemon's first frame, `identified` (kind 0x800B), comes before the request: the daemon
# reads who the front is while it is still dumpable (per-program access). The secret comes after.
# Any protocol version (strace shows its second byte as C does: "\10" for 8, "\t" for 9, "A" for 65).
identified=$(grep -nE 'recvfrom.*"KCFS\\0(\\[0-7]+|\\[a-z]|[^\\])\\200\\v' "$TEST_ROOT/front.trace" | head -1 | cut -d: -f1)
received=$(grep -n "recvfrom" "$TEST_ROOT/front.trace" | awk -F: -v after="${identified:-0}" '$1 > after { print $1; exit }')
[ -n "$identified" ] && [ -n "$dumpable" ] && [ "$identified" -lt "$dumpable" ] \
    && pass "the front is identified by the daemon before it hardens" \
    || fail "the front is identified by the daemon before it hardens" "$(cat "$TEST_ROOT/front.trace")"
[ -n "$dumpable" ] && [ -n "$received" ] && [ "$dumpable" -lt "$received" ] \
    && pass "the front is not dumpable before the secret arrives" \
    || fail "the front is not dumpable before the secret arrives" "$(cat "$TEST_ROOT/front.trace")"

echo "== the whole tool in ../libexec/keychainfs, and through a symlink"
mkdir -p "$TEST_ROOT/prefix/bin" "$TEST_ROOT/prefix/libexec/keychainfs" "$TEST_ROOT/links"
cp "$KEYCHAINFS_BIN" "$TEST_ROOT/prefix/bin/keychainfs"
cp "$FULL" "$TEST_ROOT/prefix/libexec/keychainfs/keychainfs-full"
ln -s "$TEST_ROOT/prefix/bin/keychainfs" "$TEST_ROOT/links/keychainfs"
expect_exit 0 "status through libexec" "$TEST_ROOT/prefix/bin/keychainfs" status
expect_contains "$OUT" "$(realpath "$MP")" "status names the mount"
expect_exit 0 "status through a symlink to the front" "$TEST_ROOT/links/keychainfs" status
expect_exit 0 "--version" kc --version
expect_exit 0 "--help" kc --help
expect_contains "$OUT" "find-generic-password" "--help is the whole tool's"

echo "== unmount of a live daemon, by the front alone"
# A process with its working directory in the mount makes it busy: 16, as the whole tool says.
(cd "$MP/svc" && sleep 30) &
holder=$!
on_exit_kill "$holder"
sleep 0.3
expect_exit 16 "unmount of a busy mount" "$ALONE/keychainfs" unmount "$MP"
busy_message=$(cat "$ERR")
expect_exit 16 "the whole tool agrees" "$FULL" unmount "$MP"
expect_eq "$(cat "$ERR")" "$busy_message" "same message for a busy mount"
kill "$holder"
wait "$holder" 2>/dev/null
pid=$(daemon_pid "$MP")
expect_exit 0 "unmount MOUNTPOINT" "$ALONE/keychainfs" unmount "$MP"
mountpoint -q "$MP" && fail "the mount is gone when unmount returns" || pass "the mount is gone when unmount returns"
# Exited: gone, or a zombie its parent (init here) has not reaped yet.
state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)
case $state in ""|Z|X) pass "the daemon has exited when unmount returns" ;; *) fail "the daemon has exited when unmount returns" "state $state" ;; esac
expect_exit 0 "mount again at once" mount_kc "$MP"
expect_exit 0 "unmount --store" "$ALONE/keychainfs" unmount --store "$S"
mountpoint -q "$MP" && fail "unmounted by its store" || pass "unmounted by its store"
expect_exit 0 "mount again" mount_kc "$MP"
expect_exit 0 "and the secret is still there" kc find-generic-password -s svc -a acct -w
expect_eq "through the mount" "$(cat "$OUT")" "the store was closed cleanly"

echo "== what the front leaves to the whole tool"
expect_exit 74 "unmount of a mountpoint that is not mounted goes to the whole tool" "$ALONE/keychainfs" unmount "$TEST_ROOT"
same_as_full "unmount of a mountpoint that is not mounted" unmount "$TEST_ROOT"
kill -9 "$(daemon_pid "$MP")"
sleep 0.3
expect_exit 74 "a stale mount goes to the whole tool" "$ALONE/keychainfs" unmount "$MP"
expect_exit 0 "which detaches it" kc unmount "$MP"
expect_contains "$OUT" "detached the stale mount" "the whole tool's message"
finish
