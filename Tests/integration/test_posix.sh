#!/bin/sh
# POSIX semantics that programs rely on, through the mount, in the manner of pjdfstest: each
# check runs system calls in one process (posix_ops.py) and compares their results, errno
# names included. Open files that outlive their names, times after ftruncate, directory times
# and link counts, renames of empty internet directories.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

ops() { python3 "$TESTS_DIR/posix_ops.py" "$@"; }
# expect RESULTS NAME OP [: OP]...: the operations' results, on one line, are RESULTS.
expect() {
    want=$1 name=$2
    shift 2
    expect_eq "$want" "$(ops "$@")" "$name"
}
# expect_not_before EARLIER LATER NAME: times in ns; LATER is not before EARLIER.
expect_not_before() {
    if [ -n "$1" ] && [ -n "$2" ] && [ "$2" -ge "$1" ]; then pass "$3"; else fail "$3" "expected $2 >= $1"; fi
}

init_store
expect_exit 0 "mount" mount_kc "$MP"
mkdir "$MP/svc"
F=$MP/svc/f

echo "== an open file outlives its name"
printf 'hello world' >"$F"
expect "0 0 reg 11 0" "fstat after unlink: a regular file, its size, st_nlink 0" \
    open "$F" O_RDWR : unlink "$F" : fstat 0 type : fstat 0 size : fstat 0 nlink
printf 'hello world' >"$F"
expect "0 0 0 5 hello 0 7 0 7" "ftruncate after unlink shrinks and grows the open copy" \
    open "$F" O_RDWR : unlink "$F" : ftruncate 0 5 : fstat 0 size : pread 0 100 0 : ftruncate 0 7 : fstat 0 size \
    : fstat 0 nlink : lseek 0 0 SEEK_END
printf 'hello world' >"$F"
expect "0 0 11 3 11 0 11 ENXIO ENXIO" "lseek after unlink: SEEK_END, SEEK_DATA, SEEK_HOLE" \
    open "$F" O_RDONLY : unlink "$F" : lseek 0 0 SEEK_END : lseek 0 3 SEEK_DATA : lseek 0 3 SEEK_HOLE \
    : lseek 0 0 SEEK_DATA : lseek 0 0 SEEK_HOLE : lseek 0 11 SEEK_DATA : lseek 0 11 SEEK_HOLE
printf 'hello world' >"$F"
expect "0 0 2 11 1 12 XYllo world! 0 0 ENOENT" "writes and fsync after unlink work on the descriptor; its close stores nothing" \
    open "$F" O_RDWR : unlink "$F" : write 0 XY : lseek 0 0 SEEK_END : write 0 ! : fstat 0 size : pread 0 100 0 \
    : fsync 0 : close 0 : stat "$F" size
expect_eq "" "$(ls -A "$MP/svc")" "nothing is left under the old name"
expect_exit 44 "nor in the store" kc find-generic-password -s svc -a f
printf 'hello world' >"$F"
expect "0 0 1 3 11 3 0 1" "a new file with the unlinked one's name is another file" \
    open "$F" O_RDWR : unlink "$F" : open "$F" O_RDWR,O_CREAT : write 1 new : fstat 0 size : fstat 1 size \
    : fstat 0 nlink : fstat 1 nlink
rm -f "$F"
expect "0 1 0 5 5 0" "two descriptors, one written: fstat after unlink shows the written copy" \
    open "$F" O_RDWR,O_CREAT,O_TRUNC : open "$F" O_WRONLY : unlink "$F" : write 0 hello : fstat 0 size : fstat 1 nlink
printf 'old' >"$MP/svc/acct"
printf 'newer' >"$MP/svc/tmp"
expect "0 0 0 3 old 0 5" "a file replaced by rename keeps its value while open, with st_nlink 0" \
    open "$MP/svc/acct" O_RDONLY : rename "$MP/svc/tmp" "$MP/svc/acct" : fstat 0 nlink : fstat 0 size \
    : pread 0 100 0 : close 0 : stat "$MP/svc/acct" size
echo "== an inode read before a rename is read by its new name"
# The binding keeps each inode's parsed path; a rename keeps the kernel's inode, so the next
# open of it must go to the new name, and the old name must be gone.
mkdir "$MP/moved"
printf 'first' >"$MP/svc/r1"
expect_eq "first" "$(cat "$MP/svc/r1")" "read under its first name"
mv "$MP/svc/r1" "$MP/moved/r2"
expect_eq "first" "$(cat "$MP/moved/r2")" "cat by its new name, in another service"
expect "5 ENOENT" "stat by the new name; the old one is gone" stat "$MP/moved/r2" size : stat "$MP/svc/r1" size
printf 'second' >"$MP/svc/r1"
expect_eq "second first" "$(cat "$MP/svc/r1") $(cat "$MP/moved/r2")" "a new file under the old name is another file"
expect "0 0 1 first 0 ENOENT" "open, rename, open by the new name: the same inode, read by its new name" \
    open "$MP/moved/r2" O_RDONLY : rename "$MP/moved/r2" "$MP/svc/r3" : open "$MP/svc/r3" O_RDONLY : pread 1 100 0 \
    : close 1 : stat "$MP/moved/r2" size
expect_eq "first" "$(kc find-generic-password -s svc -a r3 -w)" "the store has it under the new name"
rm -f "$MP/svc/r1" "$MP/svc/r3"
rmdir "$MP/moved"
printf 'hello world' >"$F"
expect_eq "11 0
hello world" "$(sh -c 'exec 3<"$1"; rm "$1"; stat -L -c "%s %h" /dev/fd/3; cat <&3' sh "$F" 2>&1)" \
    "shell: rm while open, then stat -L /dev/fd/3 and cat from it"
printf '0123456789' >"$F"
expect "0 1 3 10 0 2 10 0 10" "on a linked file: SEEK_DATA, SEEK_HOLE, and SEEK_END after a write before close" \
    open "$F" O_RDWR : fstat 0 nlink : lseek 0 3 SEEK_DATA : lseek 0 3 SEEK_HOLE : lseek 0 0 SEEK_SET : write 0 ab \
    : lseek 0 10 SEEK_SET : close 0 : stat "$F" size
expect "0 10 2 12 0 12" "SEEK_END sees this descriptor's own writes" \
    open "$F" O_RDWR : lseek 0 0 SEEK_END : write 0 cd : lseek 0 0 SEEK_END : close 0 : stat "$F" size

echo "== a name saved by rename (mv tmp item, sed -i) never stops existing for a reader"
# A reader whose path walk reached the replaced inode just before the rename opens or stats it
# after: it gets what the name holds now, never ENOENT (on ext4 it would get the old value,
# which is erased here).
mkdir "$MP/rr" && printf init >"$MP/rr/item"
/usr/bin/python3 - "$MP/rr/item" >"$TEST_ROOT/rr.out" 2>&1 <<'PY' &
import errno, os, sys, time
path, seen, end = sys.argv[1], {}, time.monotonic() + 30
while time.monotonic() < end and not os.path.exists(path + ".done"):
    for what, call in (("open", lambda: os.close(os.open(path, os.O_RDONLY))), ("stat", lambda: os.stat(path))):
        try:
            call()
        except OSError as e:
            seen[what + " " + errno.errorcode[e.errno]] = seen.get(what + " " + errno.errorcode[e.errno], 0) + 1
print(sorted(seen.items()))
PY
READER=$!
for i in $(seq 150); do printf "mv-$i" >"$MP/rr/tmp" && mv "$MP/rr/tmp" "$MP/rr/item"; done
for i in $(seq 50); do sed -i "s/.*/sed-$i/" "$MP/rr/item"; done
: >"$MP/rr/item.done" 2>/dev/null || touch "$MP/rr/item.done"
wait "$READER"
expect_eq "[]" "$(cat "$TEST_ROOT/rr.out")" "200 saves by rename, a reader opening and statting all along: no error"
expect_eq "sed-50" "$(cat "$MP/rr/item")" "the last save is read"
rm -rf "$MP/rr"

echo "== stress-ng, whose hdd, seek and readahead stressors unlink their file and go on using it"
S=$MP/internet/stress/443
mkdir -p "$S"
for stressor in "--hdd 2 --hdd-bytes 1M --hdd-write-size 4K" "--seek 2 --seek-size 1M" "--readahead 2 --readahead-bytes 1M"; do
    expect_exit 0 "stress-ng $stressor --verify" stress-ng $stressor --verify -t 4 --temp-path "$S"
done
expect_eq "" "$(ls -A "$S")" "stress-ng left nothing behind"

echo "== times after ftruncate, truncate and write"
G=$MP/svc/g
printf 'hello world' >"$G"
m0=$(ops stat "$G" mtime_ns)
c0=$(ops stat "$G" ctime_ns)
set -- $(ops sleep 0.05 : open "$G" O_RDWR : ftruncate 0 3 : fstat 0 mtime_ns : close 0 : stat "$G" mtime_ns \
    : stat "$G" ctime_ns : stat "$G" size)
expect_eq 3 "$8" "ftruncate then close: the size"
expect_not_before "$((m0 + 1))" "$6" "ftruncate then close: stat shows the new mtime at once"
expect_not_before "$((c0 + 1))" "$7" "ftruncate then close: and the new ctime"
expect_eq "$4" "$6" "the mtime fstat showed before close is the one stored"
sleep 1.2
expect_eq "$6 $7" "$(ops stat "$G" mtime_ns : stat "$G" ctime_ns)" "a second later stat still shows the same times"
m1=$6
t=$(ops now)
truncate -s 1 "$G"
expect_not_before "$t" "$(ops stat "$G" mtime_ns)" "truncate(1) by path: the new mtime at once"
t=$(ops now)
sh -c "printf 'x' >> '$G'"
expect_not_before "$t" "$(ops stat "$G" mtime_ns)" "an appending write: the new mtime at once"
expect_not_before "$((m1 + 1))" "$(ops stat "$G" ctime_ns)" "and the new ctime"

echo "== directory times"
t=$(ops now)
mkdir "$MP/dirs"
expect_not_before "$t" "$(ops stat "$MP/dirs" mtime_ns)" "a new directory has the time it was made, not the mount's"
expect_eq "$(ops stat "$MP/dirs" mtime_ns)" "$(ops stat "$MP" mtime_ns)" "mkdir changes the parent's mtime"
expect_eq "$(ops stat "$MP/dirs" ctime_ns)" "$(ops stat "$MP" ctime_ns)" "and its ctime"
t=$(ops now)
printf 'x' >"$MP/dirs/a"
expect_not_before "$t" "$(ops stat "$MP/dirs" mtime_ns)" "creating a file changes the parent's mtime"
expect_not_before "$t" "$(ops stat "$MP/dirs" ctime_ns)" "and its ctime"
t=$(ops now)
printf 'y' >"$MP/dirs/a"
expect_not_before "$(ops stat "$MP/dirs" mtime_ns)" "$t" "rewriting a file does not change the parent's mtime"
t=$(ops now)
mv "$MP/dirs/a" "$MP/svc/a"
expect_not_before "$t" "$(ops stat "$MP/dirs" mtime_ns)" "mv changes the old parent's mtime"
expect_not_before "$t" "$(ops stat "$MP/svc" mtime_ns)" "and the new parent's"
t=$(ops now)
rm "$MP/svc/a"
expect_not_before "$t" "$(ops stat "$MP/svc" mtime_ns)" "removing a file changes the parent's mtime"
t=$(ops now)
rmdir "$MP/dirs"
expect_not_before "$t" "$(ops stat "$MP" mtime_ns)" "rmdir changes the parent's mtime"
for d in internet/h internet/h/443 internet/h/443/docs; do
    t=$(ops now)
    mkdir "$MP/$d"
    expect_not_before "$t" "$(ops stat "$MP/$d" mtime_ns)" "$d: made now"
    expect_eq "$(ops stat "$MP/$d" mtime_ns)" "$(ops stat "$(dirname "$MP/$d")" mtime_ns)" "$d: its parent changed with it"
done
t=$(ops now)
printf 'pw' >"$MP/internet/h/443/docs/alice"
expect_not_before "$t" "$(ops stat "$MP/internet/h/443/docs" mtime_ns)" "an internet item changes its path directory's mtime"

echo "== directory link counts"
expect_eq "$((2 + $(ls -A "$MP" | wc -l)))" "$(stat -c %h "$MP")" "the root: 2 plus its subdirectories"
before=$(stat -c %h "$MP")
mkdir "$MP/another"
expect_eq "$((before + 1))" "$(stat -c %h "$MP")" "mkdir adds one to the parent's st_nlink"
rmdir "$MP/another"
expect_eq "$before" "$(stat -c %h "$MP")" "rmdir takes it back"
mkdir "$MP/internet/h/80"
expect_eq "2 4 3 2" "$(stat -c %h "$MP/svc" "$MP/internet/h" "$MP/internet/h/443" "$MP/internet/h/443/docs" | tr '\n' ' ' | sed 's/ $//')" \
    "a service 2 (items are files), a server 2 + ports, a port 2 + path directories"
expect_eq "1" "$(stat -c %h "$MP/internet/h/443/docs/alice")" "an item has one link"
expect_eq "$(python3 -c 'import os, sys; print(sum(1 for _ in os.walk(sys.argv[1])))' "$MP")" \
    "$(find "$MP" -type d | wc -l)" "find -type d sees every directory"

echo "== access(2) and execution, which the daemon answers (no default_permissions)"
expect_exit 0 "test -r, -w on an item" sh -c 'test -r "$1" && test -w "$1"' sh "$MP/internet/h/443/docs/alice"
expect_exit 1 "test -x on an item: its mode 0600 has no x" test -x "$MP/internet/h/443/docs/alice"
expect_exit 0 "test -x, -r, -w on a directory" sh -c 'test -x "$1" && test -r "$1" && test -w "$1"' sh "$MP/svc"
expect_exit 0 "cd into a directory" sh -c 'cd "$1"' sh "$MP/internet/h/443"
printf '#!/bin/sh\necho ran\n' >"$MP/svc/script"
expect_errno "an item is not executed" "Permission denied" "$MP/svc/script"
chmod 700 "$MP/svc/script" 2>/dev/null
expect_errno "not even after a chmod, which is not kept" "Permission denied" "$MP/svc/script"
rm "$MP/svc/script"

echo "== renames of empty internet directories"
mkdir "$MP/internet/r1"
expect "0" "rename(2) of an empty server" rename "$MP/internet/r1" "$MP/internet/r2"
expect "ENOENT reg dir" "the old name is gone, the new one is a directory" \
    stat "$MP/internet/r1" type : stat "$MP/internet/h/443/docs/alice" type : stat "$MP/internet/r2" type
mkdir "$MP/internet/r2/443"
expect "0" "rename(2) of an empty port" rename "$MP/internet/r2/443" "$MP/internet/r2/8443"
expect "0" "to another server" rename "$MP/internet/r2/8443" "$MP/internet/h/8443"
mkdir "$MP/internet/h/8443/old"
expect "0" "rename(2) of an empty path directory" rename "$MP/internet/h/8443/old" "$MP/internet/h/8443/api"
expect_eq "8443/api" "$(cd "$MP/internet/h" && find 8443 -mindepth 1)" "ls shows the renamed directories"
expect "EINVAL" "to a port that is no number in 1-65535: EINVAL" rename "$MP/internet/r2" "$MP/internet/h/99999"
printf 'pw' >"$MP/internet/h/8443/api/bob"
expect "EXDEV EXDEV" "a non-empty server or path directory: EXDEV, so mv copies" \
    rename "$MP/internet/h" "$MP/internet/h2" : rename "$MP/internet/h/8443/api" "$MP/internet/h/8443/v2"
expect "ENOTEMPTY ENOTEMPTY ENOTEMPTY" "onto a non-empty server, port or path directory: ENOTEMPTY" \
    rename "$MP/internet/r2" "$MP/internet/h" : rename "$MP/internet/r2" "$MP/internet/h/8443" \
    : rename "$MP/internet/r2" "$MP/internet/h/8443/api"
mkdir "$MP/empty"
expect "ENOTEMPTY" "an empty service onto a non-empty one: ENOTEMPTY" rename "$MP/empty" "$MP/svc"
expect "ENOTEMPTY" "a non-empty directory onto a non-empty one: ENOTEMPTY" rename "$MP/internet/h" "$MP/svc"
mkdir "$MP/internet/e"
expect "0 ENOENT dir" "onto an empty directory: replaced" \
    rename "$MP/internet/r2" "$MP/internet/e" : stat "$MP/internet/r2" type : stat "$MP/internet/e" type
expect "ENOTDIR EISDIR" "a directory onto a file, a file onto a directory" \
    rename "$MP/internet/e" "$MP/internet/h/8443/api/bob" : rename "$MP/internet/h/8443/api/bob" "$MP/internet/e"
expect_errno "mv -T onto a non-empty directory says so" "Directory not empty" mv -T "$MP/internet/e" "$MP/internet/h"
expect_exit 0 "mv of a non-empty server copies it item by item" mv "$MP/internet/h" "$MP/internet/moved"
expect_eq "pw pw" "$(cat "$MP/internet/moved/8443/api/bob") $(cat "$MP/internet/moved/443/docs/alice")" "its items came along"
expect "ENOENT" "and the old server is gone" stat "$MP/internet/h" type
expect_exit 0 "the store has them under the new server" kc find-internet-password -s moved -P 8443 -p api -a bob


echo "== one commit per create"
# The store's commit counter (one per write transaction), kept beside the device key in a
# file named by a hash; files beside it with a suffix (.files) are records of other things.
commits() {
    for f in "$XDG_STATE_HOME"/keychainfs/stores/*; do
        case ${f##*/} in *.*) ;; *) sed 's/^0*//; s/^$/0/' "$f" ;; esac
    done
}
# commits_since BEFORE WANT: the commits since BEFORE, once WANT have come (or 2 s passed) and
# a moment more: a file's release, where an empty new file is stored, comes after close(2).
commits_since() {
    i=0
    while [ $(($(commits) - $1)) -lt "$2" ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i + 1)); done
    sleep 0.2
    echo $(($(commits) - $1))
}
newest_version() { sqlite3 "$KEYCHAINFS_STORE" "SELECT version FROM items ORDER BY id DESC LIMIT 1"; }
mkdir "$MP/one"
before=$(commits)
sh -c "echo secret > '$MP/one/a'"
expect_eq 1 "$(commits_since "$before" 1)" "echo > file: one commit"
expect_eq 1 "$(newest_version)" "the row was inserted with its secret, never updated"
expect_eq secret "$(cat "$MP/one/a")" "and reads back"
before=$(commits)
touch "$MP/one/empty"
expect_eq 1 "$(commits_since "$before" 1)" "touch: one commit, at its release"
expect "reg 0" "an empty create and close stores an empty file" stat "$MP/one/empty" type : stat "$MP/one/empty" size
before=$(commits)
sed -i 's/secret/changed/' "$MP/one/a"
expect_eq 2 "$(commits_since "$before" 2)" "sed -i: two commits (its temporary file, then the rename over the item)"
expect_eq changed "$(cat "$MP/one/a")" "sed -i saved"
# A file held open after its first write: pending, shown, not stored.
kc add-generic-password -s strict -a old -w x --accessible when-unlocked-this-device-only >/dev/null
mkfifo "$TEST_ROOT/hold"
python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, b"held")
open(sys.argv[2], "w").close()
os.read(0, 1)
os.close(fd)
' "$MP/strict/new" "$TEST_ROOT/ready" <"$TEST_ROOT/hold" &
holder=$!
exec 9>"$TEST_ROOT/hold"
i=0
while [ ! -e "$TEST_ROOT/ready" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
before=$(commits)
expect_eq "new old" "$(ls "$MP/strict" | tr '\n' ' ' | sed 's/ $//')" "ls shows a new file while its writer holds it open"
expect "reg 4 1" "stat shows the pending copy" stat "$MP/strict/new" type : stat "$MP/strict/new" size : stat "$MP/strict/new" nlink
expect_eq "when-unlocked-this-device-only" "$(getfattr --only-values -n user.keychain.accessible "$MP/strict/new" 2>/dev/null)" \
    "with its directory's strictest class"
expect_exit 44 "the store does not have it yet" kc find-generic-password -s strict -a new
expect_eq 0 "$(($(commits) - before))" "nothing was committed meanwhile"
exec 9>&-
wait "$holder"
expect_eq 1 "$(commits_since "$before" 1)" "its close: one commit"
expect_eq held "$(kc find-generic-password -s strict -a new -w)" "the store has it"
expect_eq "when-unlocked-this-device-only" "$(getfattr --only-values -n user.keychain.accessible "$MP/strict/new" 2>/dev/null)" \
    "under the stricter class"
before=$(commits)
expect "0 4 0 ENOENT 0" "a new file unlinked while open is never stored" \
    open "$MP/one/gone" O_WRONLY,O_CREAT : write 0 lost : unlink "$MP/one/gone" : stat "$MP/one/gone" size : close 0
expect_eq 0 "$(commits_since "$before" 0)" "not one commit"
before=$(commits)
expect "0 4 0 0" "a new file renamed while open" \
    open "$MP/one/tmp" O_WRONLY,O_CREAT : write 0 kept : rename "$MP/one/tmp" "$MP/one/kept" : close 0
expect_eq 1 "$(commits_since "$before" 1)" "is stored once, under its new name"
expect_eq kept "$(cat "$MP/one/kept")" "with what was written"

echo "== the class of a new file follows every change beside it (the daemon keeps a service's classes between creates)"
cls() { getfattr --only-values -n user.keychain.accessible "$MP/classes/$1" 2>/dev/null; }
mkdir "$MP/classes"
printf a >"$MP/classes/first"
expect_eq when-unlocked "$(cls first)" "a new directory's first file takes the mount's default"
kc add-generic-password -s classes -a strict -w x --accessible when-unlocked-this-device-only >/dev/null
printf b >"$MP/classes/second"
expect_eq when-unlocked-this-device-only "$(cls second)" "after the CLI stores a this-device-only item beside it, the next file is too"
kc delete-generic-password -s classes -a strict >/dev/null
rm "$MP/classes/second"
printf c >"$MP/classes/third"
expect_eq when-unlocked "$(cls third)" "once the strict items are gone, the default again"
setfattr -n user.keychain.accessible -v when-unlocked-this-device-only "$MP/classes/first"
printf d >"$MP/classes/fourth"
expect_eq when-unlocked-this-device-only "$(cls fourth)" "a class set on a file beside it counts too"

echo "== a service the mount knows only by name moves item by item"
kc unmount "$MP" >/dev/null
expect_exit 0 "an item stored while unmounted" kc add-generic-password -s unread -a acct -w orig --passphrase-file "$PASSFILE"
expect_exit 0 "mount again" mount_kc "$MP"
ls "$MP" >/dev/null
expect_exit 0 "mv of a service whose items the mount has not read" mv "$MP/unread" "$MP/moved"
expect_eq orig "$(cat "$MP/moved/acct")" "its item went with it"
expect_eq orig "$(kc find-generic-password -s moved -a acct -w)" "and the store has it under the new name"
expect_exit 44 "none is left under the old one" kc find-generic-password -s unread -a acct
expect_exit 0 "mkdir of the old name" mkdir "$MP/unread"
printf new >"$MP/unread/acct"
expect_eq new "$(kc find-generic-password -s unread -a acct -w)" "a write there is stored"


echo "== names that differ only in Unicode normalization are two files, as they are two items in the store"
# é as one code point (NFC) and as e with a combining accent (NFD): equal as Swift strings.
nfc=$(printf 'caf\303\251') nfd=$(printf 'cafe\314\201')
kc unmount "$MP" >/dev/null
kc add-generic-password -s "$nfc" -a "$nfd" -w one --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password -s "$nfd" -a "$nfc" -w two --passphrase-file "$PASSFILE" >/dev/null
kc add-generic-password -s "$nfc" -a "$nfc" -w three --passphrase-file "$PASSFILE" >/dev/null
expect_exit 0 "mount again" mount_kc "$MP"
expect_eq 2 "$(ls "$MP" | grep -c '^caf')" "the root lists both services"
expect_eq "one three" "$(cat "$MP/$nfc/$nfd") $(cat "$MP/$nfc/$nfc")" "each form's items read their own secrets"
expect_eq two "$(cat "$MP/$nfd/$nfc")" "in the other service too"
expect_eq 2 "$(ls "$MP/$nfc" | wc -l)" "a service lists both accounts"
expect_eq 1 "$(ls "$MP/$nfd" | wc -l)" "and the other its one"
printf four >"$MP/$nfd/$nfd"
expect_eq "four one" "$(kc find-generic-password -s "$nfd" -a "$nfd" -w) $(kc find-generic-password -s "$nfc" -a "$nfd" -w)" \
    "a new file of one form is its own item, the other form's untouched"
rm "$MP/$nfc/$nfd"
expect_exit 44 "rm of one form deletes that item" kc find-generic-password -s "$nfc" -a "$nfd"
expect_eq "four three" "$(cat "$MP/$nfd/$nfd") $(cat "$MP/$nfc/$nfc")" "and leaves the others"
expect_exit 0 "mkdir of one form of a new name" mkdir "$MP/new$nfc"
expect_exit 0 "mkdir of the other is another directory" mkdir "$MP/new$nfd"
expect_exit 0 "mv from one form to the other" mv "$MP/$nfd/$nfd" "$MP/$nfd/$nfc"
expect_eq "four" "$(kc find-generic-password -s "$nfd" -a "$nfc" -w)" "replaces the other form's item"
expect_exit 44 "and leaves nothing under the old name" kc find-generic-password -s "$nfd" -a "$nfd"
mkdir "$MP/forms"
printf first >"$MP/forms/$nfd"
stat "$MP/forms/$nfd" >/dev/null
expect_exit 0 "mv to the other form in the same directory" mv "$MP/forms/$nfd" "$MP/forms/$nfc"
expect_eq first "$(cat "$MP/forms/$nfc")" "the new name opens at once (the kernel's cached name moved with it)"
printf other >"$MP/forms/$nfd"
expect "0 0 0 ENOENT" "a file renamed over the other form's open file: that one is unlinked, and the old name gone" \
    open "$MP/forms/$nfc" O_RDONLY : rename "$MP/forms/$nfd" "$MP/forms/$nfc" : fstat 0 nlink : stat "$MP/forms/$nfd" size
expect_eq other "$(cat "$MP/forms/$nfc")" "and the new name reads what was moved"
printf A | kc add-generic-password -s cliforms -a "$nfc" >/dev/null
printf B | kc add-generic-password -s cliforms -a "$nfd" >/dev/null
printf C | kc add-generic-password -s cliforms2 -a "x$nfd" >/dev/null
expect_exit 44 "the CLI's find by account alone does not take the other form" kc find-generic-password -a "x$nfc" -w
kc delete-generic-password -a "$nfc" --all >"$OUT" 2>&1
expect_eq "B" "$(kc find-generic-password -s cliforms -a "$nfd" -w)" "the CLI's delete --all by account leaves the other form"
expect_exit 44 "and deletes its own" kc find-generic-password -s cliforms -a "$nfc"
# A name that begins with a combining mark: a `/` or `,` before it is still a separator.
ac=$(printf '\314\201')
expect_exit 0 "mkdir -p of an internet path whose segment begins with a combining mark" mkdir -p "$MP/internet/marks/443/a/${ac}b"
printf X >"$MP/internet/marks/443/a/${ac}b/u"
expect_eq X "$(cat "$MP/internet/marks/443/a/${ac}b/u")" "a file in it reads back"
expect_eq "X" "$(kc find-internet-password -s marks -P 443 -p "a/${ac}b" -a u -w)" "stored under that path"
printf S | kc add-internet-password -s marks -P 443 -r https -t html-form -d "${ac}x" -a v >/dev/null
expect_eq S "$(cat "$MP/internet/marks/443/v%~https,html-form,${ac}x")" "a variant whose security domain begins with a combining mark opens"

finish
