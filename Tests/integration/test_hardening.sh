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
make_test_users $VICTIM $ATTACKER
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

make_fuse_namespace
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
expect_contains "$TEST_ROOT/control.txt" "control-secret-42" "the snooper copies a pipe's content from an ordinary process"

# `mount`: the passphrase goes to `_daemon` on its fd 3.
as_victim "$SNOOPER" _daemon 4 >"$TEST_ROOT/daemon.txt" &
SNOOP=$!
sleep 0.2
expect_exit 0 "the victim mounts while the snooper watches" as_victim "$BIN" mount "$V_MP" --passphrase-file "$USERS_ROOT/vpass"
wait $SNOOP
expect_eq "unlocked" "$(victim_state)" "the mount is unlocked"
V_DAEMON=$(json "$TEST_ROOT/v.json" 'd.get("daemon", {}).get("pid")')
[ -n "$V_DAEMON" ] && on_exit_kill "$V_DAEMON"
# (libfuse's fork for fusermount3 carries the daemon's argv too.)
if grep -q "^seen [1-9]" "$TEST_ROOT/daemon.txt"; then pass "the snooper saw the daemon start"; else fail "the snooper saw the daemon start" "$(cat "$TEST_ROOT/daemon.txt")"; fi
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
if grep -q "^seen [1-9]" "$TEST_ROOT/pam.txt"; then pass "the snooper saw the login helper start"; else fail "the snooper saw the login helper start" "$(cat "$TEST_ROOT/pam.txt")"; fi
expect_contains "$TEST_ROOT/pam.txt" "copied 0:" "it copied nothing from the helper's fd 3"
expect_not_contains "$TEST_ROOT/pam.txt" "$V_PASS" "not the login password"
# Every open of fd 3 failed: a socket cannot be opened through /proc (ENXIO), and once the
# helper is non-dumpable /proc/PID/fd is root's (EACCES).
if grep -q "^opened 0" "$TEST_ROOT/pam.txt" || ! grep -v "ENXIO\|EACCES" "$TEST_ROOT/pam.txt" | grep -q "^errno"; then
    pass "the snooper's opens failed with ENXIO or EACCES only"
else
    fail "the snooper's opens failed with ENXIO or EACCES only" "$(cat "$TEST_ROOT/pam.txt")"
fi

# A tracer that attached while the daemon was still dumpable stays attached after it hardens:
# the daemon then refuses the passphrase (strace -f follows it from mount).
expect_exit 0 "the victim unmounts" as_victim "$BIN" unmount "$V_MP"
expect_exit 70 "a traced daemon refuses the passphrase" as_victim strace -f -qq -o /dev/null "$BIN" mount "$V_MP" --passphrase-file "$USERS_ROOT/vpass"
expect_contains "$ERR" "being traced" "the error says why"
expect_exit 0 "untraced, it mounts again" as_victim "$BIN" mount "$V_MP" --passphrase-file "$USERS_ROOT/vpass"

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

echo "== 2. a new store is private from its first byte"
# A directory that others can traverse, as a 0755 home is, under umask 022.
PUB="$TEST_ROOT/pub"
mkdir -m 755 "$PUB"
(umask 022 && strace -f -qq -o "$TEST_ROOT/init.trace" -e trace=open,openat,creat,unlink,unlinkat,rename,renameat,renameat2,mknodat,bind \
    "$KEYCHAINFS_BIN" init --store "$PUB/s.db" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null 2>&1)
expect_eq "0" "$?" "init under strace and umask 022"
/usr/bin/python3 "$TESTS_DIR/strace_creations.py" "$TEST_ROOT/init.trace" "$PUB/s.db" >"$TEST_ROOT/created.txt"
expect_contains "$TEST_ROOT/created.txt" "created $PUB/s.db 0600 O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW" "the database is created O_EXCL|O_NOFOLLOW, 0600"
for suffix in -wal -shm -journal -reserve; do
    expect_contains "$TEST_ROOT/created.txt" "created $PUB/s.db$suffix 0600 O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW" "$suffix is created O_EXCL|O_NOFOLLOW, 0600"
done
# Whoever creates a store file (we, or SQLite re-creating a side file it deleted), never a mode others can read.
if [ -s "$TEST_ROOT/created.txt" ] && ! awk '$3 !~ /^0[0-7]00$/' "$TEST_ROOT/created.txt" | grep -q .; then
    pass "no store file is ever created with a mode others can read"
else
    fail "no store file is ever created with a mode others can read" "$(cat "$TEST_ROOT/created.txt")"
fi
expect_eq "" "$(find "$PUB" -name 's.db*' -perm /077)" "no store file is readable by others afterwards"
# SQLite gives its side files the database's mode (widening even empty ones made for it).
chmod 644 "$PUB/s.db"
expect_exit 74 "a store others can read is refused" kc dump-keychain --store "$PUB/s.db"
expect_contains "$ERR" "chmod 600 $PUB/s.db" "the error says how to make it private"
expect_eq "" "$(ls "$PUB" | grep -v '^s.db$' | grep -v '^s.db-reserve$')" "and nothing is left beside it"
chmod 600 "$PUB/s.db"
printf 'not a store\n' >"$PUB/text.db"
expect_exit 49 "a file readable by others that is not a store is still 'not a keychain'" kc dump-keychain --store "$PUB/text.db"
expect_eq "text.db" "$(ls "$PUB" | grep text)" "and nothing is left beside it either"
expect_exit 48 "init over an existing store is refused" kc init --store "$PUB/s.db" --scrypt-log-n 10 --passphrase-file "$PASSFILE"

# The socket beside a store in a private directory is the owner's alone from its bind.
SOCKSTORE="$TEST_ROOT/data/keychainfs/keychain.db"
init_store
mkdir -p "$TEST_ROOT/mnt"
(umask 022 && mount_kc "$TEST_ROOT/mnt")
expect_eq "srw-------" "$(stat -c %A "$SOCKSTORE.sock" 2>/dev/null)" "the control socket is 0600 under umask 022"
expect_eq "-rw-------" "$(stat -c %A "$SOCKSTORE.daemon" 2>/dev/null)" "the daemon record is 0600"
kc unmount "$TEST_ROOT/mnt" >/dev/null 2>&1

# A directory another user can write to, not sticky: they could replace the store's files.
OPEN="$TEST_ROOT/open"
mkdir -m 777 "$OPEN"
chmod 777 "$OPEN"
expect_exit 74 "init in a directory writable by others is refused" kc init --store "$OPEN/s.db" --scrypt-log-n 10 --passphrase-file "$PASSFILE"
expect_contains "$ERR" "can be written by other users" "the error says why"
expect_contains "$ERR" "chmod go-w $OPEN" "and names the fix"
expect_eq "" "$(ls "$OPEN")" "and nothing was created there"
cp "$PUB/s.db" "$OPEN/s.db"
expect_exit 74 "an existing store in such a directory is refused too" kc dump-keychain --store "$OPEN/s.db"

# In a sticky directory (as /tmp) another user can only plant names that make us refuse.
SHARED="$USERS_ROOT/shared"
mkdir -m 1777 "$SHARED"
chmod 1777 "$SHARED"
VSTORE="$SHARED/victim.db"
as_attacker sh -c "printf 'attacker frames' >'$VSTORE-wal'"
expect_exit 74 "init refuses a -wal planted by another user" as_victim "$BIN" init --store "$VSTORE" --scrypt-log-n 10 --passphrase-file "$USERS_ROOT/vpass"
expect_contains "$ERR" "$VSTORE-wal is not this store's file (it belongs to user $(id -u $ATTACKER))" "the error names the planted file and its owner"
expect_eq "attacker frames" "$(cat "$VSTORE-wal")" "the planted file is left as it was"
expect_eq "" "$(ls "$VSTORE" 2>/dev/null)" "no store was made"
as_attacker rm -f "$VSTORE-wal"
expect_exit 0 "once it is gone, init works in the sticky directory" as_victim "$BIN" init --store "$VSTORE" --scrypt-log-n 10 --passphrase-file "$USERS_ROOT/vpass"
expect_eq "-rw-------" "$(stat -c %A "$VSTORE")" "the store is 0600"
expect_exit 0 "the victim adds an item" as_victim "$BIN" add-generic-password --store "$VSTORE" -s svc -a acct -w v-secret --passphrase-file "$USERS_ROOT/vpass"

# SQLite removes -wal and -shm when the store is closed: another user may plant them then.
as_attacker sh -c "printf 'attacker frames' >'$VSTORE-wal'"
expect_exit 74 "an open refuses a -wal planted by another user" as_victim "$BIN" find-generic-password --store "$VSTORE" -s svc -w --passphrase-file "$USERS_ROOT/vpass"
expect_contains "$ERR" "$VSTORE-wal is not this store's file" "the error names it"
as_attacker rm -f "$VSTORE-wal"
as_victim sh -c "printf x >'$VSTORE-shm' && chmod 644 '$VSTORE-shm'"
expect_exit 74 "a -shm of the victim's readable by others is refused" as_victim "$BIN" find-generic-password --store "$VSTORE" -s svc -w --passphrase-file "$USERS_ROOT/vpass"
expect_contains "$ERR" "chmod 600 $VSTORE-shm" "the error says how to make it private"
as_victim rm -f "$VSTORE-shm"

# A -reserve symlink would grow whatever it points to (here a file of the victim's).
as_victim sh -c "printf precious >'$V_HOME/precious'"
as_victim rm -f "$VSTORE-reserve"
as_attacker ln -s "$V_HOME/precious" "$VSTORE-reserve"
expect_exit 74 "a -reserve symlink is refused" as_victim "$BIN" find-generic-password --store "$VSTORE" -s svc -w --passphrase-file "$USERS_ROOT/vpass"
expect_contains "$ERR" "$VSTORE-reserve is not this store's file (it is a symbolic link)" "the error names it"
expect_eq "8" "$(stat -c %s "$V_HOME/precious")" "the file it points to did not grow"
as_attacker rm -f "$VSTORE-reserve"
expect_exit 0 "once it is gone, the store opens" as_victim "$BIN" find-generic-password --store "$VSTORE" -s svc -w --passphrase-file "$USERS_ROOT/vpass"
expect_eq "v-secret" "$(cat "$OUT")" "with its item"

# A planted daemon record naming the attacker's socket: never trusted, never replaced.
as_attacker sh -c "printf '{\"pid\":1,\"storePath\":\"$VSTORE\",\"mountpoint\":\"/\",\"socketPath\":\"$A_HOME/evil.sock\"}' >'$VSTORE.daemon'"
as_victim mkdir -p "$V_HOME/mnt2"
expect_exit 74 "mount refuses a .daemon planted by another user" as_victim "$BIN" mount "$V_HOME/mnt2" --store "$VSTORE" --passphrase-file "$USERS_ROOT/vpass"
expect_contains "$ERR" "$VSTORE.daemon is not this store's daemon record" "the error names it"
expect_exit 69 "status does not follow the planted record" as_victim "$BIN" status --store "$VSTORE"
in_ns fusermount3 -u -z "$V_HOME/mnt2" 2>/dev/null
as_attacker rm -f "$VSTORE.daemon"

# The state directory (device key, rollback counters, daemon.log), under the widest umask, in
# a place others can reach: its missing parents are made 0700, so no one can swap it for theirs.
VX="$SHARED/vstate"
VX_STATE="$VX/a/b/state"
expect_exit 0 "the victim makes a store under umask 000 with a state directory in the shared place" \
    as_victim sh -c "umask 000 && XDG_STATE_HOME='$VX_STATE' '$BIN' init --store '$V_HOME/sx.db' --scrypt-log-n 10 --passphrase-file '$USERS_ROOT/vpass'"
expect_eq "700 700 700 700 700 600" \
    "$(stat -c %a "$VX" "$VX/a" "$VX/a/b" "$VX_STATE" "$VX_STATE/keychainfs" "$VX_STATE/keychainfs/device.key" | tr '\n' ' ' | sed 's/ $//')" \
    "the state directory, each parent it made, and the device key are the victim's alone"
expect_exit 1 "the attacker cannot move the state directory aside" as_attacker mv "$VX_STATE/keychainfs" "$VX/moved"
# A state directory another user made first, with their device key in it: never used.
AX="$SHARED/astate"
as_attacker sh -c "mkdir -m 777 '$AX' '$AX/keychainfs' && chmod 777 '$AX' '$AX/keychainfs' && head -c 32 /dev/urandom >'$AX/keychainfs/device.key' && chmod 644 '$AX/keychainfs/device.key' && : >'$AX/keychainfs/daemon.log' && chmod 666 '$AX/keychainfs/daemon.log'"
expect_exit 74 "init refuses another user's state directory" \
    as_victim env XDG_STATE_HOME="$AX" "$BIN" init --store "$V_HOME/sy.db" --no-passphrase
expect_contains "$ERR" "$AX/keychainfs belongs to user $(id -u $ATTACKER), not to this one" "the error names it and its owner"
expect_eq "" "$(ls "$V_HOME/sy.db" 2>/dev/null)" "no store was made with the attacker's device key"
expect_exit 74 "an open refuses it too, before reading the key or the counter there" \
    as_victim env XDG_STATE_HOME="$AX" "$BIN" find-generic-password --store "$V_HOME/sx.db" -s none -w --passphrase-file "$USERS_ROOT/vpass"
expect_contains "$ERR" "$AX/keychainfs belongs to user $(id -u $ATTACKER), not to this one" "the error names it and its owner"
expect_exit 74 "a mount refuses it" \
    as_victim env XDG_STATE_HOME="$AX" "$BIN" mount "$V_HOME/mnt2" --store "$V_HOME/sx.db" --passphrase-file "$USERS_ROOT/vpass"
in_ns fusermount3 -u -z "$V_HOME/mnt2" 2>/dev/null
expect_eq "0" "$(stat -c %s "$AX/keychainfs/daemon.log")" "and no daemon wrote its log there"
# The victim's own device key, made readable by others (a careless copy): refused, as ssh does.
as_victim chmod 644 "$VX_STATE/keychainfs/device.key"
expect_exit 74 "a device key others can read is refused" \
    as_victim env XDG_STATE_HOME="$VX_STATE" "$BIN" find-generic-password --store "$V_HOME/sx.db" -s none -w --passphrase-file "$USERS_ROOT/vpass"
expect_contains "$ERR" "device.key is not a private regular file of ours (owned by this user, mode 0600; it is user $V_UID's, mode 644)" "the error says what it must be"
expect_contains "$ERR" "(chmod 600 $VX_STATE/keychainfs/device.key)" "and the fix"
as_victim chmod 600 "$VX_STATE/keychainfs/device.key"
expect_exit 44 "once private again, the store opens (no such item)" \
    as_victim env XDG_STATE_HOME="$VX_STATE" "$BIN" find-generic-password --store "$V_HOME/sx.db" -s none -w --passphrase-file "$USERS_ROOT/vpass"
# Its daemon.log made readable by others: the daemon logs nothing rather than write item and
# program names there, and the mount says so (a background daemon's stderr is /dev/null).
as_victim sh -c "echo old >'$VX_STATE/keychainfs/daemon.log' && chmod 644 '$VX_STATE/keychainfs/daemon.log'"
expect_exit 0 "a mount with a daemon.log others can read" \
    as_victim env XDG_STATE_HOME="$VX_STATE" "$BIN" mount "$V_HOME/mnt2" --store "$V_HOME/sx.db" --passphrase-file "$USERS_ROOT/vpass"
expect_contains "$ERR" "warning: $VX_STATE/keychainfs/daemon.log is not a private regular file of ours" "says the log was refused"
expect_contains "$ERR" "(chmod 600 $VX_STATE/keychainfs/daemon.log); the daemon logs nothing" "with the fix"
expect_exit 0 "it unmounts" as_victim env XDG_STATE_HOME="$VX_STATE" "$BIN" unmount "$V_HOME/mnt2"
expect_eq "old" "$(cat "$VX_STATE/keychainfs/daemon.log")" "nothing was written to it"
as_attacker rm -rf "$AX"
rm -rf "$VX"

echo "== 3. another user's FUSE mount naming our store"
FAKE="$USERS_ROOT/fake_fuse"
gcc -O2 -o "$FAKE" "$TESTS_DIR/fake_fuse.c" $(pkg-config --cflags --libs fuse3) || { fail "the fake file system builds"; finish; }
V_STORE="$V_HOME/.local/share/keychainfs/keychain.db"
expect_exit 0 "the victim unmounts" as_victim "$BIN" unmount "$V_MP"
as_attacker mkdir "$A_HOME/fake"
as_attacker "$FAKE" "$A_HOME/fake" -f -o "fsname=$V_STORE,subtype=keychainfs" 2>/dev/null &
FAKE_PID=$!
on_exit "nsenter -t $NS -m fusermount3 -u -z '$A_HOME/fake' 2>/dev/null"
on_exit_kill "$FAKE_PID"
# The attack is there: the mount table shows a keychainfs mount of the victim's store.
has_fake() { in_ns grep -q " $A_HOME/fake .* - fuse.keychainfs $V_STORE " /proc/self/mountinfo; }
wait_for 5 has_fake
if has_fake; then pass "the attacker's mount poses as a keychainfs mount of the victim's store"
else fail "the attacker's mount poses as a keychainfs mount of the victim's store" "$(in_ns grep fake /proc/self/mountinfo)"; fi
expect_exit 69 "status: the victim's store is not mounted" as_victim "$BIN" status
expect_not_contains "$ERR" "stale" "status does not call the attacker's mount a stale mount of the store"
expect_not_contains "$ERR$(cat "$OUT")" "$A_HOME/fake" "nor mention it"
expect_exit 0 "the victim mounts" as_victim "$BIN" mount "$V_MP" --passphrase-file "$USERS_ROOT/vpass"
expect_eq "unlocked" "$(victim_state)" "the victim's status shows its own mount"
expect_eq "$V_MP" "$(json "$TEST_ROOT/v.json" 'd.get("mountpoint")')" "at its own mountpoint"
expect_exit 0 "the victim locks every mount (-a)" as_victim "$BIN" lock -a
expect_exit 69 "the attacker's mountpoint is not the victim's mount" as_victim "$BIN" unmount "$A_HOME/fake"
expect_exit 0 "the victim unmounts its own" as_victim "$BIN" unmount "$V_MP"
expect_exit 0 "and mounts again" as_victim "$BIN" mount "$V_MP" --passphrase-file "$USERS_ROOT/vpass"
expect_exit 0 "and unmounts by its store" as_victim "$BIN" unmount
if has_fake; then pass "the attacker's mount is untouched"; else fail "the attacker's mount is untouched"; fi

echo "== 4. limits on names"
GITHELPER="$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs"
SEG=$(printf '%0250d' 0 | tr 0 s)
# 15 segments of 250 bytes: the item's path below the mountpoint is 3796 bytes; 17 make 4298.
FITS="$SEG/$SEG/$SEG/$SEG/$SEG/$SEG/$SEG/$SEG/$SEG/$SEG/$SEG/$SEG/$SEG/$SEG/$SEG"
DEEP="$FITS/$SEG/$SEG"
mount_kc "$MP"
expect_exit 66 "CLI: an internet item deeper than PATH_MAX is refused" kc add-internet-password -s example.org -p "$DEEP" -a alice -w pw
expect_contains "$ERR" "PATH_MAX" "the error says why"
expect_exit 44 "and nothing was stored" kc find-internet-password -s example.org -a alice
expect_exit 0 "one that fits is stored" kc add-internet-password -s example.org -p "$FITS" -a alice -w fits-pw
expect_eq "fits-pw" "$(cd "$MP" && cat "internet/example.org/443/$FITS/alice")" "and opens by its path from the mountpoint"
# The tree, through descriptors relative to each directory, as the kernel allows past PATH_MAX.
/usr/bin/python3 - "$MP/internet/example.org/443" "$SEG" 17 >"$OUT" 2>&1 <<'PY'
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
for _ in range(int(sys.argv[3])):
    try:
        os.mkdir(sys.argv[2], dir_fd=fd)
    except FileExistsError:
        pass
    fd = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
try:
    f = os.open("alice", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(f, b"deep-pw")
    os.close(f)
    print("created")
except OSError as e:
    print(errno.errorcode[e.errno])
PY
expect_eq "ENAMETOOLONG" "$(cat "$OUT")" "tree: creating an item deeper than PATH_MAX fails with ENAMETOOLONG"
printf 'protocol=https\nhost=example.org\npath=%s\nusername=alice\npassword=git-pw\n' "$DEEP" | "$GITHELPER" store >"$OUT" 2>"$ERR"
expect_contains "$ERR" "the credential was not saved" "git: store of an item deeper than PATH_MAX says it was not saved"
expect_contains "$ERR" "PATH_MAX" "and why"
expect_eq "1" "$(kc dump-keychain | grep -c '^class: internet-password')" "and nothing was stored (only the item that fits)"

# Control characters: any name may hold them; every text channel escapes them.
expect_exit 0 "CLI: an account with a newline and an escape is stored" kc add-generic-password -s ctl -a "$(printf 'line1\nline2\033[31m')" -w ctl-pw
expect_eq "line1%0Aline2%1B[31m" "$(ls "$MP/ctl")" "tree: ls lists it escaped as %0A and %1B, on one line"
expect_eq "ctl-pw" "$(cat "$MP/ctl/line1%0Aline2%1B[31m")" "and it opens by that name"
expect_exit 0 "find-generic-password -g" kc find-generic-password -s ctl -g
expect_contains "$OUT" 'account: line1\nline2\x1b[31m' "CLI: the account is printed escaped, on one line"
expect_eq "0" "$(grep -c "$(printf '\033')" "$OUT")" "no raw escape reaches the terminal"
kc dump-keychain --json >"$TEST_ROOT/dump.json"
expect_eq "line1
line2$(printf '\033')[31m" "$(json "$TEST_ROOT/dump.json" '[i["account"] for i in d["items"] if i.get("service") == "ctl"][0]')" "JSON: the account is exact, escaped by JSON"
# git's protocol is one attribute a line: an account holding a newline could inject one.
expect_exit 0 "an internet item whose account holds a newline" kc add-internet-password -s git.example.org -a "$(printf 'bob\nhost=evil.example.org')" -w inj-pw
printf 'protocol=https\nhost=git.example.org\n\n' | "$GITHELPER" get >"$OUT" 2>"$ERR"
expect_not_contains "$OUT" "evil" "git: it is never sent (git's protocol cannot carry it)"
expect_not_contains "$OUT" "inj-pw" "nor its password"

finish
