#!/bin/sh
# Issue 23, attacked as an adversary would, through the real programs: a hostile process of
# the same user copying the login password or the passphrase from a helper's fd 3; another
# user racing `init` for the store's files, or planting files beside it; another user's FUSE
# mount that names our store. Needs root: it creates two users, and gives them a 0666
# /dev/fuse only inside a private mount namespace (the host's /dev/fuse is never changed).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

if [ "$(id -u)" -ne 0 ]; then
    echo "skip: the attacks need two normal users and a private mount namespace (run as root)"
    finish
fi
for tool in unshare nsenter setpriv useradd userdel gcc strace; do
    command -v "$tool" >/dev/null 2>&1 || { fail "the tool $tool is installed" "scripts/install-deps"; finish; }
done

# json FILE EXPR: a value from a JSON file, as Python prints it.
json() { /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# wait_for SECONDS CMD...: runs CMD every 0.1 s until it succeeds.
wait_for() {
    limit=$(($1 * 10))
    shift
    n=0
    while ! "$@" >/dev/null 2>&1; do
        n=$((n + 1))
        [ $n -ge "$limit" ] && return 1
        sleep 0.1
    done
}

echo "== setup: a victim, an attacker, a namespace with a 0666 /dev/fuse"
VICTIM=kcfsharden1
ATTACKER=kcfsharden2
USERS_ROOT=$(mktemp -d) || exit 2
chmod 755 "$USERS_ROOT"
on_exit "rm -rf '$USERS_ROOT'"
for u in $VICTIM $ATTACKER; do
    # A user left behind by a run that was killed.
    id -u "$u" >/dev/null 2>&1 && userdel -f "$u" >/dev/null 2>&1
    useradd -m -d "$USERS_ROOT/$u" -s /bin/sh "$u" || { fail "useradd $u"; finish; }
    on_exit "userdel -f $u"
done
V_HOME="$USERS_ROOT/$VICTIM"
A_HOME="$USERS_ROOT/$ATTACKER"
chmod 755 "$V_HOME" "$A_HOME"
V_UID=$(id -u $VICTIM)
V_RUN="$V_HOME/run"
BIN="$USERS_ROOT/keychainfs"
cp "$KEYCHAINFS_BIN" "$BIN" && chmod 755 "$BIN"
cp "$(dirname "$KEYCHAINFS_BIN")/keychainfs-full" "$USERS_ROOT/keychainfs-full" && chmod 755 "$USERS_ROOT/keychainfs-full"
SNOOPER="$USERS_ROOT/fd_snooper"
gcc -O2 -o "$SNOOPER" "$TESTS_DIR/fd_snooper.c" || { fail "the snooper builds"; finish; }
V_PASS='my LOGIN password 42'
printf '%s\n' "$V_PASS" >"$USERS_ROOT/vpass"
chown "$VICTIM:" "$USERS_ROOT/vpass" && chmod 600 "$USERS_ROOT/vpass"

unshare -m --propagation private sleep 100000 &
NS=$!
on_exit "kill $NS"
sleep 0.3
NSDIR="$USERS_ROOT/ns"
mkdir "$NSDIR"
nsenter -t "$NS" -m sh -c "mount -t tmpfs -o mode=755 none '$NSDIR' && mknod -m 666 '$NSDIR/fuse' c 10 229 \
    && mount --bind '$NSDIR/fuse' /dev/fuse"
expect_eq "crw-rw-rw-" "$(nsenter -t "$NS" -m stat -c %A /dev/fuse)" "inside the namespace /dev/fuse is 0666"
expect_eq "crw-------" "$(stat -c %A /dev/fuse)" "the host's /dev/fuse is unchanged"

in_ns() { nsenter -t "$NS" -m "$@"; }
as_victim() {
    in_ns setpriv --reuid="$VICTIM" --regid="$VICTIM" --init-groups \
        env -i HOME="$V_HOME" USER="$VICTIM" LOGNAME="$VICTIM" PATH=/usr/bin:/bin XDG_RUNTIME_DIR="$V_RUN" "$@"
}
as_attacker() {
    in_ns setpriv --reuid="$ATTACKER" --regid="$ATTACKER" --init-groups \
        env -i HOME="$A_HOME" USER="$ATTACKER" LOGNAME="$ATTACKER" PATH=/usr/bin:/bin "$@"
}
as_victim mkdir -m 700 "$V_RUN"
V_MP="$V_HOME/mnt"
as_victim mkdir "$V_MP"
on_exit "nsenter -t $NS -m fusermount3 -u -z '$V_MP' 2>/dev/null"
expect_exit 0 "the victim makes a store" as_victim "$BIN" init --scrypt-log-n 10 --passphrase-file "$USERS_ROOT/vpass"
victim_state() {
    as_victim "$BIN" status --json >"$TEST_ROOT/v.json" 2>/dev/null
    json "$TEST_ROOT/v.json" 'd["state"]'
}
is_unlocked() { [ "$(victim_state)" = unlocked ]; }

echo "== 1. a snooper of /proc/PID/fd/3, as the same user"
# The snooper must work: an ordinary dumpable process holding a pipe gives up what waits in it.
as_victim "$SNOOPER" kcfs-snoop-control 1.5 >"$TEST_ROOT/control.txt" &
SNOOP=$!
sleep 0.2
# The pipe is the victim's, as `mount`'s and `unlock --pam`'s are: a pipe's inode belongs to its maker.
as_victim sh -c "printf control-secret-42 | sh -c 'exec 3<&0 </dev/null; sleep 1' kcfs-snoop-control"
wait $SNOOP
expect_contains "$TEST_ROOT/control.txt" "copied 17: control-secret-42" "the snooper copies a pipe's content from an ordinary process"

# `mount`: the passphrase goes to `_daemon` on its fd 3.
as_victim "$SNOOPER" _daemon 4 >"$TEST_ROOT/daemon.txt" &
SNOOP=$!
sleep 0.2
expect_exit 0 "the victim mounts while the snooper watches" as_victim "$BIN" mount "$V_MP" --passphrase-file "$USERS_ROOT/vpass"
wait $SNOOP
expect_eq "unlocked" "$(victim_state)" "the mount is unlocked"
V_DAEMON=$(json "$TEST_ROOT/v.json" 'd.get("daemon", {}).get("pid")')
[ -n "$V_DAEMON" ] && on_exit_kill "$V_DAEMON"
expect_contains "$TEST_ROOT/daemon.txt" "seen 1" "the snooper saw the daemon start"
expect_contains "$TEST_ROOT/daemon.txt" "copied 0:" "it copied nothing from the daemon's fd 3"
expect_not_contains "$TEST_ROOT/daemon.txt" "$V_PASS" "not the passphrase"

# `unlock --pam`: the login password goes to `_unlock-at-login` on its fd 3.
expect_exit 0 "the victim locks" as_victim "$BIN" lock
as_victim "$SNOOPER" _unlock-at-login 4 >"$TEST_ROOT/pam.txt" &
SNOOP=$!
sleep 0.2
printf '%s\0' "$V_PASS" | as_victim "$BIN" unlock --pam
wait_for 5 is_unlocked
expect_eq "unlocked" "$(victim_state)" "unlock --pam unlocks while the snooper watches"
wait $SNOOP
expect_contains "$TEST_ROOT/pam.txt" "seen 1" "the snooper saw the login helper start"
expect_contains "$TEST_ROOT/pam.txt" "copied 0:" "it copied nothing from the helper's fd 3"
expect_not_contains "$TEST_ROOT/pam.txt" "$V_PASS" "not the login password"
# Every open of fd 3 failed: a socket cannot be opened through /proc (ENXIO), and once the
# helper is non-dumpable /proc/PID/fd is root's (EACCES).
if grep -q "^opened 0" "$TEST_ROOT/pam.txt" || ! grep -v "ENXIO\|EACCES" "$TEST_ROOT/pam.txt" | grep -q "^errno"; then
    pass "the snooper's opens failed with ENXIO or EACCES only"
else
    fail "the snooper's opens failed with ENXIO or EACCES only" "$(cat "$TEST_ROOT/pam.txt")"
fi

# The clients that receive or read secrets are non-dumpable before they read: /proc/PID/ of a
# non-dumpable process belongs to root. Each waits here on a FIFO that nobody writes yet.
# proc_owner_while_waiting NAME CMD...: runs CMD as the victim with its stdin and fd 3 on a FIFO.
proc_owner_while_waiting() {
    name=$1
    shift
    fifo="$USERS_ROOT/fifo.$$"
    rm -f "$fifo" && mkfifo -m 666 "$fifo"
    as_victim sh -c 'exec "$@" 3<"$0" <&3' "$fifo" "$@" >/dev/null 2>&1 &
    runner=$!
    exec 8>"$fifo"
    sleep 1
    # The program is the one process whose fd 3 is the FIFO (sh execs it).
    pid=$(for p in /proc/[0-9]*; do [ "$(readlink "$p/fd/3" 2>/dev/null)" = "$fifo" ] && echo "${p#/proc/}"; done | tail -1)
    owner=$(stat -c %u "/proc/$pid/environ" 2>/dev/null)
    exec 8>&-
    wait $runner 2>/dev/null
    rm -f "$fifo"
    expect_eq "0" "$owner" "$name is non-dumpable while it waits for its input"
}
proc_owner_while_waiting "export" "$BIN" export "$V_HOME/waiting.kcbackup" --scrypt-log-n 10 --backup-passphrase-fd 3
expect_exit 0 "the victim exports a backup" as_victim "$BIN" export "$V_HOME/b.kcbackup" --scrypt-log-n 10 \
    --backup-passphrase-file "$USERS_ROOT/vpass"
proc_owner_while_waiting "import" "$BIN" import "$V_HOME/b.kcbackup" --backup-passphrase-fd 3
proc_owner_while_waiting "git-credential-keychainfs store" "$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs" store
finish
