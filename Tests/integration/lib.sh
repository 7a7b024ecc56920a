# Shared harness for the shell integration tests. Source it from a POSIX sh script:
#
#     . "$(dirname "$0")/lib.sh"
#     kc init --scrypt-log-n 10 --passphrase-file "$PASSFILE"
#     expect_exit 44 "missing item" kc find-generic-password -s nope
#     finish
#
# It gives each test run its own HOME, XDG directories and store under a temporary
# directory, counts passes and failures, and always cleans up on exit: registered commands
# run (mounts are unmounted, registered PIDs killed — by PID, never by name), then the
# temporary directory is removed.

set -u

TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$TESTS_DIR/../.." && pwd)
KEYCHAINFS_BIN=${KEYCHAINFS_BIN:-$REPO/.build/debug/keychainfs}
if [ ! -x "$KEYCHAINFS_BIN" ]; then
    echo "lib.sh: no keychainfs binary at $KEYCHAINFS_BIN (build first, or set KEYCHAINFS_BIN)" >&2
    exit 2
fi

TEST_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/kcfs-test.XXXXXX") || exit 2
export HOME="$TEST_ROOT/home"
export XDG_DATA_HOME="$TEST_ROOT/data"
export XDG_STATE_HOME="$TEST_ROOT/state"
export XDG_RUNTIME_DIR="$TEST_ROOT/run"
export XDG_CONFIG_HOME="$TEST_ROOT/config"
export KEYCHAINFS_STORE="$TEST_ROOT/data/keychainfs/keychain.db"
mkdir -p "$HOME" "$XDG_DATA_HOME" "$XDG_STATE_HOME" "$XDG_RUNTIME_DIR"
chmod 0700 "$XDG_RUNTIME_DIR"
unset KEYCHAINFS_PASSPHRASE 2>/dev/null || true

# The passphrase of every store the tests make, in a file (the newline is not part of it).
PASSPHRASE='correct horse battery staple'
PASSFILE="$TEST_ROOT/passphrase"
printf '%s\n' "$PASSPHRASE" >"$PASSFILE"
chmod 0600 "$PASSFILE"

# Where the last expect_* command's output went.
OUT="$TEST_ROOT/last.out"
ERR="$TEST_ROOT/last.err"

PASSED=0
FAILED=0
SKIPPED=0
CLEANUPS=""

# on_exit CMD: run CMD (a shell string) at exit, most recently registered first.
on_exit() {
    CLEANUPS="$1
$CLEANUPS"
}

# on_exit_kill PID: kill that process at exit if it still runs.
on_exit_kill() {
    on_exit "kill $1 2>/dev/null; sleep 0.2; kill -9 $1 2>/dev/null"
}

# on_exit_unmount MOUNTPOINT: unmount it at exit, through keychainfs and then fusermount3.
on_exit_unmount() {
    on_exit "\"\$KEYCHAINFS_BIN\" unmount '$1' >/dev/null 2>&1; fusermount3 -u -z '$1' >/dev/null 2>&1"
}

run_cleanups() {
    status=$?
    trap - EXIT INT TERM HUP
    printf '%s\n' "$CLEANUPS" | while IFS= read -r cmd; do
        [ -n "$cmd" ] && eval "$cmd" >/dev/null 2>&1
    done
    # A leftover mount would make rm fail on its contents; cleanups above should prevent it.
    rm -rf "$TEST_ROOT" 2>/dev/null
    exit "$status"
}
trap run_cleanups EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

kc() { "$KEYCHAINFS_BIN" "$@"; }

pass() {
    PASSED=$((PASSED + 1))
    printf 'ok   %s\n' "$1"
}

fail() {
    FAILED=$((FAILED + 1))
    printf 'FAIL %s\n' "$1"
    shift
    for line in "$@"; do printf '     %s\n' "$line"; done
}

# skip WHAT WHY: checks that cannot run here, named with the reason; counted in the summary.
# Never for a tool that scripts/install-deps installs: `have` makes its absence a failure.
skip() {
    SKIPPED=$((SKIPPED + 1))
    printf 'skip %s: %s\n' "$1" "$2"
}

# have TOOL: whether TOOL is on PATH; if not, that is a failure (scripts/install-deps installs
# every tool the tests use), and the checks that need it are left out.
have() {
    command -v "$1" >/dev/null 2>&1 && return 0
    fail "$1 is installed" "scripts/install-deps installs it"
    return 1
}

show_output() {
    [ -s "$OUT" ] && sed 's/^/     stdout: /' "$OUT" | head -20
    [ -s "$ERR" ] && sed 's/^/     stderr: /' "$ERR" | head -20
    return 0
}

# expect_exit CODE NAME CMD...: runs CMD (stdin as given to expect_exit), output to $OUT and
# $ERR, and checks its exit status.
expect_exit() {
    want=$1 name=$2
    shift 2
    "$@" >"$OUT" 2>"$ERR"
    got=$?
    if [ "$got" -eq "$want" ]; then
        pass "$name"
    else
        fail "$name" "expected exit $want, got $got: $*"
        show_output
    fi
}

# report_checks FILE WHAT RC: counts a helper script's own checks, its lines "ok NAME" and
# "not ok NAME"; a script that printed none, or exited RC other than 0 with no check failed
# (it died after its checks), fails as WHAT.
report_checks() {
    n=0 bad=0
    while IFS= read -r line; do
        case $line in
            "ok "*) pass "${line#ok }"; n=$((n + 1)) ;;
            "not ok "*) fail "${line#not ok }"; n=$((n + 1)) bad=$((bad + 1)) ;;
        esac
    done <"$1"
    if [ "$n" -eq 0 ]; then
        fail "$2" "it reported no check"
        show_output
    elif [ "$3" -ne 0 ] && [ "$bad" -eq 0 ]; then
        fail "$2" "it exited $3 after its checks passed"
        show_output
    fi
    return 0
}

# expect_eq WANT GOT NAME
expect_eq() {
    if [ "$1" = "$2" ]; then pass "$3"; else fail "$3" "expected: [$1]" "got:      [$2]"; fi
}

# expect_contains FILE-OR-TEXT NEEDLE NAME: a file's content, or else the text itself, contains NEEDLE.
expect_contains() {
    if [ -f "$1" ]; then haystack=$(cat "$1"); else haystack=$1; fi
    case $haystack in
        *"$2"*) pass "$3" ;;
        *) fail "$3" "expected to contain: [$2]" "in: [$(printf '%s' "$haystack" | head -c 2000)]" ;;
    esac
}

# expect_not_contains FILE-OR-TEXT NEEDLE NAME
expect_not_contains() {
    if [ -f "$1" ]; then haystack=$(cat "$1"); else haystack=$1; fi
    case $haystack in
        *"$2"*) fail "$3" "expected not to contain: [$2]" ;;
        *) pass "$3" ;;
    esac
}

# init_store [ARGS...]: a fresh store with the test passphrase (fast scrypt), at $KEYCHAINFS_STORE
# unless --store is among ARGS.
# store_sum STORE: a hash of the store's database, WAL and shared memory.
store_sum() { cat "$1" "$1-wal" "$1-shm" 2>/dev/null | sha256sum | cut -c1-64; }
# store_settled STORE: waits until the daemon's own commit after creates (their index entries
# moved, 0.1 s after the first) is done: the same sum 0.3 s apart (at most 3 s); prints it.
store_settled() {
    a=$(store_sum "$1")
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        sleep 0.3
        b=$(store_sum "$1")
        [ "$a" = "$b" ] && break
        a=$b
    done
    echo "$a"
}

# A store alone on a tmpfs of SIZE at $TEST_ROOT/NAME (a full disk is then a few writes
# away): sets SMALL_FS and SMALL_STORE. Fails when the tmpfs cannot be mounted (needs root).
small_store() {
    SMALL_FS="$TEST_ROOT/$1"
    mkdir -p "$SMALL_FS"
    mount -t tmpfs -o "size=$2" tmpfs "$SMALL_FS" 2>/dev/null || return 1
    on_exit "umount -l '$SMALL_FS'"
    SMALL_STORE="$SMALL_FS/k.db"
    kc init --store "$SMALL_STORE" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
}

init_store() {
    kc init --scrypt-log-n 10 --passphrase-file "$PASSFILE" "$@" >/dev/null
}

# mount_guarded_secret_service MOUNTPOINT: a new test store mounted there with the Secret
# Service (unmounted at exit), holding svc/acct = hunter2 listing only /usr/bin/head, and
# svc/open = open-secret with no list; for the per-program access tests over D-Bus.
mount_guarded_secret_service() {
    init_store
    on_exit_unmount "$1"
    expect_exit 0 "mount --secret-service" kc mount "$1" --secret-service --passphrase-file "$PASSFILE"
    printf 'hunter2' | kc add-generic-password -s svc -a acct -T /usr/bin/head >/dev/null
    printf 'open-secret' | kc add-generic-password -s svc -a open >/dev/null
}

# finish: prints the summary (scripts/test adds up these lines); the script exits non-zero if
# anything failed.
finish() {
    echo
    echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
    [ "$FAILED" -eq 0 ]
    exit $?
}

# make_test_users NAME...: creates each user (a leftover of a killed run is removed first)
# with a home under one fresh 0755 directory, $USERS_ROOT, and registers their removal
# and the directory's at exit. Needs root; a failure to create one fails the script.
make_test_users() {
    USERS_ROOT=$(mktemp -d) || exit 2
    chmod 755 "$USERS_ROOT"
    on_exit "rm -rf '$USERS_ROOT'"
    for u in "$@"; do
        id -u "$u" >/dev/null 2>&1 && userdel -f "$u" >/dev/null 2>&1
        useradd -m -d "$USERS_ROOT/$u" -s /bin/sh "$u" || { fail "useradd $u"; finish; }
        on_exit "userdel -f $u"
    done
}

# make_fuse_namespace: a private mount namespace (a sleeping process, $NS) whose /dev/fuse is a
# 0666 node on a tmpfs at $USERS_ROOT/ns ($NSDIR), so normal users can mount there while the
# host's /dev/fuse stays 0600. Ended at exit. EXTRA, if given, runs inside it (as sh -c) after
# the tmpfs is mounted and before the bind (more nodes or files; name them under $USERS_ROOT/ns).
make_fuse_namespace() {
    unshare -m --propagation private sleep 100000 &
    NS=$!
    on_exit "kill $NS"
    sleep 0.3
    NSDIR="$USERS_ROOT/ns"
    mkdir "$NSDIR"
    nsenter -t "$NS" -m sh -c "mount -t tmpfs -o mode=755 none '$NSDIR' && mknod -m 666 '$NSDIR/fuse' c 10 229 \
        ${1:+&& $1} && mount --bind '$NSDIR/fuse' /dev/fuse"
}
