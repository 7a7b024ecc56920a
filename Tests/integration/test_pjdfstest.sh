#!/bin/sh
# pjdfstest (https://github.com/pjd/pjdfstest) through the mount: the test files of its unlink,
# rename, mkdir, rmdir, truncate, ftruncate and open groups that keychainfs passes in full, and
# the files of chmod, chown, link, mkfifo, mknod and symlink that need none of what keychainfs
# refuses (a missing or non-directory path prefix, a path outside the address space). Files
# that would pass only by pjdfstest's quick_exit are not run: those that need chflags or
# FreeBSD (unlink/09, 10, 12; rename/06-08, 15, 16; mkdir/08, 09, 11; rmdir/09, 10, 13, 14;
# truncate/08, 10, 11; ftruncate/08, 10, 11; open/09-11, 13-15, 18-20), and rename/22,
# which checks ctime only on file systems it names (ext4, UFS, ZFS).
# It fetches and builds nothing: build pjdfstest yourself (root, outside this repository):
#
#     git clone https://github.com/pjd/pjdfstest /tmp/pjdfstest
#     apt-get install autoconf automake   # Debian: not in scripts/install-deps
#     cd /tmp/pjdfstest && autoreconf -ifs && ./configure && make pjdfstest
#
# then run this script (PJDFSTEST_DIR=/elsewhere if it is not in /tmp/pjdfstest). Without it,
# or when not root, the script says so and skips.
#
# The tests run in an internet port directory, where files are items and directories nest.
# The files left out fail by design: they make symlinks, fifos, sockets, devices or hard
# links, chmod or chown to modes and owners other than 0600/0700 and the mounter, create
# as other users, or write past 16 MiB. So do unlink/03, rename/02, truncate/03 and
# ftruncate/03: each makes a path of PATH_MAX - 1 bytes below the test's directory, and
# keychainfs counts an item's path from the mountpoint (README, "Length": every item can be
# opened by its path from the mountpoint), three levels above it here; they get ENAMETOOLONG.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

PJDFSTEST_DIR=${PJDFSTEST_DIR:-/tmp/pjdfstest}
if [ ! -x "$PJDFSTEST_DIR/pjdfstest" ] || [ ! -d "$PJDFSTEST_DIR/tests" ]; then
    skip "pjdfstest" "it is not built at $PJDFSTEST_DIR (see the top of $0 to build it)"
    finish
fi
if [ "$(id -u)" -ne 0 ]; then
    skip "pjdfstest" "it needs root"
    finish
fi

SUBSET="
unlink/01 unlink/02 unlink/04 unlink/08 unlink/13 unlink/14
rename/01 rename/03 rename/17 rename/18 rename/19 rename/24
mkdir/02 mkdir/03 mkdir/04 mkdir/12
rmdir/00 rmdir/02 rmdir/04 rmdir/12 rmdir/15
truncate/00 truncate/01 truncate/02 truncate/04 truncate/09 truncate/12 truncate/13 truncate/14
ftruncate/01 ftruncate/02 ftruncate/04 ftruncate/09 ftruncate/12 ftruncate/13 ftruncate/14
open/04 open/08 open/21 open/23
chmod/10 chown/10 link/04 link/17 mkfifo/04 mkfifo/12 mknod/04 mknod/10 symlink/01 symlink/04 symlink/12
"

# unlink/08: unlink(2) of a directory is EISDIR on Linux, where POSIX says EPERM.
LINUX_TODO="unlink/08"

init_store
expect_exit 0 "mount" mount_kc "$MP"
WORK=$MP/internet/pjdfstest/443
mkdir -p "$WORK"

for t in $SUBSET; do
    file=$PJDFSTEST_DIR/tests/$t.t
    if [ ! -f "$file" ]; then
        fail "$t" "no such test file: $file"
        continue
    fi
    out=$(cd "$WORK" && sh "$file" 2>&1)
    plan=$(printf '%s\n' "$out" | sed -n 's/^1\.\.\([0-9]*\)$/\1/p' | head -1)
    ran=$(printf '%s\n' "$out" | grep -c '^ok \|^not ok ')
    # Every "not ok" fails, but for the "# TODO" checks pjdfstest marks `todo Linux` in the
    # files of LINUX_TODO: there Linux itself answers otherwise than POSIX (ext4 as well).
    failed=$(printf '%s\n' "$out" | grep '^not ok ')
    case " $LINUX_TODO " in *" $t "*) failed=$(printf '%s\n' "$failed" | grep -v '# TODO') ;; esac
    if [ -z "$failed" ] && [ -n "$plan" ] && [ "$ran" -eq "$plan" ]; then
        pass "pjdfstest $t ($plan checks)"
    else
        fail "pjdfstest $t" "plan ${plan:-none}, ran $ran" "$(printf '%s\n' "$failed" | head -5)"
    fi
done
expect_eq "" "$(ls -A "$WORK")" "pjdfstest left nothing behind"

finish
