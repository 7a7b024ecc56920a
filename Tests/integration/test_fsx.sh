#!/bin/sh
# fsx (xfstests' file system exerciser) on an item through the mount: random reads, writes
# (past the end, making holes), truncates up and down and closes and reopens (each close
# commits the item), every read checked against fsx's own copy. It fetches and builds
# nothing: build fsx yourself, outside this repository (its one source file and a few
# headers; no autotools):
#
#     git clone https://github.com/kdave/xfstests /tmp/xfstests-src   # run with 63a29724
#     cd /tmp/xfstests-src && git checkout 63a29724 && printf '#define HAVE_ERR_H 1\n#define HAVE_LINUX_FALLOC_H 1\n' >src/config.h &&
#     mkdir -p /tmp/xfstests && gcc -O2 -D_GNU_SOURCE -include getopt.h -include linux/falloc.h -include sys/param.h \
#         -include assert.h -include unistd.h -include stdlib.h -include sys/stat.h \
#         -include sys/ioctl.h -Iinclude -Isrc -o /tmp/xfstests/fsx ltp/fsx.c
#
# then run this script (FSX_BIN=/elsewhere if it is not /tmp/xfstests/fsx). Without it, it
# says so and skips. Mapped reads and writes are off (-R -W: a shared mapping of a secret is
# ENODEV, README "Documented, not silent"), and so are fallocate and its modes (-F, -H punch
# hole, -z zero range, -C collapse, -I insert, -K keep size, -u unshare) and copy_file_range
# (-E): keychainfs implements none of them. Clone, dedupe and exchange ranges fsx probes
# itself at its start and leaves out where they are not supported, as here.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

FSX_BIN=${FSX_BIN:-/tmp/xfstests/fsx}
if [ ! -x "$FSX_BIN" ]; then
    skip "fsx" "it is not built at $FSX_BIN (see the top of $0 to build it)"
    finish
fi

init_store
expect_exit 0 "mount" mount_kc "$MP"
mkdir -p "$MP/fsx" "$TEST_ROOT/fsx-log"

# SEED OPTIONS WHAT: one run of 3,000 operations on a new item.
run_fsx() {
    seed=$1 options=$2 what=$3
    file=$MP/fsx/seed$seed
    # shellcheck disable=SC2086
    "$FSX_BIN" -N 3000 -q -R -W -F -H -z -C -I -E -K -u -S "$seed" $options \
        -P "$TEST_ROOT/fsx-log" "$file" >"$OUT" 2>"$ERR"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "All 3000 operations completed A-OK" "$OUT"; then
        pass "fsx seed $seed: $what"
    else
        fail "fsx seed $seed: $what (exit $rc)"
        show_output
    fi
}

run_fsx 1 "-c 20" "a close and reopen 1 in 20"
run_fsx 7 "-c 5" "a close and reopen 1 in 5"
run_fsx 11 "-c 50 -y" "fsync after each write"
run_fsx 23 "-c 3 -l 1048576 -o 200000" "up to 1 MiB, operations up to 200 KB"

# What the last close committed is what a new mount reads: fsx's file of seed 23 again,
# byte for byte, after an unmount.
cp "$MP/fsx/seed23" "$TEST_ROOT/seed23.before"
expect_exit 0 "unmount" kc unmount "$MP"
expect_exit 0 "mount again" mount_kc "$MP"
expect_exit 0 "fsx's last file reads back the same after a remount" cmp "$MP/fsx/seed23" "$TEST_ROOT/seed23.before"
expect_exit 0 "verify" kc verify

finish
