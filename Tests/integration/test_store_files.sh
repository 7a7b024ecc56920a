#!/bin/sh
# What the store's files give an attacker who copies them: no deleted, replaced or re-classed
# sealed value (wal_replay.py replays the WAL commit by commit and scans every byte), and no
# this-device-only secret ever sealed under a class the passphrase alone opens. Each route a
# value takes goes through a real mount.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

REPLAY="$TESTS_DIR/wal_replay.py"

# recoverable NAME [STORE] [ARGS]: the attacker's copy of the store's files holds nothing that is gone.
nothing_recoverable() {
    name=$1
    store=${2:-$KEYCHAINFS_STORE}
    shift
    [ $# -gt 0 ] && shift
    if python3 "$REPLAY" "$store" "$@" >"$OUT" 2>"$ERR"; then
        pass "$name"
    else
        fail "$name"
        show_output
    fi
}

# The bytes of the WAL that are not zero: 0 once it is emptied (the store's VFS overwrites an
# emptied WAL's frames with zeros, keeping its blocks, where SQLite would cut it to 0 bytes).
wal_left() { tr -d '\000' <"$1-wal" 2>/dev/null | wc -c; }

echo "== every route through the mount leaves nothing behind"
init_store
mount_kc "$MP"
mkdir -p "$MP/svc"
for a in one two three four five six; do sh -c "printf 'first-$a' > '$MP/svc/$a'"; done
sh -c "printf 'first-seven' > '$MP/svc/seven'"
nothing_recoverable "after creating items"

sed -i 's/first/second/' "$MP/svc/one"
expect_eq "second-one" "$(cat "$MP/svc/one")" "sed -i saved"
# A create only adds (one commit, no earlier value to erase); a save that replaces one is
# followed by the checkpoint that empties the WAL. Not checked by the WAL's bytes here: sed's
# temporary file is a create, whose index entries are moved 0.1 s later, in frames written
# after the emptying (index pages, no value), so that count depends on timing. The emptying
# is checked below, after an update that leaves nothing to move; here, what the files hold.
nothing_recoverable "sed -i: neither the old value nor sed's temporary file is left"

sh -c "printf 'second-two' > '$MP/svc/tmp.two'"
mv "$MP/svc/tmp.two" "$MP/svc/two"
expect_eq "second-two" "$(cat "$MP/svc/two")" "mv tmp acct saved"
nothing_recoverable "mv tmp acct: the replaced value is gone"

rm "$MP/svc/three"
nothing_recoverable "rm: the deleted value is gone"

# A create leaves the WAL as it is (its frames hold no earlier value); the next write that
# replaces one empties it, the create's frames with the rest: the created value, replaced at
# once, is in none of the files, though its pages sat in the WAL until then.
# The move of the create's index entries (0.1 s after it, a commit of its own) is waited for
# first: after the update it would write frames into the WAL the update emptied.
sh -c "printf 'created-eight' > '$MP/svc/eight'"
store_settled "$KEYCHAINFS_STORE" >/dev/null
expect_eq 1 "$([ "$(wal_left "$KEYCHAINFS_STORE")" -gt 0 ] && echo 1)" "a create leaves its frames in the WAL"
sh -c "printf 'updated-eight' > '$MP/svc/eight'"
expect_eq "updated-eight" "$(cat "$MP/svc/eight")" "the new item updated at once"
expect_eq 0 "$(wal_left "$KEYCHAINFS_STORE")" "the update empties the WAL, the create's frames too"
nothing_recoverable "create then update of the same item: the created value is gone"
expect_eq "" "$(grep -l 'created-eight' "$KEYCHAINFS_STORE" "$KEYCHAINFS_STORE-wal" 2>/dev/null)" "and no plaintext of it either"
rm "$MP/svc/eight"

printf 'rotated-four' | kc add-generic-password -s svc -a four -U >/dev/null
expect_eq "rotated-four" "$(cat "$MP/svc/four")" "rotation through the daemon"
printf 'rotated-again' | kc add-generic-password -s svc -a four -U >/dev/null
nothing_recoverable "rotation (add -U): earlier values are gone"

setfattr -n user.keychain.accessible -v after-first-unlock "$MP/svc/five"
expect_eq "after-first-unlock" "$(getfattr --only-values -n user.keychain.accessible "$MP/svc/five" 2>/dev/null)" "re-classed"
nothing_recoverable "setfattr accessible: the value sealed under the old class is gone"

kc delete-generic-password -s svc -a six >/dev/null
nothing_recoverable "delete-generic-password: gone"

expect_exit 75 "passwd refuses a mounted store" kc passwd --passphrase-file "$PASSFILE" --new-passphrase-file "$PASSFILE"
expect_contains "$ERR" "unmount it before changing its passphrase" "and says what to do"

# Each change to the item below returns only once it is durable and erased; a kill at any
# moment after leaves nothing.
for i in 1 2 3 4 5; do sh -c "printf 'value-$i' > '$MP/svc/seven'"; done
pid=$(daemon_pid "$MP")
kill -9 "$pid"
wait_gone "$pid"
nothing_recoverable "after kill -9 of the daemon"
fusermount3 -u -z "$MP" 2>/dev/null

kc passwd --passphrase-file "$PASSFILE" --new-passphrase-file "$PASSFILE" >/dev/null
nothing_recoverable "after passwd"
# At a terminal (script gives it one), --rekey shows its progress.
script -qec "'$KEYCHAINFS_BIN' passwd --rekey --passphrase-file '$PASSFILE' --new-passphrase-file '$PASSFILE'" /dev/null \
    >"$OUT" 2>"$ERR"
expect_eq 0 $? "passwd --rekey re-seals every item"
expect_contains "$OUT" "re-sealed 5 of 5 items" "with its progress on the terminal"
nothing_recoverable "after passwd --rekey: no item is left sealed under the old generation"
expect_eq "value-5" "$(kc find-generic-password -s svc -a seven -w --passphrase-file "$PASSFILE")" "and the items still read"

echo "== a this-device-only secret is never sealed under a class the passphrase alone opens"
S2="$TEST_ROOT/tdo/keychain.db"
init_store --store "$S2"
kc add-generic-password --store "$S2" -s vault -a key -w original --accessible when-unlocked-this-device-only \
    --passphrase-file "$PASSFILE" >/dev/null
mount_kc "$MP" --store "$S2"
SNAP="$TEST_ROOT/snap"
mkdir -p "$SNAP"
# snapshot: the attacker's copy of the files at this moment.
snapshot() { for s in "" -wal -shm -reserve; do [ -f "$S2$s" ] && cp "$S2$s" "$SNAP/keychain.db$s"; done; }

# A new file beside a this-device-only item is this-device-only from its creation.
sh -c "printf 'staged' > '$MP/vault/tmp.key'"
expect_eq "when-unlocked-this-device-only" "$(getfattr --only-values -n user.keychain.accessible "$MP/vault/tmp.key" 2>/dev/null)" \
    "a file created beside a this-device-only item takes its class"
snapshot
mv "$MP/vault/tmp.key" "$MP/vault/key"
nothing_recoverable "mv tmp acct, copied before the rename: no row of a weaker class" "$SNAP/keychain.db" --classes 4,5,6,7
nothing_recoverable "mv tmp acct, after: no row of a weaker class" "$S2" --classes 4,5,6,7

# sed -i, with the files copied while sed holds its finished temporary file, before its rename.
if command -v strace >/dev/null 2>&1; then
    strace -f -o /dev/null -e trace=rename,renameat,renameat2 -e inject=rename,renameat,renameat2:delay_enter=1500000 \
        sed -i 's/staged/edited/' "$MP/vault/key" &
    sed_pid=$!
    # Wait for sed's temporary file, give it time to be written and closed, then copy the files.
    i=0
    while ! ls "$MP/vault" | grep -q '^sed' && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    sleep 0.3
    snapshot
    expect_eq 1 "$(ls "$MP/vault" | grep -c '^sed')" "the copy was taken while sed's temporary file existed"
    wait $sed_pid
    expect_eq "edited" "$(cat "$MP/vault/key")" "sed -i saved"
    nothing_recoverable "sed -i, copied before its rename: no row of a weaker class" "$SNAP/keychain.db" --classes 4,5,6,7
else
    fail "strace is needed to pause sed -i before its rename (scripts/install-deps installs it)"
fi
nothing_recoverable "sed -i, after: no row of a weaker class" "$S2" --classes 4,5,6,7

# An item created in a new directory and re-classed before its secret is written.
mkdir "$MP/fresh"
touch "$MP/fresh/new"
setfattr -n user.keychain.accessible -v when-unlocked-this-device-only "$MP/fresh/new"
sh -c "printf 'bound' > '$MP/fresh/new'"
nothing_recoverable "created, re-classed, then written: no row of a weaker class is left" "$S2" --classes 4,5,6,7
# ... and one written first, then re-classed: the weaker row goes at the re-class.
mkdir "$MP/late"
sh -c "printf 'late' > '$MP/late/x'"
setfattr -n user.keychain.accessible -v when-unlocked-this-device-only "$MP/late/x"
nothing_recoverable "written, then re-classed: the weaker row is gone once setfattr returns" "$S2" --classes 4,5,6,7
# A file created while its service has no item, and a this-device-only one that another command adds
# before the file's first write: the file is stored this-device-only all the same.
mkdir "$MP/race"
exec 3>"$MP/race/open"
kc add-generic-password --store "$S2" -s race -a device -w bound --accessible when-unlocked-this-device-only >/dev/null 2>&1
printf 'secret' >&3
exec 3>&-
expect_eq "when-unlocked-this-device-only" "$(getfattr --only-values -n user.keychain.accessible "$MP/race/open" 2>/dev/null)" \
    "a file whose sibling turned this-device-only before its first write is stored this-device-only"
expect_eq "secret" "$(cat "$MP/race/open")" "with what was written"
nothing_recoverable "and no row of a weaker class is left" "$S2" --classes 4,5,6,7
kc unmount "$MP" >/dev/null

echo "== a full disk"
if small_store small 3m; then
    FS=$SMALL_FS S3=$SMALL_STORE
    mount_kc "$MP" --store "$S3"
    mkdir -p "$MP/svc"
    for a in a b c d; do sh -c "printf 'kept-$a' > '$MP/svc/$a'"; done
    # Leave about 100 KiB: enough to create an item, not to write 400 KB into it.
    avail=$(df -B1 --output=avail "$FS" | tail -1)
    head -c $((avail - 100 * 1024)) /dev/zero >"$FS/filler" 2>/dev/null
    expect_errno "a large write to a nearly full disk fails" "No space left on device" \
        sh -c "head -c 400000 /dev/urandom > '$MP/svc/new'"
    expect_eq "a b c d" "$(ls "$MP/svc" | tr '\n' ' ' | sed 's/ $//')" "the failed create-and-write leaves no empty item"
    head -c 10000000 /dev/zero >>"$FS/filler" 2>/dev/null
    # head, not the shell's printf: a commit's error comes at close(2), which dash does not check.
    expect_errno "the disk is full" "No space left on device" sh -c "head -c 4096 /dev/zero > '$FS/probe'"
    # An emptied WAL keeps its blocks (zeroed): small commits still fit in them.
    expect_exit 0 "a small save over an item fits in the blocks the emptied WAL kept" sh -c "head -c 1 /dev/zero > '$MP/svc/d'"
    expect_eq 1 "$(stat -c %s "$MP/svc/d")" "and is stored"
    expect_exit 0 "so does a small new file" sh -c "head -c 1 /dev/zero > '$MP/svc/more'"
    # ... and one of 5 pages, which the database file has no room for until a checkpoint grows it.
    expect_exit 0 "and a new file of 20 KB" sh -c "head -c 20000 /dev/urandom > '$MP/svc/mid'"
    expect_errno "a write larger than them fails" "No space left on device" sh -c "head -c 400000 /dev/urandom > '$MP/svc/big'"
    expect_eq "a b c d mid more" "$(ls "$MP/svc" | tr '\n' ' ' | sed 's/ $//')" "and is not left behind"
    # The delete's checkpoint must grow the database by the new files' pages: it gives up the
    # reserve, or the deleted value would stay in the database file until space returns.
    expect_exit 0 "rm works on a full disk" rm "$MP/svc/a"
    expect_exit 0 "delete-generic-password works on a full disk" kc delete-generic-password --store "$S3" -s svc -a b
    expect_eq "c d mid more" "$(ls "$MP/svc" | tr '\n' ' ' | sed 's/ $//')" "both are gone"
    expect_exit 0 "a second rm on the full disk" rm "$MP/svc/c"
    nothing_recoverable "on the full disk, nothing deleted is recoverable" "$S3"
    rm -f "$FS/filler"
    sh -c "printf 'after' > '$MP/svc/d'"
    expect_eq "after" "$(cat "$MP/svc/d")" "with space again, writes work"
    expect_eq 0 "$(wal_left "$S3")" "and the WAL is emptied"
    expect_eq 1 "$(test -f "$S3-reserve" && echo 1)" "the reserve is back"
    nothing_recoverable "nothing recoverable once space returns" "$S3"
    kc unmount "$MP" >/dev/null
    # Without a daemon: the command opens the store itself, and SQLite makes its -shm (32 KiB)
    # anew at every open, as the last close deleted it. The reserve makes the room for it.
    P3="--store $S3 --passphrase-file $PASSFILE"
    kc find-generic-password $P3 -s svc -a d -w >/dev/null
    expect_eq "" "$(ls "$S3"-shm "$S3"-wal 2>/dev/null)" "a command's close deleted the -wal and -shm"
    head -c 10000000 /dev/zero >"$FS/filler" 2>/dev/null
    expect_errno "the disk is full again" "No space left on device" sh -c "head -c 4096 /dev/zero > '$FS/probe'"
    expect_exit 0 "a command deletes an item on the full disk, without a daemon" kc delete-generic-password $P3 -s svc -a mid
    expect_eq "after" "$(kc find-generic-password $P3 -s svc -a d -w 2>"$ERR")" "and another reads"
    nothing_recoverable "nothing deleted by the command is recoverable" "$S3"
    head -c 10000000 /dev/zero >>"$FS/filler" 2>/dev/null
    expect_exit 73 "with no reserve left, a command that cannot open the store for want of room says the disk is full" \
        kc find-generic-password $P3 -s svc -a d -w
    rm -f "$FS/filler"
else
    fail "mount a small tmpfs (needs root)"
fi

echo "== a disk filled by the keychain's own writes"
# New items of 100 KB until the disk is full: a checkpoint that grows the database may take half
# the reserve, never the half a delete needs, and on a nearly full disk each commit is folded in
# at once, so no delete meets a WAL whose pages it has no room to fold (it failed with 73).
if small_store small2 2m; then
    S4=$SMALL_STORE
    mount_kc "$MP" --store "$S4"
    mkdir -p "$MP/fill"
    n=0
    while [ $n -lt 40 ] && head -c 100000 /dev/urandom >"$MP/fill/i$n" 2>/dev/null; do n=$((n + 1)); done
    expect_errno "the keychain's writes fill the disk: a create fails" "No space left on device" \
        sh -c "head -c 100000 /dev/urandom > '$MP/fill/last'"
    expect_eq "$n" "$(ls "$MP/fill" | wc -l)" "and leaves no item behind ($n stored)"
    expect_exit 0 "rm works on the disk the keychain filled" rm "$MP/fill/i0"
    expect_exit 0 "delete-generic-password too" kc delete-generic-password --store "$S4" -s fill -a i1
    expect_exit 0 "and a third delete" rm "$MP/fill/i2"
    expect_eq "$((n - 3))" "$(ls "$MP/fill" | wc -l)" "the three are gone"
    nothing_recoverable "nothing deleted is recoverable" "$S4"
    kc unmount "$MP" >/dev/null
else
    fail "mount a small tmpfs (needs root)"
fi

echo "== a write error while the WAL's frames are zeroed"
# The emptying zeroes the WAL's frames in 64 KiB writes, and each later emptying stops at the
# first frame header of zeros. One of those writes failing part way (ENOSPC on a full disk
# whose file system copies on write, EIO) must not leave the frames after it for good.
S4="$TEST_ROOT/zeroing/k.db"
init_store --store "$S4"
mount_kc "$MP" --store "$S4"
mkdir "$MP/svc"
pid=$(daemon_pid "$MP")
# fill TAG: creates whose frames stay in the WAL (some 300 KB), each secret with overflow pages.
# Then the daemon's move of their index entries (0.1 s after the first) is waited for, so that
# the trace after it holds the update's writes alone.
fill() {
    for i in 1 2 3 4 5 6 7 8 9 10 11 12; do head -c 3000 /dev/urandom | base64 -w0 >"$MP/svc/$1$i"; done
    store_settled "$S4" >/dev/null
}
# wal_writes OUT COMMAND: the daemon's writes to the WAL while COMMAND runs, one a line.
wal_writes() {
    strace -f -P "$S4-wal" -e trace=pwrite64 ${3:-} -o "$1" -p "$pid" 2>/dev/null &
    tracer=$!
    sleep 0.5
    sh -c "$2"
    sleep 0.3
    kill "$tracer"; wait "$tracer" 2>/dev/null
}
fill dry
# A first update, traced: which of its writes to the WAL zeroes the second 64 KiB of frames.
wal_writes "$TEST_ROOT/dry.trace" "head -c 10 /dev/urandom | base64 >'$MP/svc/dry12'"
second=$(grep 'pwrite64(' "$TEST_ROOT/dry.trace" | awk '/, 65536, 65536\)/ { print NR; exit }')
expect_eq 1 "$([ -n "$second" ] && echo 1)" "an update's emptying zeroes the WAL in 64 KiB writes"
fill doomed
# The same update again, its second write of zeros failing with ENOSPC.
wal_writes "$TEST_ROOT/fault.trace" "head -c 10 /dev/urandom | base64 >'$MP/svc/doomed12'" \
    "-e inject=pwrite64:error=ENOSPC:when=${second:-1}"
expect_contains "$TEST_ROOT/fault.trace" "65536, 65536) = -1 ENOSPC (No space left on device) (INJECTED)" \
    "the write of zeros over the second 64 KiB of frames failed"
expect_eq 0 "$(wal_left "$S4")" "the update returns with the WAL emptied all the same"
rm "$MP"/svc/doomed*
sh -c "printf 'x' >'$MP/svc/dry1'"
nothing_recoverable "the deleted items' frames after the failed write are gone" "$S4"
# A sync of the WAL that fails (EIO) may have lost the commit's frames: the writer is told, not
# reassured by a second sync through another descriptor, which the kernel answers with success
# once it has reported the write-back error.
wal_syncs() {
    strace -f -P "$S4-wal" -e trace=fdatasync -e inject=fdatasync:error=EIO:when=1 -o "$TEST_ROOT/eio.trace" -p "$pid" 2>/dev/null &
    tracer=$!
    sleep 0.5
    python3 -c 'import sys
f = open(sys.argv[1], "w")
f.write("unsure")
try:
    f.close()
    print("closed")
except OSError as e:
    print(e.strerror)' "$MP/svc/dry2"
    sleep 0.3
    kill "$tracer"; wait "$tracer" 2>/dev/null
}
expect_eq "Input/output error" "$(wal_syncs)" "an update whose sync of the WAL fails: close(2) fails with EIO"
expect_contains "$TEST_ROOT/eio.trace" "= -1 EIO (Input/output error) (INJECTED)" "the WAL's first sync failed"
# The commit stands (it is in the WAL, and on disk unless the disk lost it): it reads, and the
# next writes go on from it.
expect_eq "unsure" "$(cat "$MP/svc/dry2")" "the value whose sync failed reads back"
sh -c "printf 'sure' >'$MP/svc/dry2'"
expect_eq "sure" "$(cat "$MP/svc/dry2")" "and the item takes the next write"
nothing_recoverable "nothing earlier is left after it" "$S4"
kc unmount "$MP" >/dev/null
expect_exit 0 "and the store verifies after them" kc verify --store "$S4" --passphrase-file "$PASSFILE"

echo "== a crash while the WAL is emptied"
# The daemon killed between zeroing the WAL's header and syncing it: the zeros are in the page
# cache, the old header may still be on disk. The next open's emptying must not take those
# zeros for synced ones: frames zeroed under an old header left on disk would give recovery
# after a power loss a shorter chain of old frames to replay over the newer pages.
S6="$TEST_ROOT/crash/k.db"
init_store --store "$S6"
mount_kc "$MP" --store "$S6"
mkdir "$MP/svc"
for a in 1 2 3 4 5 6; do sh -c "printf 'first-$a' >'$MP/svc/$a'"; done
pid=$(daemon_pid "$MP")
# The WAL's syncs in an update: the checkpoint's of the frames, then the emptying's of the zeroed header.
strace -f -P "$S6-wal" -e trace=fdatasync,pwrite64 -e inject=fdatasync:signal=KILL:when=2 -o "$TEST_ROOT/kill.trace" -p "$pid" 2>/dev/null &
tracer=$!
sleep 0.5
sh -c "printf 'second-1' >'$MP/svc/1'" 2>/dev/null
wait_gone "$pid"
kill "$tracer" 2>/dev/null; wait "$tracer" 2>/dev/null
fusermount3 -u -z "$MP" 2>/dev/null
expect_eq "32, 0) = 32" "$(grep pwrite64 "$TEST_ROOT/kill.trace" | tail -1 | sed 's/.*, \(32, 0) = 32\).*/\1/')" \
    "the daemon was killed at the sync of the WAL's zeroed header"
strace -f -P "$S6-wal" -e trace=fdatasync,pwrite64 -o "$TEST_ROOT/open.trace" \
    "$KEYCHAINFS_BIN" verify --store "$S6" --passphrase-file "$PASSFILE" >"$OUT" 2>"$ERR"
expect_eq 0 $? "the store verifies after the crash"
order=$(awk '/pwrite64\(.*, 32, 0\) = 32/ && !h { h = NR } /fdatasync/ && h && !s { s = NR }
    /pwrite64\(.*, [0-9]+, 0\) = [0-9]+/ && !/, 32, 0\)/ && !z { z = NR }
    END { print (h && s && z && h < s && s < z) ? "header sync frames" : "h=" h " s=" s " z=" z }' "$TEST_ROOT/open.trace")
expect_eq "header sync frames" "$order" "the open writes and syncs the WAL's zero header again before zeroing its frames"
nothing_recoverable "and leaves nothing earlier in the files" "$S6"

echo "== the disk under the store"
# SQLite deletes the WAL when the last connection closes (every command run without a
# daemon): the blocks of a deleted file go back to the file system as they are, and the page
# cache drops its pages not yet written. The store's own file system, scanned block by block
# once the items are deleted, holds none of them.
IMG="$TEST_ROOT/disk.img"
DISK="$TEST_ROOT/disk"
mkdir -p "$DISK"
truncate -s 16M "$IMG"
if mkfs.ext4 -q "$IMG" 2>/dev/null && mount -o loop "$IMG" "$DISK" 2>/dev/null; then
    on_exit "umount -l '$DISK'"
    S5="$DISK/k.db"
    init_store --store "$S5"
    for a in 1 2 3 4 5 6; do
        kc add-generic-password --store "$S5" --passphrase-file "$PASSFILE" -s svc -a "a$a" -w "on-disk-$a" >/dev/null
    done
    for a in 1 2 3 4 5; do kc delete-generic-password --store "$S5" --passphrase-file "$PASSFILE" -s svc -a "a$a" >/dev/null 2>&1; done
    expect_eq "on-disk-6" "$(kc find-generic-password --store "$S5" --passphrase-file "$PASSFILE" -s svc -a a6 -w)" \
        "the item left reads"
    umount "$DISK"
    mount -o loop,ro "$IMG" "$DISK"
    nothing_recoverable "no block of the store's file system holds a deleted item" "$S5" --disk "$IMG"
    umount "$DISK"
else
    fail "make and mount an ext4 image (needs mkfs.ext4 and root)"
fi

echo "== each write is synced before it returns, with as few syncs as that takes"
# A create is made durable by one fdatasync of the WAL; a replacing write by the checkpoint
# that empties the WAL: one sync of the WAL, one of the database (SQLite's FULL took one more),
# then one of the WAL's zeroed header before its frames are zeroed (CStoreVFS: zeroed frames
# under an old header could give recovery a shorter chain of old frames to replay). The next
# commit's new header, written over that synced one, needs no sync of its own (SQLite's, for
# a WAL restarted over old frames, is left out there).
init_store --store "$TEST_ROOT/sync.db"
mount_kc "$MP" --store "$TEST_ROOT/sync.db"
mkdir "$MP/svc"
sh -c "printf 'first' > '$MP/svc/a'"
pid=$(daemon_pid "$MP")
# trace_daemon CALLS OUT COMMAND: the daemon's system calls CALLS (strace -y: with the files
# named) while COMMAND runs, into OUT.
trace_daemon() {
    strace -f -y -e trace="$1" -o "$2" -p "$pid" 2>/dev/null &
    tracer=$!
    sleep 0.5
    sh -c "$3"
    sleep 0.3
    kill "$tracer"; wait "$tracer" 2>/dev/null
}
# syncs COMMAND: the daemon's fdatasync calls while COMMAND runs, as "wal db" counts.
syncs() {
    trace_daemon fdatasync,fsync "$TEST_ROOT/sync.trace" "$1"
    echo "$(grep -c 'sync.db-wal>' "$TEST_ROOT/sync.trace") $(grep -c 'sync.db>' "$TEST_ROOT/sync.trace")"
}
# Once commits pause (0.1 s after the create, inside the trace) the daemon moves the create's
# index entries into the index (Keychain.indexPendingTags): a commit that is not synced, since
# losing it loses nothing.
expect_eq "1 0" "$(syncs "printf 'new' > '$MP/svc/b'")" "a create: one sync of the WAL, none for its index entries' move"
# Its frames (a header and a page each, as SQLite writes them) go to the WAL as one write; the
# move's as one more.
trace_daemon pwrite64 "$TEST_ROOT/frames.trace" "printf 'new' > '$MP/svc/c'; sleep 0.7"
expect_eq "2" "$(grep -c 'sync.db-wal>' "$TEST_ROOT/frames.trace")" "a create writes its WAL frames with one write, and the move one more"
rm "$MP/svc/c"
# Creates look at no store file's or record's times: a look makes the kernel stamp that
# file's next write with a fine-grained time, which moves every file's clock, and the next
# commit's WAL write then changed its inode and its sync wrote the inode too
# (StoreFileWatch.swift). The files' state is recorded once the commits pause.
trace_daemon 'newfstatat,fstat,stat,lstat,statx' "$TEST_ROOT/stat.trace" \
    "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do printf 'new' > '$MP/svc/s'\$i; done"
expect_eq 20 "$(ls "$MP/svc" | grep -c '^s')" "20 creates"
looks=$(grep -E "sync\.db|/stores/" "$TEST_ROOT/stat.trace" | grep -vE 'statx\([^)]*STATX_NLINK\|STATX_SIZE,' | grep -c .)
expect_eq 1 "$([ "$looks" -le 6 ] && echo 1)" "20 creates look at the store's files' times a few times, not at each commit ($looks)"
rm "$MP"/svc/s*
expect_eq "2 1" "$(syncs "printf 'second' > '$MP/svc/a'")" "an update: two syncs of the WAL (its frames, its zeroed header), one of the database"
# In that order: after the database's sync, the WAL's header alone is zeroed and synced, and
# only then are its frames zeroed.
trace_daemon pwrite64,fdatasync "$TEST_ROOT/order.trace" "printf 'third' > '$MP/svc/a'"
order=$(awk '/sync.db>/ && /fdatasync/ { seen = 1; next }
    seen && /sync.db-wal>/ { n++; if (n == 1) first = ($0 ~ /pwrite64\(.*, 32, 0\)/) ? "header" : $0;
                              if (n == 2) second = ($0 ~ /fdatasync/) ? "sync" : $0;
                              if (n == 3) third = ($0 ~ /pwrite64/) ? "frames" : $0 }
    END { print first, second, third }' "$TEST_ROOT/order.trace")
expect_eq "header sync frames" "$order" "the emptying zeroes and syncs the WAL's header before its frames"
# The WAL the update emptied starts afresh, its new header over the synced zeros.
expect_eq "2 1" "$(syncs "rm '$MP/svc/b'")" "a delete after it: the same, no sync of the new WAL's header"
expect_eq 0 "$(wal_left "$TEST_ROOT/sync.db")" "and the WAL holds nothing after it"
# The records beside the device key (counter, files' state) are rewritten in place at every
# commit: an ftruncate would be one more journalled change of an inode per write.
strace -f -y -e trace=ftruncate -o "$TEST_ROOT/trunc.trace" -p "$pid" 2>/dev/null &
tracer=$!
sleep 0.5
sh -c "printf 'third' > '$MP/svc/a'; printf 'fourth' > '$MP/svc/a'"
sleep 0.3
kill "$tracer"; wait "$tracer" 2>/dev/null
expect_eq "0" "$(grep -c "$XDG_STATE_HOME" "$TEST_ROOT/trunc.trace")" "an update truncates no record beside the device key"
expect_eq "fourth" "$(cat "$MP/svc/a")" "and reads back"
# The files' state is recorded when commits pause, and when the daemon's loop ends (it exits
# without closing the store): an unmount right after a commit leaves that commit's state recorded.
printf 'fifth' > "$MP/svc/a"
kc unmount "$MP" >/dev/null
expect_eq "recorded" "$(python3 - "$TEST_ROOT/sync.db" "$XDG_STATE_HOME"/keychainfs/stores/*.files <<'PY'
import os, sys
store, records = sys.argv[1], sys.argv[2:]
def fields(path):
    st = os.stat(path)
    return " ".join([str(st.st_dev), str(st.st_ino), str(st.st_size), "%d.%d" % divmod(st.st_mtime_ns, 10**9),
                     "%d.%d" % divmod(st.st_ctime_ns, 10**9)])
wal = store + "-wal"
holds = os.path.exists(wal) and os.path.getsize(wal) > 0 and open(wal, "rb").read(32).strip(b"\0") != b""
state = "db " + fields(store) + " wal " + (fields(wal) if holds else "empty")
print("recorded" if any(open(r).read().strip() == state for r in records) else "not recorded: " + state)
PY
)" "an unmount right after a commit records the files' state the commit left"
expect_eq "fifth" "$(kc find-generic-password --store "$TEST_ROOT/sync.db" --passphrase-file "$PASSFILE" -s svc -a a -w 2>/dev/null)" \
    "what was written is in the store after unmount"
expect_exit 0 "and the store opens with its records so written" kc verify --store "$TEST_ROOT/sync.db" --passphrase-file "$PASSFILE"

echo "== a store reached through a symbolic link"
# SQLite resolves the link and keeps the -wal and -shm beside the store itself; keychainfs must
# make, check and watch those files, not names beside the link. A WAL forged there (an older
# copy of a row put back, under the current ledger) would otherwise go unseen by the check of
# the files' state, and the older value be served.
REAL="$TEST_ROOT/real/k.db"
LINK="$TEST_ROOT/link/k.db"
mkdir -p "$TEST_ROOT/real" "$TEST_ROOT/link"
chmod 700 "$TEST_ROOT/real" "$TEST_ROOT/link"
init_store --store "$REAL"
ln -s "$REAL" "$LINK"
PL="--store $LINK --passphrase-file $PASSFILE"
kc add-generic-password $PL -s svc -a x -w first >/dev/null
kc add-generic-password $PL -s svc -a y -w other >/dev/null
cp "$REAL" "$TEST_ROOT/older.db"
kc add-generic-password $PL -s svc -a x -w second -U >/dev/null
expect_eq "second" "$(kc find-generic-password $PL -s svc -a x -w)" "the store reads through the link"
expect_eq "k.db" "$(ls "$TEST_ROOT/link")" "no side file is made beside the link"
page=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT rootpage FROM sqlite_master WHERE name = ?", ("items",)).fetchone()[0])' "$TEST_ROOT/older.db")
python3 "$TESTS_DIR/forge_wal.py" "$TEST_ROOT/older.db" "$page" "$REAL" "$REAL-wal"
chmod 600 "$REAL-wal"
rm -f "$REAL-shm"
expect_exit 93 "a row put back by a forged WAL beside the store is an integrity failure" \
    kc find-generic-password $PL -s svc -a x -w
expect_not_contains "$OUT" "first" "and the older value is not served"

echo "== a row put back while the store is mounted"
# The files' state is recorded once commits pause, not at each commit: between commits a watch
# hears any other write. A row put back by another process while the store is mounted, then a
# commit that fails inside its transaction and one that goes through, then the unmount: the
# next open must read every row and refuse the store (Keychain+FilesRecord.swift).
RB="$TEST_ROOT/replay.db"
init_store --store "$RB"
mount_kc "$MP" --store "$RB"
mkdir "$MP/svc"
printf 'first-value' >"$MP/svc/a"
printf 'kept' >"$MP/svc/keep"
# Read from a copy: sqlite3 opening the live store as root gives its WAL its owner again, a
# change the daemon would hear before the row is put back.
sleep 0.3
cp "$RB" "$TEST_ROOT/replay-copy.db"
cp "$RB-wal" "$TEST_ROOT/replay-copy.db-wal"
id=$(sqlite3 "$TEST_ROOT/replay-copy.db" "SELECT min(id) FROM items")
old=$(sqlite3 "$TEST_ROOT/replay-copy.db" "SELECT version, quote(wrapped_key), quote(attributes), quote(secret) FROM items WHERE id = $id")
printf 'second-value' >"$MP/svc/a"
sleep 0.3
expect_eq "second-value" "$(cat "$MP/svc/a")" "the item updated through the mount"
v=${old%%|*}
rest=${old#*|}
sqlite3 -cmd ".timeout 5000" "$RB" "UPDATE items SET version = $v, wrapped_key = ${rest%%|*}, attributes = $(echo "$rest" | cut -d'|' -f2), secret = ${rest##*|} WHERE id = $id"
expect_exit 78 "a commit that fails inside its transaction (this-device-only and synchronizable)" \
    kc add-generic-password --store "$RB" -s svc -a bad -w x --synchronizable --accessible when-unlocked-this-device-only
printf 'third' >"$MP/svc/c"
kc unmount "$MP" >/dev/null
expect_exit 93 "the row put back meanwhile is an integrity failure at the next open" \
    kc find-generic-password --store "$RB" --passphrase-file "$PASSFILE" -s svc -a a -w
expect_not_contains "$OUT" "first-value" "and the older value is not served"

echo "== init changes only directories it made"
SHARED="$TEST_ROOT/shared"
mkdir -p "$SHARED"
chmod 1777 "$SHARED"
init_store --store "$SHARED/k.db"
expect_eq "1777" "$(stat -c %a "$SHARED")" "an existing directory keeps its mode and sticky bit"
init_store --store "$TEST_ROOT/made/here/k.db"
expect_eq "700 700" "$(stat -c %a "$TEST_ROOT/made") $(stat -c %a "$TEST_ROOT/made/here")" "directories it creates are 0700"

finish
