#!/bin/sh
# The mount, driven through real programs: generic passwords, file semantics, errno,
# attributes, lock states and the daemon's life cycle.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

init_store

echo "== mount and basic files"
expect_exit 0 "mount returns once ready" mount_kc "$MP"
expect_eq "unlocked" "$(state "$MP")" "state is unlocked after mount with a passphrase"
expect_exit 0 "mkdir -p a service" mkdir -p "$MP/github"
sh -c "printf 's3cret' > '$MP/github/alice'"
expect_eq "s3cret" "$(cat "$MP/github/alice")" "cat prints the secret written by printf"
expect_eq "6" "$(stat -c %s "$MP/github/alice")" "st_size is exact (printf: no newline)"
sh -c "echo pw > '$MP/github/bob'"
expect_eq "3" "$(stat -c %s "$MP/github/bob")" "echo stores the newline too"
expect_eq "600 700" "$(stat -c %a "$MP/github/alice") $(stat -c %a "$MP/github")" "files 0600, directories 0700"
expect_eq "$(id -u)" "$(stat -c %u "$MP/github/alice")" "owned by whoever mounted"
expect_eq "alice bob" "$(ls "$MP/github" | tr '\n' ' ' | sed 's/ $//')" "ls lists accounts"
expect_contains "$(ls "$MP")" "internet" "the root lists internet/"
mkdir -p "$MP/new/" && sh -c "echo x > '$MP/new/acct'"
expect_eq "x" "$(cat "$MP/new/acct")" "mkdir -p then write works"

echo "== binary secrets, offsets, append, truncate"
printf 'a\000b\000\377c' >"$TEST_ROOT/bin"
cp "$TEST_ROOT/bin" "$MP/github/binary"
expect_exit 0 "a binary secret with NUL bytes round-trips (cp, cmp)" cmp "$TEST_ROOT/bin" "$MP/github/binary"
sh -c "printf 'more' >> '$MP/github/alice'"
expect_eq "s3cretmore" "$(cat "$MP/github/alice")" "O_APPEND appends"
printf 'XY' | dd of="$MP/github/alice" bs=1 seek=2 conv=notrunc 2>/dev/null
expect_eq "s3XYetmore" "$(cat "$MP/github/alice")" "a write at an offset changes only those bytes"
truncate -s 4 "$MP/github/alice"
expect_eq "s3XY" "$(cat "$MP/github/alice")" "truncate shrinks"
truncate -s 6 "$MP/github/alice"
expect_eq "s3XY00" "$(od -An -c "$MP/github/alice" | tr -d ' \\\n')" "truncate grows with zero bytes"
sh -c "printf 'fresh' > '$MP/github/alice'"
expect_eq "fresh" "$(cat "$MP/github/alice")" "O_TRUNC replaces the value"

echo "== editors and tools"
sh -c "printf 'line one\nline two\n' > '$MP/github/edit'"
expect_exit 0 "sed -i edits in place" sed -i 's/two/2/' "$MP/github/edit"
expect_eq "line one
line 2" "$(cat "$MP/github/edit")" "sed -i saved the new value"
if have vim.tiny; then
    expect_exit 0 "vim edits and saves" vim.tiny -N -u NONE -i NONE -es -c '%s/one/1/' -c 'wq' "$MP/github/edit"
    expect_eq "line 1
line 2" "$(cat "$MP/github/edit")" "vim saved the new value"
fi
expect_eq "alice binary bob edit" "$(ls "$MP/github" | tr '\n' ' ' | sed 's/ $//')" "no stray entries left by sed or vim"
sh -c "printf 'tmpvalue' > '$MP/github/tmp'"
expect_exit 0 "mv onto an existing item replaces it" mv "$MP/github/tmp" "$MP/github/bob"
expect_eq "tmpvalue" "$(cat "$MP/github/bob")" "the replaced item has the new value"
expect_exit 0 "mv renames an account" mv "$MP/github/bob" "$MP/github/robert"
expect_exit 0 "mv moves an item to another service" mv "$MP/github/robert" "$MP/new/robert"
expect_eq "tmpvalue" "$(cat "$MP/new/robert")" "the moved item keeps its secret"
expect_exit 44 "the old name is gone from the store" kc find-generic-password -s github -a bob
printf 'src' >"$TEST_ROOT/src" && chmod 600 "$TEST_ROOT/src"
expect_exit 0 "cp -p works" cp -p "$TEST_ROOT/src" "$MP/github/copied"
expect_exit 0 "install -m 600 works" install -m 600 "$TEST_ROOT/src" "$MP/github/installed"
if have rsync; then
    expect_exit 0 "rsync -a works" rsync -a "$TEST_ROOT/src" "$MP/github/synced"
    expect_eq "src" "$(cat "$MP/github/synced")" "rsync wrote the value"
fi
expect_eq "src" "$(cat "$MP/github/installed")" "install wrote the value"
expect_exit 0 "chmod 600 is accepted" chmod 600 "$MP/github/alice"
expect_exit 0 "chmod 400 (narrower) is accepted" chmod 400 "$MP/github/alice"
expect_errno "chmod 644 (wider) is EPERM" "Operation not permitted" chmod 644 "$MP/github/alice"
expect_errno "chmod 755 on a directory is EPERM" "Operation not permitted" chmod 755 "$MP/github"
expect_errno "chown to another user is EPERM" "Operation not permitted" chown 65534 "$MP/github/alice"
expect_exit 0 "touch (utimens) is accepted" touch "$MP/github/alice"
expect_exit 0 "statfs works" stat -f "$MP"
expect_exit 0 "fsync works" python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_WRONLY|os.O_APPEND); os.write(fd, b'!'); os.fsync(fd); os.close(fd)" "$MP/github/alice"
expect_eq "fresh!" "$(cat "$MP/github/alice")" "the fsynced write is there"

echo "== errno"
expect_errno "a file directly in the root is EPERM" "Operation not permitted" sh -c "echo x > '$MP/rootfile'"
expect_errno "link is EPERM" "Operation not permitted" ln "$MP/github/alice" "$MP/github/hard"
expect_errno "symlink is EPERM" "Operation not permitted" ln -s alice "$MP/github/soft"
expect_errno "mknod (mkfifo) is EPERM" "Operation not permitted" mkfifo "$MP/github/fifo"
expect_errno "rmdir of a non-empty service is ENOTEMPTY" "Directory not empty" rmdir "$MP/github"
expect_errno "mkdir inside a service is EPERM" "Operation not permitted" mkdir "$MP/github/sub"
setfattr -n user.keychain.accessible -v after-first-unlock "$MP/github/edit"
setfattr -n user.keychain.label -v "Edited" "$MP/github/edit"
sed -i 's/line/Line/' "$MP/github/edit"
expect_eq "after-first-unlock Edited" "$(getfattr --only-values -n user.keychain.accessible "$MP/github/edit") $(getfattr --only-values -n user.keychain.label "$MP/github/edit")" "a save through a temporary file keeps the item's class and label"
expect_errno "a missing item is ENOENT" "No such file or directory" cat "$MP/github/nobody"
expect_errno "RENAME_NOREPLACE onto an item is EEXIST" "File exists" rename2 "$MP/github/copied" "$MP/github/alice" 1
expect_errno "RENAME_EXCHANGE is EINVAL" "Invalid argument" rename2 "$MP/github/copied" "$MP/github/alice" 2
expect_exit 0 "RENAME_NOREPLACE onto a free name works" rename2 "$MP/github/copied" "$MP/github/copied2" 1
expect_errno "a write over 16 MiB is EFBIG" "File too large" sh -c "head -c 17000000 /dev/zero > '$MP/github/alice'"
expect_eq "fresh!" "$(cat "$MP/github/alice")" "the failed oversized write lost nothing"
expect_errno "a new file over 16 MiB is EFBIG" "File too large" sh -c "head -c 17000000 /dev/zero > '$MP/github/toobig'"
expect_errno "and leaves no empty item behind" "No such file or directory" stat "$MP/github/toobig"
expect_errno "truncate over 16 MiB is EFBIG" "File too large" truncate -s 17M "$MP/github/alice"
sh -c "head -c 16777216 /dev/zero > '$MP/github/max'"
expect_eq "16777216" "$(stat -c %s "$MP/github/max")" "exactly 16 MiB is accepted"
long=$(python3 -c "print('%25' * 86)")
expect_errno "a name over 255 bytes once escaped is ENAMETOOLONG" "File name too long" sh -c "echo x > '$MP/github/$long'"
expect_exit 66 "and the CLI refuses its unescaped form" kc add-generic-password -s github -a "$(python3 -c "print('%' * 86)")" -w x
expect_errno "a bad escape is EINVAL" "Invalid argument" sh -c "echo x > '$MP/github/100%'"
expect_errno "security.* attributes are ENODATA" "No such attribute" getfattr -n security.selinux "$MP/github/alice"
expect_errno "unknown attributes are ENODATA" "No such attribute" getfattr -n user.keychain.colour "$MP/github/alice"
chmod 755 "$TEST_ROOT"
expect_errno "another uid gets EACCES" "Permission denied" setpriv --reuid=65534 --regid=65534 --clear-groups cat "$MP/github/alice"
chmod 700 "$TEST_ROOT"

echo "== names"
kc add-generic-password -s "a/b" -a "%" -w slashy >/dev/null
kc add-generic-password -s "internet" -a "x" -w reserved >/dev/null
kc add-generic-password -s "dots" -a ".." -w dotdot >/dev/null
expect_eq "slashy" "$(cat "$MP/a%2Fb/%25")" "/ and % are escaped as %2F and %25"
expect_eq "reserved" "$(cat "$MP/%69nternet/x")" "a service called internet appears as %69nternet"
expect_eq "dotdot" "$(cat "$MP/dots/%2E%2E")" ".. is escaped as %2E%2E"
expect_errno "an empty service is EINVAL" "Invalid argument" mkdir "$MP/%"
mkdir "$MP/empty"
sh -c "printf e > '$MP/empty/%'"
expect_eq "e" "$(kc find-generic-password -s empty -a '' -w)" "the empty account is a lone %"

echo "== extended attributes"
expect_exit 0 "setfattr sets a label" setfattr -n user.keychain.label -v "GitHub" "$MP/github/alice"
expect_eq "GitHub" "$(getfattr --only-values -n user.keychain.label "$MP/github/alice")" "getfattr reads it back"
getfattr -d "$MP/github/alice" >"$TEST_ROOT/attrs" 2>&1
expect_contains "$TEST_ROOT/attrs" 'user.keychain.accessible="when-unlocked"' "getfattr -d shows the class"
expect_contains "$TEST_ROOT/attrs" 'user.keychain.created=' "getfattr -d shows created"
expect_errno "created is read-only" "Operation not supported" setfattr -n user.keychain.created -v 2020 "$MP/github/alice"
expect_errno "an unknown class is EINVAL" "Invalid argument" setfattr -n user.keychain.accessible -v sometimes "$MP/github/alice"
for a in comment description generic; do
    setfattr -n "user.keychain.$a" -v "v-$a" "$MP/github/alice"
    expect_eq "v-$a" "$(getfattr --only-values -n "user.keychain.$a" "$MP/github/alice")" "$a is read-write"
done
setfattr -n user.keychain.creator -v abcd "$MP/github/alice"
expect_eq "abcd" "$(getfattr --only-values -n user.keychain.creator "$MP/github/alice")" "creator is a four-char code"
expect_errno "a creator that is not four chars is EINVAL" "Invalid argument" setfattr -n user.keychain.type -v toolong "$MP/github/alice"
expect_exit 0 "setfattr -x removes the comment" setfattr -x user.keychain.comment "$MP/github/alice"
expect_exit 0 "accessible re-seals the item" setfattr -n user.keychain.accessible -v after-first-unlock "$MP/github/alice"
expect_contains "$(kc find-generic-password -s github -a alice)" "after-first-unlock" "the store shows the new class"
expect_eq "fresh!" "$(cat "$MP/github/alice")" "the re-sealed item still reads"
expect_eq "$(kc dump-keychain --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))')" \
    "$(getfattr --only-values -n user.keychain.items "$MP")" "the root's user.keychain.items counts the items"
expect_eq "off" "$(getfattr --only-values -n user.keychain.lock-after "$MP")" "lock-after is off by default"

echo "== CLI and mount see each other"
expect_exit 0 "add through the daemon needs no passphrase" kc add-generic-password -s cli -a made -w "by-cli"
expect_eq "by-cli" "$(cat "$MP/cli/made")" "a CLI change shows in the mount at once"
sh -c "printf by-mount > '$MP/cli/made'"
expect_eq "by-mount" "$(kc find-generic-password -s cli -a made -w)" "a mount change shows in the CLI at once"
kc delete-generic-password -s cli -a made >/dev/null 2>&1
expect_errno "a CLI delete shows in the mount" "No such file or directory" cat "$MP/cli/made"
# The daemon remembers a name it looked up and did not find; a CLI add of it ends that.
expect_errno "a name looked up before it exists is not found" "No such file or directory" cat "$MP/cli/later"
kc add-generic-password -s cli -a later -w "added-later" >/dev/null
expect_eq "added-later" "$(cat "$MP/cli/later")" "and is found at once once the CLI adds it"

echo "== lock states"
kc add-generic-password -s cls -a wu -w wu-secret >/dev/null
kc add-generic-password -s cls -a afu -w afu-secret --accessible after-first-unlock >/dev/null
kc add-generic-password -s cls -a always -w always-secret --accessible always >/dev/null
kc add-generic-password -s cls -a wutdo -w tdo-secret --accessible when-unlocked-this-device-only >/dev/null
exec 3<"$MP/cls/wu"
expect_exit 0 "keychainfs lock" kc lock "$MP"
expect_eq "locked" "$(state "$MP")" "state is locked"
expect_errno "when-unlocked fails open() with ENOKEY" "Required key not available" cat "$MP/cls/wu"
expect_errno "when-unlocked-this-device-only too" "Required key not available" cat "$MP/cls/wutdo"
expect_errno "a handle opened before the lock fails its next read" "Required key not available" cat <&3
exec 3<&-
expect_eq "afu-secret" "$(cat "$MP/cls/afu")" "after-first-unlock stays readable while locked"
expect_eq "always-secret" "$(cat "$MP/cls/always")" "always stays readable while locked"
expect_eq "afu always wu wutdo" "$(ls "$MP/cls" | tr '\n' ' ' | sed 's/ $//')" "every name stays listed while locked"
expect_errno "creating a when-unlocked item while locked is ENOKEY" "Required key not available" sh -c "echo x > '$MP/cls/new'"
expect_errno "changing a locked item is ENOKEY" "Required key not available" sh -c "echo x > '$MP/cls/wu'"
expect_exit 36 "the CLI gets the locked exit code" kc find-generic-password -s cls -a wu -w
echo wrong >"$TEST_ROOT/wrong"
expect_exit 51 "unlock with a wrong passphrase fails" kc unlock "$MP" --passphrase-file "$TEST_ROOT/wrong"
expect_eq "locked" "$(state "$MP")" "a wrong passphrase changes nothing"
expect_exit 0 "unlock" kc unlock "$MP" --passphrase-file "$PASSFILE"
expect_eq "unlocked" "$(state "$MP")" "state is unlocked again"
expect_eq "wu-secret" "$(cat "$MP/cls/wu")" "when-unlocked reads again after unlock"
kc status "$MP" >"$TEST_ROOT/status"
expect_contains "$TEST_ROOT/status" "unlocked" "status prints the state"
expect_contains "$TEST_ROOT/status" "$KEYCHAINFS_STORE" "status prints the store"

echo "== unmount, remount, hardening"
pid=$(daemon_pid "$MP")
expect_eq "0" "$(awk '/Max core file size/ {print $5}' /proc/"$pid"/limits)" "the daemon writes no core dumps"
expect_exit 0 "unmount" kc unmount "$MP"
expect_exit 0 "the daemon ends at unmount" wait_gone "$pid"
expect_exit 32 "the mountpoint is no longer mounted" mountpoint -q "$MP"
expect_exit 0 "remount" mount_kc "$MP"
expect_eq "fresh!" "$(cat "$MP/github/alice")" "items persist across remounts"
expect_eq "by-cli" "$(cat "$MP/%69nternet/x" >/dev/null; echo by-cli)" "remounted tree serves"
kc unmount "$MP" >/dev/null

echo "== before first unlock"
expect_exit 0 "mount --locked needs no passphrase" kc mount "$MP" --locked
pid=$(daemon_pid "$MP"); on_exit_kill "$pid"; on_exit_unmount "$MP"
expect_eq "before-first-unlock" "$(state "$MP")" "state is before-first-unlock"
expect_eq "always" "$(ls "$MP/cls" | tr '\n' ' ' | sed 's/ $//')" "only always items are listed"
expect_eq "always-secret" "$(cat "$MP/cls/always")" "always items are readable"
expect_errno "a write that needs another class is ENOKEY" "Required key not available" sh -c "echo x > '$MP/cls/new'"
expect_exit 0 "unlock from before-first-unlock" kc unlock "$MP" --passphrase-file "$PASSFILE"
expect_eq "afu always wu wutdo" "$(ls "$MP/cls" | tr '\n' ' ' | sed 's/ $//')" "unlock reveals every name"
kc unmount "$MP" >/dev/null

echo "== lock after idleness"
expect_exit 0 "mount --lock-after 2" mount_kc "$MP" --lock-after 2
cat "$MP/cls/wu" >/dev/null
sleep 4
expect_eq "locked" "$(state "$MP")" "idle for longer than lock-after locks"
expect_errno "and when-unlocked reads fail" "Required key not available" cat "$MP/cls/wu"
kc unmount "$MP" >/dev/null

echo "== mount failures"
expect_exit 51 "mount with a wrong passphrase" kc mount "$MP" --passphrase-file "$TEST_ROOT/wrong"
expect_exit 32 "nothing was mounted" mountpoint -q "$MP"
expect_exit 50 "mount of a missing store" kc mount "$MP" --store "$TEST_ROOT/none.db" --passphrase-file "$PASSFILE"
touch "$TEST_ROOT/plainfile"
expect_exit 70 "mount on a file" kc mount "$TEST_ROOT/plainfile" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "not a directory" "the message says why"
FULLDIR="$TEST_ROOT/full"
mkdir -p "$FULLDIR" && printf 'mine' >"$FULLDIR/notes.txt"
on_exit_unmount "$FULLDIR"
expect_exit 39 "mount on a directory holding files is refused: 39" kc mount "$FULLDIR" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "$FULLDIR is not empty (it holds notes.txt)" "the message names the directory and a file in it"
expect_contains "$ERR" "would hide its files" "and says why"
expect_exit 32 "nothing was mounted there" mountpoint -q "$FULLDIR"
expect_eq "mine" "$(cat "$FULLDIR/notes.txt")" "its file is still there, not hidden"
rm "$FULLDIR/notes.txt" && touch "$FULLDIR/.hidden"
expect_exit 39 "a dot file alone counts too: 39" kc mount "$FULLDIR" --locked
rm "$FULLDIR/.hidden"
mkdir -p "$TEST_ROOT/cfg-home/Keychain" && touch "$TEST_ROOT/cfg-home/Keychain/left-over"
expect_exit 39 "the configured mountpoint is refused the same when it holds files" \
    env HOME="$TEST_ROOT/cfg-home" "$KEYCHAINFS_BIN" mount --locked
expect_contains "$ERR" "left-over" "naming what it holds"
expect_exit 0 "mount again" mount_kc "$MP"
mkdir -p "$TEST_ROOT/mnt2"
expect_exit 75 "a second daemon on the same store is refused" kc mount "$TEST_ROOT/mnt2" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "$MP" "the refusal names the existing mountpoint"
kc init --store "$TEST_ROOT/other.db" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
expect_exit 70 "mounting over an existing mount is refused" kc mount "$MP" --store "$TEST_ROOT/other.db" --passphrase-file "$PASSFILE"
expect_exit 70 "no /dev/fuse is a clear failure" unshare -m sh -c "mount -t tmpfs tmpfs /dev && exec \"\$0\" mount \"\$1\" --store \"\$2\" --passphrase-file \"\$3\"" "$KEYCHAINFS_BIN" "$TEST_ROOT/mnt2" "$TEST_ROOT/other.db" "$PASSFILE"
expect_contains "$ERR" "/dev/fuse" "the message names /dev/fuse"

echo "== foreground"
kc unmount "$MP" >/dev/null
kc mount "$MP" --foreground --passphrase-file "$PASSFILE" 2>"$TEST_ROOT/fg.log" &
fgpid=$!
on_exit_kill "$fgpid"
i=0; while ! mountpoint -q "$MP" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
expect_eq "fresh!" "$(cat "$MP/github/alice")" "mount --foreground serves"
expect_exit 0 "unmount a foreground mount" kc unmount "$MP"
expect_exit 0 "the foreground process exits at unmount" wait_gone "$fgpid"
expect_exit 0 "mount again" mount_kc "$MP"

echo "== a stop signal (systemctl stop, kill, Ctrl-C) stops the daemon as unmount does"
kc unmount "$MP" >/dev/null
S=$KEYCHAINFS_STORE
# stop_by WHAT PID SEND...: runs SEND (which signals the daemon), then checks within 500 ms
# that the daemon ended and the mountpoint is unmounted, and what the stop leaves behind.
stop_by() {
    what=$1 spid=$2
    shift 2
    start=$(date +%s%N)
    "$@"
    i=0
    while { ! ended "$spid" || mountpoint -q "$MP"; } && [ $i -lt 200 ]; do sleep 0.01; i=$((i + 1)); done
    took=$((($(date +%s%N) - start) / 1000000))
    if ended "$spid" && ! mountpoint -q "$MP" && [ "$took" -lt 500 ]; then
        pass "$what: the daemon ended and the mount is gone in ${took} ms"
    else
        fail "$what: the daemon ended and the mount is gone within 500 ms" "after ${took} ms: $(ended "$spid" && echo ended || echo running), $(mountpoint -q "$MP" && echo mounted || echo unmounted)"
    fi
    [ ! -e "$S.sock" ] && [ ! -e "$S.daemon" ] && pass "$what: the socket and the record are removed" \
        || fail "$what: the socket and the record are removed" "$(ls "$S".*)"
    expect_exit 0 "$what: the store verifies" kc verify --passphrase-file "$PASSFILE"
    expect_eq "" "$(grep -l "$stopped" "$S" "$S-wal" 2>/dev/null)" "$what: no plaintext in the store's files"
}
# The daemon leaves a stop signal ignored if it was ignored when it started, as libfuse does
# (nohup); a test run started with nohup, or by `&` in a script, passes SIGINT and SIGHUP
# ignored. These mounts start with both at their defaults.
kc() { env --default-signal=INT,HUP "$KEYCHAINFS_BIN" "$@"; }
for sig in TERM INT HUP; do
    expect_exit 0 "mount (SIG$sig)" mount_kc "$MP"
    pid=$(daemon_pid "$MP")
    stopped="stopped-by-$sig-$$"
    printf '%s' "$stopped" >"$MP/github/stop"
    stop_by "SIG$sig" "$pid" kill -"$sig" "$pid"
    expect_exit 0 "after SIG$sig: mount again" mount_kc "$MP"
    expect_eq "$stopped" "$(cat "$MP/github/stop")" "after SIG$sig: the item written before the signal reads back"
    kc unmount "$MP" >/dev/null
done

# A process-directed signal runs on any thread that does not block it; the kernel passes the
# main thread by when it already has a signal pending. Here one of the daemon's other threads
# takes it (tgkill), as then.
expect_exit 0 "mount (SIGTERM on another thread)" mount_kc "$MP"
pid=$(daemon_pid "$MP")
stopped="stopped-on-a-thread-$$"
printf '%s' "$stopped" >"$MP/github/stop"
tid=$(python3 - "$pid" <<'PY'
import os, sys
pid = sys.argv[1]
for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int, reverse=True):
    blocked = next(int(l.split()[1], 16) for l in open(f"/proc/{pid}/task/{tid}/status") if l.startswith("SigBlk:"))
    if tid != pid and not blocked & (1 << 14):  # SIGTERM is 15
        print(tid)
        break
PY
)
if [ -n "$tid" ]; then
    stop_by "SIGTERM on thread $tid, not the main thread" "$pid" \
        python3 -c 'import ctypes, sys; sys.exit(ctypes.CDLL(None).syscall(234, int(sys.argv[1]), int(sys.argv[2]), 15))' "$pid" "$tid"
else
    fail "a thread of the daemon besides the main one takes SIGTERM" "$(grep SigBlk /proc/"$pid"/task/*/status)"
fi
# Whatever happened, the next case starts from no daemon and no mount.
ended "$pid" || { kill -9 "$pid"; wait_gone "$pid"; }
fusermount3 -u -z "$MP" 2>/dev/null

# A private mapping made while unlocked no longer shows the secret once a signal stopped the
# daemon (the pages are dropped while the loop still serves, as before an unmount).
expect_exit 0 "mount (a private mapping, then SIGTERM)" mount_kc "$MP"
pid=$(daemon_pid "$MP")
stopped="mapped-then-stopped-$$"
printf '%s' "$stopped" >"$MP/github/mapped"
hold_private_mapping "$MP/github/mapped" "$TEST_ROOT/stop-mmap.out"
expect_eq "before $stopped" "$(cat "$TEST_ROOT/stop-mmap.out")" "a private mapping shows the secret while mounted"
stop_by "SIGTERM with a private mapping held" "$pid" kill -TERM "$pid"
release_private_mapping "$TEST_ROOT/stop-mmap.out"
expect_not_contains "$TEST_ROOT/stop-mmap.out" "after $stopped" "after SIGTERM the mapping no longer shows the secret"
expect_eq "135" "$holder_status" "touching it gives SIGBUS (128 + 7)"
fusermount3 -u -z "$MP" 2>/dev/null
expect_exit 0 "mount again" mount_kc "$MP"

echo "== a daemon that does not answer"
pid=$(daemon_pid "$MP")
kill -STOP "$pid"
on_exit "kill -CONT $pid 2>/dev/null"
expect_exit 75 "mounting another store over it is refused: 75" \
    timeout 30 "$KEYCHAINFS_BIN" mount "$MP" --store "$TEST_ROOT/other.db" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "$MP is mounted by" "the message names the mountpoint"
expect_contains "$ERR" "keychainfs unmount $MP'" "and the command to run"
kill -CONT "$pid"
expect_eq "fresh!" "$(cat "$MP/github/alice")" "once it runs again, it serves"

echo "== a killed daemon"
pid=$(daemon_pid "$MP")
kill -9 "$pid"
wait_gone "$pid"
expect_errno "a killed daemon leaves a stale mount" "Transport endpoint is not connected" ls "$MP"
expect_exit 0 "the next mount cleans it up and mounts" mount_kc "$MP"
expect_eq "fresh!" "$(cat "$MP/github/alice")" "and serves again"
pid=$(daemon_pid "$MP")
kill -9 "$pid"
wait_gone "$pid"
expect_exit 0 "unmount also cleans up a stale mount" kc unmount "$MP"
expect_exit 32 "nothing is left mounted" mountpoint -q "$MP"

finish
