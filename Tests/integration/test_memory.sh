#!/bin/sh
# What is locked is wiped: after `lock`, the daemon's memory (read through /proc/PID/mem, as
# root can) holds no secret of a when-unlocked class that went through the mount, the control
# socket or the passphrase routes; a memory mapping made before the lock no longer shows its
# secret; and the plaintext cache is bounded and packed, so a limited RLIMIT_MEMLOCK and a
# hundred thousand distinct secrets neither crash the daemon nor leave secrets silently in
# swappable memory.
. "$(dirname "$0")/lib.sh"
. "$TESTS_DIR/mount_lib.sh"

SCAN="$TESTS_DIR/memscan.py"

if [ "$(id -u)" -ne 0 ]; then
    echo "test_memory.sh: needs root (to read another process's memory and to make a test user)" >&2
    exit 2
fi

# marker: 48 random hex digits, which no program holds by chance.
marker() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# expect_absent NAME PID MARKER...: none of the markers is anywhere in the process's memory.
expect_absent() {
    name=$1 pid=$2
    shift 2
    python3 "$SCAN" "$pid" ${MEMSCAN_CONTEXT:+--context} "$@" >"$OUT" 2>"$ERR"
    case $? in
        0) pass "$name" ;;
        1) fail "$name" "$(cat "$OUT")" ;;
        *) fail "$name" "the scan failed: $(cat "$ERR")" ;;
    esac
}

# expect_present NAME PID MARKER: the marker is in the process's memory (so the scan can fail).
expect_present() {
    python3 "$SCAN" "$2" "$3" >"$OUT" 2>"$ERR"
    if [ $? -eq 1 ]; then pass "$1"; else fail "$1" "the scan did not find it $(cat "$ERR")"; fi
}

P1=$(marker)
PASS1="$TEST_ROOT/pass1"
printf '%s\n' "$P1" >"$PASS1"
kc init --scrypt-log-n 10 --passphrase-file "$PASS1" >/dev/null

echo "== the passphrase is wiped once the keys are derived: mount"
kc mount "$MP" --passphrase-file "$PASS1" >"$OUT" 2>"$ERR"
rc=$?
on_exit_unmount "$MP"
pid=$(daemon_pid "$MP")
[ -n "$pid" ] && on_exit_kill "$pid"
expect_eq "0 yes" "$rc $([ -n "$pid" ] && echo yes)" "mount (background daemon)"
expect_absent "mount: the daemon's memory holds no passphrase" "$pid" "passphrase=$P1"

echo "== secrets through the mount and the control socket"
M1=$(marker) M2=$(marker) M3=$(marker) M4=$(marker) M5=$(marker)
C1=$(marker) C2=$(marker) C3=$(marker) C4=$(marker) C5=$(marker)
K1=$(marker)
mkdir "$MP/svc"
printf '%s' "$M1" >"$MP/svc/m1"
expect_eq "$M1" "$(cat "$MP/svc/m1")" "a secret written with printf reads back with cat"
# A secret of 300 KB, written in several 128 KiB requests, with the marker in each.
python3 - "$TEST_ROOT/big" "$M2" <<'PY'
import os, sys
m = sys.argv[2].encode()
body = os.urandom(150_000).hex().encode()[:300_000]
open(sys.argv[1], "wb").write(m + body[:140_000] + m + body[140_000:] + m)
PY
cp "$TEST_ROOT/big" "$MP/svc/m2"
expect_exit 0 "a 300 KB secret written with cp reads back (cmp)" cmp "$TEST_ROOT/big" "$MP/svc/m2"
printf '%s' "$M3" | dd of="$MP/svc/m3" bs=7 2>/dev/null
expect_eq "$M3" "$(dd if="$MP/svc/m3" bs=5 2>/dev/null)" "a secret written and read 7 and 5 bytes at a time"
printf '%s' "$M4" >"$MP/svc/m4"
expect_eq "$M4" "$(python3 -c 'import sys; print(open(sys.argv[1], "rb").read().decode())' "$MP/svc/m4")" \
    "a secret read by python"
printf '%s' "$C1" | kc add-generic-password -s cli -a c1
expect_exit 0 "add through the socket (secret on stdin)" kc find-generic-password -s cli -a c1
printf '%s' "$C2" | kc add-generic-password -s cli -a c2 --accessible when-unlocked-this-device-only
expect_exit 0 "find -w through the socket" kc find-generic-password -s cli -a c2 -w
expect_eq "$C2" "$(cat "$OUT")" "find -w prints a when-unlocked-this-device-only secret"
printf '%s' "$C3" >"$MP/svc/c3"
printf 'old' | kc add-generic-password -s cli -a c4
printf '%s' "$C4" | kc add-generic-password -U -s cli -a c4
expect_exit 0 "dump -d through the socket" kc dump-keychain -d
expect_contains "$OUT" "$C3" "dump -d shows a secret written through the mount"
expect_contains "$OUT" "$C4" "dump -d shows a secret updated through the socket"
printf '%s' "$C5" | kc add-generic-password -s cli -a c5 --accessible when-passcode-set-this-device-only
expect_exit 0 "find -w of a when-passcode-set secret" kc find-generic-password -s cli -a c5 -w
printf '%s' "$K1" | kc add-generic-password -s cli -a k1 --accessible always
expect_eq "$K1" "$(cat "$MP/cli/k1")" "an 'always' secret reads through the mount"
expect_present "while unlocked the scan finds the cached secret" "$pid" "$M1"

echo "== memory mappings"
python3 - "$MP/svc/m4" <<'PY' >"$OUT" 2>&1
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    print("mapped")
except OSError as e:
    print(os.strerror(e.errno))
PY
expect_eq "No such device" "$(cat "$OUT")" "a shared mapping of an item is refused (direct I/O)"
# A private mapping works and fills the page cache; its holder reads it again after the lock.
FIFO="$TEST_ROOT/mmap-fifo"
mkfifo "$FIFO"
printf '%s' "$M5" >"$MP/svc/m5"
python3 - "$MP/svc/m5" "$FIFO" >"$TEST_ROOT/mmap.out" 2>&1 <<'PY' &
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
print("before", m[:].decode(), flush=True)
open(sys.argv[2]).read()
print("after", m[:].decode(errors="replace"), flush=True)
PY
holder=$!
on_exit_kill "$holder"
i=0
while ! grep -q before "$TEST_ROOT/mmap.out" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
expect_eq "before $M5" "$(cat "$TEST_ROOT/mmap.out")" "a private mapping of an item shows its secret while unlocked"

echo "== after lock"
expect_exit 0 "lock" kc lock
expect_absent "after lock no when-unlocked* secret is in the daemon's memory" "$pid" \
    "printf=$M1" "cp-300KB=$M2" "dd=$M3" "python-read=$M4" "mmap=$M5" "socket-add=$C1" "find-w=$C2" \
    "dump-d=$C3" "socket-update=$C4" "passcode-set=$C5"
expect_present "the 'always' secret is still cached after lock (the scan can find secrets)" "$pid" "$K1"
echo go >"$FIFO"
wait "$holder"
holder_status=$?
expect_not_contains "$TEST_ROOT/mmap.out" "after $M5" "a mapping made before the lock no longer shows the secret"
expect_eq "135" "$holder_status" "touching it gives SIGBUS (128 + 7)"
expect_errno "a new open after lock is refused" "Required key not available" cat "$MP/svc/m5"

echo "== the passphrase is wiped once the keys are derived: unlock"
expect_exit 0 "unlock" kc unlock --passphrase-file "$PASS1"
expect_absent "unlock: the daemon's memory holds no passphrase" "$pid" "passphrase=$P1"
expect_eq "$M5" "$(cat "$MP/svc/m5")" "after unlock the item reads again"

echo "== the passphrase is wiped once the keys are derived: mount --foreground"
P2=$(marker)
PASS2="$TEST_ROOT/pass2"
printf '%s\n' "$P2" >"$PASS2"
S2="$TEST_ROOT/second.db"
MP2="$TEST_ROOT/mnt2"
mkdir "$MP2"
kc init --store "$S2" --scrypt-log-n 10 --passphrase-file "$PASS2" >/dev/null
on_exit_unmount "$MP2"
# Not through kc(): a function run in the background is a subshell, whose pid is not keychainfs's.
"$KEYCHAINFS_BIN" mount --foreground --store "$S2" "$MP2" --passphrase-file "$PASS2" >/dev/null 2>&1 &
fg=$!
on_exit_kill "$fg"
i=0
while [ "$(state "$MP2")" != unlocked ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
expect_eq "unlocked" "$(state "$MP2")" "mount --foreground serves"
expect_absent "mount --foreground: the process holds no passphrase" "$fg" "passphrase=$P2"
kc unmount "$MP2" >/dev/null 2>&1
wait "$fg"

finish
