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
FILL=${KEYCHAINFS_FILL_BIN:-$(dirname "$KEYCHAINFS_BIN")/keychainfs-fill}
READER="$TESTS_DIR/read_filled.py"

if [ "$(id -u)" -ne 0 ]; then
    echo "test_memory.sh: needs root (to read another process's memory and to make a test user)" >&2
    exit 2
fi

# alive PID: the process runs (a daemon that died may linger as a zombie where nobody reaps).
alive() { kill -0 "$1" 2>/dev/null && [ "$(awk '/^State:/ {print $2}' /proc/"$1"/status 2>/dev/null)" != Z ]; }

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
printf '%s' "$M5" >"$MP/svc/m5"
hold_private_mapping "$MP/svc/m5" "$TEST_ROOT/mmap.out"
expect_eq "before $M5" "$(cat "$TEST_ROOT/mmap.out")" "a private mapping of an item shows its secret while unlocked"

echo "== the CLI caught holding a secret"
# Each secret the CLI reads or prints, found only in its locked memory while it waits: on the
# stopped daemon after reading it, or on a full pipe while printing it (client_memory.py).
# test_git.sh does the same for the git helper.
client_memory() {
    python3 "$TESTS_DIR/client_memory.py" "$@" >"$OUT" 2>"$ERR"
    report_checks "$OUT" "$1" $?
}
A1=$(marker)
printf '%s' "$A1" >"$TEST_ROOT/a1"
client_memory "add (secret on stdin)" "$pid" "$SCAN" --feed "$TEST_ROOT/a1" "$A1" -- \
    "$KEYCHAINFS_BIN" add-generic-password -s cli -a a1
expect_eq "$A1" "$(cat "$MP/cli/a1")" "and the add went through"
# And after it sent its request, the secret in it, waiting for the answer.
A2=$(marker)
printf '%s' "$A2" >"$TEST_ROOT/a2"
client_memory "add, its request sent" "$pid" "$SCAN" --feed-sent "$TEST_ROOT/a2" "$A2" -- \
    "$KEYCHAINFS_BIN" add-generic-password -s cli -a a2
expect_eq "$A2" "$(cat "$MP/cli/a2")" "and that add went through"
client_memory "find -w (the front)" "$pid" "$SCAN" --block 1 "$C1" -- \
    "$KEYCHAINFS_BIN" find-generic-password -s cli -a c1 -w
client_memory "find -g (keychainfs-full, the password on stderr)" "$pid" "$SCAN" --block 2 "$C1" -- \
    "$KEYCHAINFS_BIN" find-generic-password -s cli -a c1 -g
# The dumps block on their last byte, once every secret's line has been built and written.
n=$(kc dump-keychain -d | wc -c)
client_memory "dump-keychain -d" "$pid" "$SCAN" --block "1:$((n - 1))" "$C3" "$C4" -- "$KEYCHAINFS_BIN" dump-keychain -d
# --json's secrets are base64: the markers are looked for as that.
B3=$(printf '%s' "$C3" | base64 -w0) B4=$(printf '%s' "$C4" | base64 -w0)
n=$(kc dump-keychain -d --json | wc -c)
client_memory "dump-keychain -d --json" "$pid" "$SCAN" --block "1:$((n - 1))" "$B3" "$B4" -- \
    "$KEYCHAINFS_BIN" dump-keychain -d --json
BP=$(marker)
printf '%s\n' "$BP" >"$TEST_ROOT/bp"
# The backup passphrase may be wiped by then (it is not yet: the key derived from it is).
client_memory "export (blocked on its last line)" "$pid" "$SCAN" --block 1 "?passphrase=$BP" "$C1" -- \
    "$KEYCHAINFS_BIN" export --backup-passphrase-file "$TEST_ROOT/bp" --scrypt-log-n 10 "$TEST_ROOT/mem.kcb"
client_memory "import -U (blocked on its last line)" "$pid" "$SCAN" --block 1 "$C1" -- \
    "$KEYCHAINFS_BIN" import -U --backup-passphrase-file "$TEST_ROOT/bp" "$TEST_ROOT/mem.kcb"
# The import replaced the items, and with them the daemon's cached copies: the 'always' one is
# read again, for the check after the lock that the scan finds a cached secret.
expect_eq "$K1" "$(cat "$MP/cli/k1")" "the 'always' secret reads after the import"

echo "== after lock"
expect_exit 0 "lock" kc lock
expect_absent "after lock no when-unlocked* secret is in the daemon's memory" "$pid" \
    "printf=$M1" "cp-300KB=$M2" "dd=$M3" "python-read=$M4" "mmap=$M5" "socket-add=$C1" "find-w=$C2" \
    "dump-d=$C3" "socket-update=$C4" "passcode-set=$C5" "add-caught=$A1" "add-sent=$A2"
expect_present "the 'always' secret is still cached after lock (the scan can find secrets)" "$pid" "$K1"
release_private_mapping "$TEST_ROOT/mmap.out"
expect_not_contains "$TEST_ROOT/mmap.out" "after $M5" "a mapping made before the lock no longer shows the secret"
expect_eq "135" "$holder_status" "touching it gives SIGBUS (128 + 7)"
expect_errno "a new open after lock is refused" "Required key not available" cat "$MP/svc/m5"

echo "== the passphrase is wiped once the keys are derived: unlock"
WRONG=$(marker)
printf '%s\n' "$WRONG" >"$TEST_ROOT/wrong"
expect_exit 51 "unlock with a wrong passphrase" kc unlock --passphrase-file "$TEST_ROOT/wrong"
expect_absent "a wrong passphrase is wiped too" "$pid" "wrong-passphrase=$WRONG"
expect_exit 0 "unlock" kc unlock --passphrase-file "$PASS1"
expect_absent "unlock: the daemon's memory holds no passphrase" "$pid" "passphrase=$P1"
expect_eq "$M5" "$(cat "$MP/svc/m5")" "after unlock the item reads again"

# new_marked_store STORE MOUNTPOINT LOG-N: a store whose passphrase is a new marker ($MARKED),
# in STORE.pass, and an empty mountpoint for it, unmounted at exit.
new_marked_store() {
    MARKED=$(marker)
    printf '%s\n' "$MARKED" >"$1.pass"
    mkdir "$2"
    kc init --store "$1" --scrypt-log-n "$3" --passphrase-file "$1.pass" >/dev/null
    on_exit_unmount "$2"
}

echo "== the passphrase is wiped once the keys are derived: mount --foreground"
S2="$TEST_ROOT/second.db"
MP2="$TEST_ROOT/mnt2"
new_marked_store "$S2" "$MP2" 10
P2=$MARKED PASS2="$S2.pass"
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

echo "== the passphrase while scrypt runs"
# The daemon is stopped in the middle of an unlock's derivation (its 128 MiB of scrypt mapped)
# and scanned: the passphrase may be in locked memory only. OpenSSL's scrypt had copied it into
# its own heap for the whole third of a second (a helper's audit found it there).
S4="$TEST_ROOT/slow.db"
MP4="$TEST_ROOT/mnt4"
new_marked_store "$S4" "$MP4" 17
expect_exit 0 "mount a store at scrypt log N 17" mount_kc "$MP4" --store "$S4" --passphrase-file "$S4.pass"
pid4=$(daemon_pid "$MP4")
kc lock --store "$S4" >/dev/null
python3 - "$pid4" "$KEYCHAINFS_BIN" "$S4" "$S4.pass" "$SCAN" "$MARKED" <<'PY' >"$OUT" 2>&1
import os, signal, subprocess, sys, time
pid, kc, store, passfile, scan, marker = int(sys.argv[1]), *sys.argv[2:]
def rss_kib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
base = rss_kib()
unlock = subprocess.Popen([kc, "unlock", "--store", store, "--passphrase-file", passfile])
deadline = time.monotonic() + 10
while rss_kib() < base + 64 * 1024 and time.monotonic() < deadline:
    time.sleep(0.002)
os.kill(pid, signal.SIGSTOP)
try:
    caught = rss_kib() >= base + 64 * 1024
    print(("ok" if caught else "not ok") + " the daemon is caught deriving (scrypt's memory mapped)")
    run = subprocess.run([sys.executable, scan, str(pid), "--unlocked-only", f"passphrase={marker}"], capture_output=True, text=True)
    print(("ok" if run.returncode == 0 else "not ok") + " mid-derivation, no passphrase in the daemon's unlocked memory"
          + ("" if run.returncode == 0 else f" ({run.stdout.strip()})"))
    # The passphrase is held while it derives: the scan finds it in locked memory.
    run = subprocess.run([sys.executable, scan, str(pid), f"passphrase={marker}"], capture_output=True, text=True)
    print(("ok" if run.returncode == 1 else "not ok") + " and the scan finds it in locked memory"
          + ("" if run.returncode == 1 else f" (memscan exited {run.returncode})"))
finally:
    os.kill(pid, signal.SIGCONT)
print(("ok" if unlock.wait(timeout=30) == 0 else "not ok") + " and the unlock completes")
PY
report_checks "$OUT" "the passphrase while scrypt runs" $?
kc unmount "$MP4" >/dev/null 2>&1

echo "== export at a terminal"
# At a terminal export shows a progress line, caught here mid-export. With the libraries bound
# lazily (a debug build's Swift runtime, started without the front's LD_BIND_NOW), the item
# copied last before it, the generic one after two internet ones, was on its stack.
S5="$TEST_ROOT/tty.db"
MP5="$TEST_ROOT/mnt5"
new_marked_store "$S5" "$MP5" 10
expect_exit 0 "mount a store of three items" mount_kc "$MP5" --store "$S5" --passphrase-file "$S5.pass"
I1=$(marker) I2=$(marker) E1=$(marker)
printf '%s' "$I1" | kc add-internet-password --store "$S5" -s inet.example.com -a bob -r htps
printf '%s' "$I2" | kc add-internet-password --store "$S5" -s inet2.example.com -a carol -r htps
printf '%s' "$E1" | kc add-generic-password --store "$S5" -s exp -a e1
client_memory "export (blocked on its progress line at a terminal)" "$(daemon_pid "$MP5")" "$SCAN" --block-tty 2 \
    "?$I1" "?$I2" "$E1" -- "$KEYCHAINFS_BIN" export --store "$S5" --backup-passphrase-file "$S5.pass" \
    --scrypt-log-n 10 "$TEST_ROOT/tty.kcb"
kc unmount "$MP5" >/dev/null 2>&1
kc unmount "$MP" >/dev/null 2>&1

# kib_of "LABEL: 123 KiB ..." FIELD: the number of KiB after FIELD in the status line.
status_kib() {
    sed -n "s/.*$2: \([0-9]*\) \(KiB\|bytes\).*/\1 \2/p" "$1" | head -1 |
        awk '{ print ($2 == "bytes") ? int(($1 + 1023) / 1024) : $1 }'
}

# as_user LIMIT-KIB NAME: runs the scenario below in a private mount namespace, where a
# /dev/fuse that anyone may open is bound over the host's (which stays as it is), as
# $USER_NAME with RLIMIT_MEMLOCK at LIMIT-KIB: a store of 5,000 items, mounted, every item
# read once. Leaves status, read result, daemon pid and log under $TEST_ROOT/NAME.
USER_NAME=kcfsmemory1
as_user() {
    limit=$1 dir="$TEST_ROOT/$2"
    mkdir -p "$dir/mnt" "$dir/run"
    chown -R "$USER_NAME:" "$dir"
    chmod 0700 "$dir/run"
    prefix=$(marker)
    echo "$prefix" >"$dir/prefix"
    unshare -m --propagation private sh -s "$dir" "$limit" "$USER_NAME" "$KEYCHAINFS_BIN" "$FILL" "$READER" "$prefix" <<'INNER'
dir=$1 limit=$2 user=$3 kc=$4 fill=$5 reader=$6 prefix=$7
mknod "$dir/fuse" c 10 229 && chmod 0666 "$dir/fuse" && mount --bind "$dir/fuse" /dev/fuse || exit 3
ulimit -l "$limit" || exit 3
exec setpriv --reuid="$user" --regid="$user" --clear-groups \
    env -i PATH="$PATH" HOME="$dir" XDG_DATA_HOME="$dir/data" XDG_STATE_HOME="$dir/state" XDG_RUNTIME_DIR="$dir/run" \
    sh -s "$dir" "$kc" "$fill" "$reader" "$prefix" <<'USER'
dir=$1 kc=$2 fill=$3 reader=$4 prefix=$5
cd "$dir"
printf 'user passphrase\n' >pass
"$kc" init --scrypt-log-n 10 --passphrase-file pass >/dev/null || exit 4
"$fill" data/keychainfs/keychain.db pass 5000 "$prefix" 500 || exit 5
"$kc" mount mnt --passphrase-file pass || exit 6
python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' data/keychainfs/keychain.db.daemon >pid
python3 "$reader" mnt 5000 500 "$prefix" >read
"$kc" status >status
USER
INNER
}

if ! id "$USER_NAME" >/dev/null 2>&1; then
    useradd --no-create-home --shell /bin/sh "$USER_NAME" || exit 2
    on_exit "userdel '$USER_NAME'"
fi
chmod 0711 "$TEST_ROOT"

echo "== keychainfs-full's realloc"
# Its semantics against glibc's, and its promise: a block that moves is zeroed (sd-bus grows a
# GetSecrets reply so; test_secret_service.sh checks the daemon itself).
if cc -O1 -Wno-use-after-free -o "$TEST_ROOT/wiping_realloc_check" "$TESTS_DIR/wiping_realloc_check.c" \
        "$REPO/Sources/CWipingRealloc/wiping_realloc.c" 2>"$ERR"; then
    "$TEST_ROOT/wiping_realloc_check" >"$OUT" 2>&1
    report_checks "$OUT" "wiping_realloc_check" $?
else
    fail "wiping_realloc_check.c builds" "$(cat "$ERR")"
fi
nm "$(dirname "$KEYCHAINFS_BIN")/keychainfs-full" | grep -q ' T realloc$' \
    && pass "keychainfs-full defines realloc" || fail "keychainfs-full defines realloc"

echo "== locked memory as a user with ulimit -l 1024, reading 5,000 items"
as_user 1024 limited
rc=$?
upid=$(cat "$TEST_ROOT/limited/pid" 2>/dev/null)
[ -n "$upid" ] && on_exit_kill "$upid"
expect_eq "0" "$rc" "the user made, filled, mounted and read the store"
expect_eq "0" "$(cut -d' ' -f1 "$TEST_ROOT/limited/read" 2>/dev/null)" "all 5,000 items read back right"
expect_eq "$(id -u "$USER_NAME")" "$(ps -o uid= -p "$upid" 2>/dev/null | tr -d ' ')" "the daemon runs as the user"
expect_eq "1048576" "$(awk '/^Max locked memory/ {print $4}' /proc/"$upid"/limits 2>/dev/null)" "with RLIMIT_MEMLOCK 1 MiB"
st="$TEST_ROOT/limited/status"
expect_contains "$st" "(limit 1024 KiB), unlocked: 0 bytes" "status: every key and secret is in locked memory"
expect_not_contains "$st" "refused" "the kernel never refused to lock"
expect_eq "$(awk '/^VmLck:/ {print $2}' /proc/"$upid"/status)" "$(status_kib "$st" "locked memory")" \
    "status reports the locked memory the kernel counts (VmLck)"
cached=$(sed -n 's/^cached secrets: \([0-9]*\),.*/\1/p' "$st")
[ -n "$cached" ] && [ "$cached" -lt 5000 ] && [ "$cached" -gt 1000 ] &&
    pass "the cache is bounded: it keeps $cached of the 5,000 secrets read" || fail "the cache is bounded" "$(cat "$st")"
expect_contains "$st" "of 256 KiB" "its budget is a quarter of the limit"
expect_present "the secrets read are in the daemon's memory (so the next scan can fail)" "$upid" \
    "$(cat "$TEST_ROOT/limited/prefix")"
python3 "$SCAN" "$upid" --unlocked-only "filled=$(cat "$TEST_ROOT/limited/prefix")" >"$OUT" 2>"$ERR"
expect_eq "0" "$?" "no secret read is in memory that may be swapped out"
expect_not_contains "$(cat "$TEST_ROOT/limited/state/keychainfs/daemon.log" 2>/dev/null)" "exhausted" "nothing exhausted in the log"
kill "$upid" 2>/dev/null
wait_gone "$upid" && pass "the daemon ends on SIGTERM" || fail "the daemon ends on SIGTERM"

echo "== locked memory exhausted: ulimit -l 16"
as_user 16 starved
rc=$?
upid=$(cat "$TEST_ROOT/starved/pid" 2>/dev/null)
[ -n "$upid" ] && on_exit_kill "$upid"
expect_eq "0" "$rc" "the user made, filled, mounted and read the store"
expect_eq "0" "$(cut -d' ' -f1 "$TEST_ROOT/starved/read" 2>/dev/null)" "all 5,000 items read back right, locked or not"
alive "$upid" && pass "the daemon did not crash" || fail "the daemon did not crash"
st="$TEST_ROOT/starved/status"
expect_contains "$st" "warning: locked memory" "status warns that locked memory ran out"
expect_contains "$st" "(limit 16 KiB)" "and the limit"
expect_contains "$(cat "$TEST_ROOT/starved/state/keychainfs/daemon.log" 2>/dev/null)" \
    "locked memory exhausted (RLIMIT_MEMLOCK 16 KiB)" "the daemon log says so"
kill "$upid" 2>/dev/null
wait_gone "$upid" && pass "the daemon ends on SIGTERM" || fail "the daemon ends on SIGTERM"

echo "== 100,000 distinct secrets read as root"
S3="$TEST_ROOT/many.db"
MP3="$TEST_ROOT/mnt3"
mkdir "$MP3"
prefix=$(marker)
kc init --store "$S3" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
expect_exit 0 "fill the store with 100,000 items" "$FILL" "$S3" "$PASSFILE" 100000 "$prefix"
expect_exit 0 "mount it" mount_kc "$MP3" --store "$S3"
rpid=$(daemon_pid "$MP3")
python3 "$READER" "$MP3" 100000 1000 "$prefix" >"$TEST_ROOT/many.read" 2>"$ERR"
expect_eq "0" "$(cut -d' ' -f1 "$TEST_ROOT/many.read")" "all 100,000 items read back right"
alive "$rpid" && pass "the daemon did not crash" || fail "the daemon did not crash" "$(head -3 "$ERR")"
maps=$(cat "/proc/$rpid/maps" 2>/dev/null | wc -l)
[ "$maps" -gt 0 ] && [ "$maps" -lt 5000 ] && pass "the daemon has $maps mappings, not one per secret" || fail "mappings" "$maps"
kc status --store "$S3" >"$TEST_ROOT/many.status"
expect_contains "$TEST_ROOT/many.status" "unlocked: 0 bytes" "status: all in locked memory"
lck=$(awk '/^VmLck:/ {print $2}' /proc/"$rpid"/status 2>/dev/null)
[ -n "$lck" ] && [ "$lck" -le 20480 ] && pass "locked memory stays bounded ($lck KiB)" || fail "locked memory stays bounded" "$lck KiB"

finish
