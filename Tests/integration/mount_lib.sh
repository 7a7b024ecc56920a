# Mount helpers for the integration tests; source after lib.sh.

MP="$TEST_ROOT/mnt"
mkdir -p "$MP"

# mount_kc MOUNTPOINT [ARGS...]: mounts the test store with the test passphrase and makes
# sure it is unmounted, and its daemon ended, at exit.
mount_kc() {
    mp=$1
    shift
    mount_with kc "$mp" --passphrase-file "$PASSFILE" "$@"
}

# mount_with COMMAND MOUNTPOINT ARGS...: the same with another keychainfs command (a device's
# wrapper with its own XDG directories) and arguments; $pid is its daemon.
mount_with() {
    with=$1 mp=$2
    shift 2
    on_exit_unmount "$mp"
    $with mount "$mp" "$@" >"$OUT" 2>"$ERR"
    rc=$?
    pid=$(daemon_pid "$mp")
    [ -n "$pid" ] && on_exit_kill "$pid"
    return $rc
}

# daemon_pid MOUNTPOINT: the PID of the daemon serving it: the mount table names the store,
# and the record beside the store (<store>.daemon) the daemon.
daemon_pid() {
    python3 - "$1" <<'PY'
import json, os, sys
mp = os.path.realpath(sys.argv[1])
def unescape(s):
    return s.encode().decode("unicode_escape").encode("latin-1").decode()
for line in open("/proc/self/mountinfo"):
    f = line.split()
    dash = f.index("-")
    if unescape(f[4]) == mp and f[dash + 1] == "fuse.keychainfs":
        try:
            print(json.load(open(unescape(f[dash + 2]) + ".daemon"))["pid"])
        except (OSError, ValueError, KeyError):
            pass
PY
}

# ended PID: the process has ended: gone, or a zombie with no thread left (a daemon is an
# orphan, and when its reaper collects it is the reaper's business: this machine's init does
# so every 2 s or so). The main thread turns zombie before the others have closed the files
# (a FUSE daemon's /dev/fuse), so a zombie leader alone is not the end.
ended() {
    ! kill -0 "$1" 2>/dev/null || { [ "$(awk '/^State:/ {print $2}' /proc/"$1"/status 2>/dev/null)" = Z ] &&
        [ "$(ls /proc/"$1"/task 2>/dev/null | wc -l)" -le 1 ]; }
}

# wait_gone PID: waits up to 5 s for the process to end.
wait_gone() {
    i=0
    while ! ended "$1" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    ended "$1"
}

# rename2 FROM TO FLAGS: renameat2(2), which coreutils does not expose; prints strerror on failure.
rename2() {
    python3 - "$1" "$2" "$3" <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), int(sys.argv[3])) != 0:
    print(os.strerror(ctypes.get_errno()), file=sys.stderr)
    sys.exit(1)
PY
}

# hold_private_mapping FILE OUT: a python process maps FILE privately and writes "before
# TEXT" to OUT, then waits for release_private_mapping and writes "after TEXT", touching the
# mapping again. Sets $holder (ended at exit); waits up to 5 s for the first line.
hold_private_mapping() {
    mkfifo "$2.fifo"
    python3 - "$1" "$2.fifo" >"$2" 2>&1 <<'PY' &
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
    while ! grep -q before "$2" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
}

# release_private_mapping OUT: lets the holder go on; sets $holder_status. The fifo is opened
# read-write, so that this does not wait for a holder that is gone; the shell reports the
# holder's SIGBUS on stderr, the status says it.
release_private_mapping() {
    echo go 1<>"$1.fifo"
    { wait "$holder"; holder_status=$?; } 2>/dev/null
}

# state MOUNTPOINT: the root's user.keychain.state.
state() { getfattr --only-values -n user.keychain.state "$1" 2>/dev/null; }

# expect_errno NAME MESSAGE CMD...: CMD fails and its stderr carries strerror's MESSAGE.
expect_errno() {
    name=$1 message=$2
    shift 2
    "$@" >"$OUT" 2>"$ERR"
    rc=$?
    if [ $rc -ne 0 ] && grep -q "$message" "$ERR"; then
        pass "$name"
    else
        fail "$name" "expected failure with '$message', got exit $rc: $*"
        show_output
    fi
}

# start_slow_fuse EXE: Tests/integration/slow_fuse.c, built into $W and mounted at $W/slow,
# serving EXE as its executable `exe` and a file `f` whose pages come only once $W/slow.release
# exists (and whose attributes are held back while $W/slow.hold exists, its reads while
# $W/slow.readhold does). Its pid in SFP;
# unmounted and ended on exit. Non-zero when it cannot be built.
start_slow_fuse() {
    gcc -O2 -o "$W/slow_fuse" "$TESTS_DIR/slow_fuse.c" $(pkg-config --cflags --libs fuse3) || { fail "compile slow_fuse.c"; return 1; }
    mkdir -p "$W/slow"
    SLOW_RELEASE="$W/slow.release" SLOW_EXE="$1" SLOW_STAT_HOLD="$W/slow.hold" SLOW_READ_HOLD="$W/slow.readhold" \
        "$W/slow_fuse" "$W/slow" -f 2>/dev/null &
    SFP=$!
    on_exit "touch '$W/slow.release'; rm -f '$W/slow.hold' '$W/slow.readhold'; umount -l '$W/slow' 2>/dev/null"
    on_exit_kill "$SFP"
    i=0
    while ! mountpoint -q "$W/slow" && [ $i -lt 200 ]; do sleep 0.01; i=$((i + 1)); done
}

# start_slow_clients N TAG ARGS...: N processes of the slow file system's executable (run
# with ARGS and then $W/go.TAG, the file whose existence starts them), each writing to
# $W/client.TAG.I, waited for until each says "ready". Their pids are added to SLOW_CLIENTS.
start_slow_clients() {
    n=$1 tag=$2
    shift 2
    i=0
    while [ $i -lt "$n" ]; do
        "$W/slow/exe" "$@" "$W/go.$tag" >"$W/client.$tag.$i" 2>&1 &
        SLOW_CLIENTS="${SLOW_CLIENTS:-} $!"
        on_exit_kill $!
        i=$((i + 1))
    done
    for i in $(seq 0 $((n - 1))); do
        j=0
        while ! grep -q ready "$W/client.$tag.$i" 2>/dev/null && [ $j -lt 500 ]; do sleep 0.01; j=$((j + 1)); done
    done
}

# stop_slow_clients: ends those start_slow_clients started.
stop_slow_clients() {
    for p in ${SLOW_CLIENTS:-}; do kill "$p" 2>/dev/null; done
    for p in ${SLOW_CLIENTS:-}; do wait "$p" 2>/dev/null; done
    SLOW_CLIENTS=""
}

# answered_within SECONDS NAME CMD...: CMD ends (with any status) within SECONDS; its output
# in $OUT and $ERR.
answered_within() {
    limit=$1 name=$2
    shift 2
    timeout "$limit" "$@" >"$OUT" 2>"$ERR"
    rc=$?
    if [ $rc -eq 124 ]; then fail "$name" "still waiting after $limit s: $*"; else pass "$name"; fi
    return $rc
}

# prepare_user_store NAME: a normal user NAME (removed at exit), copies of keychainfs and
# keychainfs-full it can run ($BIN and $USERS_ROOT/keychainfs-full), the test passphrase in
# $USERS_ROOT/pass, a private mount namespace with a 0666 /dev/fuse ($NS), its runtime
# directory and mountpoint $UMP (unmounted at exit), and a store made with the passphrase.
# Then `as_user CMD...` runs CMD in the namespace as the user. Not root: the script's normal-user
# part is skipped there, and it finishes.
prepare_user_store() {
    if [ "$(id -u)" -ne 0 ]; then
        skip "the normal-user part" "it needs root to make the user and the namespace"
        finish
    fi
    for tool in unshare nsenter setpriv useradd userdel; do have "$tool" || finish; done
    U=$1
    make_test_users "$U"
    UH="$USERS_ROOT/$U"
    BIN="$USERS_ROOT/keychainfs"
    for b in keychainfs keychainfs-full; do cp "$(dirname "$KEYCHAINFS_BIN")/$b" "$USERS_ROOT/$b" && chmod 755 "$USERS_ROOT/$b"; done
    printf '%s\n' "$PASSPHRASE" >"$USERS_ROOT/pass"
    chown "$U:" "$USERS_ROOT/pass" && chmod 600 "$USERS_ROOT/pass"
    make_fuse_namespace
    as_user mkdir -m 700 "$UH/run" "$UH/mnt"
    UMP="$UH/mnt"
    on_exit "nsenter -t $NS -m fusermount3 -u -z '$UMP' 2>/dev/null"
    expect_exit 0 "the user makes a store" as_user "$BIN" init --scrypt-log-n 10 --passphrase-file "$USERS_ROOT/pass"
}

as_user() {
    nsenter -t "$NS" -m setpriv --reuid="$U" --regid="$U" --init-groups \
        env -i HOME="$UH" USER="$U" LOGNAME="$U" PATH=/usr/bin:/bin XDG_RUNTIME_DIR="$UH/run" "$@"
}
