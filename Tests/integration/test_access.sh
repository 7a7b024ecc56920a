#!/bin/sh
# Issue 17, per-program access, through a real mount and real programs: an item that lists
# /usr/bin/head is read by head and refused to cat, python, a copy of head, head under strace
# and head with LD_PRELOAD; a replaced binary; interpreter-plus-script rules; the list across
# remount, passwd, export and import; a tampered list; the CLI and the git helper; a scripted
# pinentry (Allow once, Always allow, Deny, timeout, a prompt that waits while others read);
# the access log. Then the core of it again as a normal user in a private mount namespace.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

for tool in strace sqlite3 gcc getfattr setfattr git; do have "$tool" || finish; done
PY=/usr/bin/python3
FULL="$(dirname "$KEYCHAINFS_BIN")/keychainfs-full"
HELPER="$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs"
W="$TEST_ROOT/work"
mkdir -p "$W"
ACCESS=user.keychain.access

# reads PROGRAM... FILE: the program's output, and "EXIT n".
reads() { "$@" 2>"$TEST_ROOT/reads.err"; echo " EXIT $?"; }
refused_to() {
    name=$1
    shift
    got=$("$@" 2>&1)
    rc=$?
    case "$rc:$got" in
        0:*|*hunter2*) fail "$name is refused" "exit $rc: $got" ;;
        *"Permission denied"*|*"PermissionError"*|*"Access denied"*) pass "$name is refused (EACCES)" ;;
        *) fail "$name is refused with EACCES" "exit $rc: $got" ;;
    esac
}
list_of() { getfattr --only-values -n $ACCESS "$1" 2>/dev/null; }

init_store
mount_kc "$MP" || { fail "mount" "$(cat "$ERR")"; finish; }
ITEM="$MP/svc/acct"

echo "== -T: the list, read and set in the tree"
expect_exit 0 "add with -T /usr/bin/head" sh -c "printf hunter2 | '$KEYCHAINFS_BIN' add-generic-password -s svc -a acct -T /usr/bin/head"
expect_eq "/usr/bin/head" "$(list_of "$ITEM")" "user.keychain.access lists head"
expect_exit 0 "an unguarded item beside it" sh -c "printf open-secret | '$KEYCHAINFS_BIN' add-generic-password -s svc -a open"
expect_eq "" "$(list_of "$MP/svc/open")" "an item added without -T has no list"
expect_contains "$(ls -l "$MP/svc")" "acct" "ls shows the guarded item"
expect_exit 0 "stat of the guarded item" stat "$ITEM"
expect_exit 0 "getfattr of the guarded item's label" getfattr -d "$ITEM"

echo "== who may read it"
expect_eq "hunter2" "$(head -c 100 "$ITEM")" "head reads it"
refused_to "cat" cat "$ITEM"
refused_to "python open()" $PY -c "import sys; print(open(sys.argv[1]).read())" "$ITEM"
cp /usr/bin/head "$W/head-copy"
refused_to "a copy of head" "$W/head-copy" -c 100 "$ITEM"
refused_to "head under strace" strace -f -o /dev/null head -c 100 "$ITEM"
LIB=$(ldd /usr/bin/head | awk '/libc.so/ { print $3 }')
refused_to "LD_PRELOAD=libc head" env LD_PRELOAD="$LIB" head -c 100 "$ITEM"
refused_to "LD_LIBRARY_PATH head" env LD_LIBRARY_PATH=/tmp head -c 100 "$ITEM"
# The loader variables are read from the process's own memory, which a preloaded library can
# rewrite before the program's first open: then it reads as the program. Shown, not hidden.
cat >"$W/hide.c" <<'CEOF'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern char **environ;
/* Preloaded: renames its own LD_PRELOAD in the environment block /proc shows, then reads
 * $HIDE_ITEM as the program it was loaded into. */
__attribute__((constructor)) static void hide(void) {
    const char *item = getenv("HIDE_ITEM");
    for (char **e = environ; *e; e++) if (strncmp(*e, "LD_PRELOAD=", 11) == 0) (*e)[0] = 'X';
    char buf[256];
    int fd = item ? open(item, O_RDONLY) : -1;
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (n >= 0) { buf[n] = 0; fprintf(stderr, "hidden:%s\n", buf); }
}
CEOF
if gcc -O2 -shared -fPIC -o "$W/hide.so" "$W/hide.c"; then
    got=$(HIDE_ITEM="$ITEM" LD_PRELOAD="$W/hide.so" head -c 0 /dev/null 2>&1)
    case "$got" in
        *hunter2*) skip "a preloaded library that hides its LD_PRELOAD is refused" \
            "known gap, in the README (Refused even when listed): it read the secret" ;;
        *) pass "a preloaded library that hides its LD_PRELOAD is refused" ;;
    esac
else
    fail "compile hide.c"
fi
expect_eq "open-secret" "$(cat "$MP/svc/open")" "cat still reads an item with no list"

echo "== what else the list guards"
refused_to "writing it (sh >)" sh -c "printf x > '$ITEM'"
refused_to "rm" rm -f "$ITEM"
refused_to "mv" mv "$ITEM" "$MP/svc/moved"
printf other >"$W/other"
refused_to "overwriting it by rename (mv onto it)" mv "$MP/svc/open" "$ITEM"
refused_to "setfattr of the list by a program not on it" setfattr -n $ACCESS -v "/usr/bin/cat" "$ITEM"
refused_to "removing the list" setfattr -x $ACCESS "$ITEM"
expect_eq "hunter2" "$(head -c 100 "$ITEM")" "the item is unchanged"

echo "== every change to a guarded item is guarded; names, ls, stat and reading attributes stay open"
for a in label comment description generic creator type; do
    refused_to "setfattr of $a by a program not on the list" setfattr -n user.keychain.$a -v changed "$ITEM"
done
refused_to "setfattr of the class (re-sealing it weaker)" setfattr -n user.keychain.accessible -v always "$ITEM"
printf 'label-me' | kc add-generic-password -s svc -a labelled -l "the label" -T /usr/bin/head >/dev/null
refused_to "removing the label (setfattr -x)" setfattr -x user.keychain.label "$MP/svc/labelled"
expect_eq "the label" "$(getfattr --only-values -n user.keychain.label "$MP/svc/labelled")" "the label is unchanged and getfattr reads it"
expect_eq "when-unlocked" "$(getfattr --only-values -n user.keychain.accessible "$ITEM")" "the class is unchanged"
expect_exit 0 "ls -l of the directory" ls -l "$MP/svc"
expect_exit 0 "stat of the item" stat "$ITEM"
expect_exit 0 "getfattr -d of the item" getfattr -d "$ITEM"
expect_exit 77 "add -U changing only the comment: exit 77" sh -c "printf hunter2 | '$KEYCHAINFS_BIN' add-generic-password -s svc -a acct -U -j 'a new comment'"
expect_eq "" "$(getfattr --only-values -n user.keychain.comment "$ITEM" 2>/dev/null)" "the comment is not set"
SETFATTR=$(realpath "$(command -v setfattr)")
printf 'attr-secret' | kc add-generic-password -s svc -a byattr -T /usr/bin/head -T "$SETFATTR" >/dev/null
expect_exit 0 "a program on the list (setfattr) changes the label" setfattr -n user.keychain.label -v "set by setfattr" "$MP/svc/byattr"
expect_eq "set by setfattr" "$(getfattr --only-values -n user.keychain.label "$MP/svc/byattr")" "the new label reads back"
expect_exit 0 "and the class" setfattr -n user.keychain.accessible -v after-first-unlock "$MP/svc/byattr"
expect_eq "attr-secret" "$(head -c 100 "$MP/svc/byattr")" "the re-sealed item still reads"
expect_exit 0 "an item with no list: any program sets its label" setfattr -n user.keychain.label -v open "$MP/svc/open"

echo "== a directory's list is the default of new items below it"
mkdir "$MP/dsvc"
expect_exit 0 "setfattr of user.keychain.access on an empty service directory" setfattr -n $ACCESS -v /usr/bin/head "$MP/dsvc"
expect_eq "/usr/bin/head" "$(list_of "$MP/dsvc")" "getfattr shows the directory's default"
expect_contains "$(getfattr -d -m - "$MP/dsvc" 2>&1)" "$ACCESS" "getfattr -d lists it on the directory"
expect_eq "" "$(getfattr -d -m - "$MP/svc" 2>&1)" "a directory with no default has no attribute"
expect_exit 1 "getfattr of a directory with no default: ENODATA" getfattr -n $ACCESS "$MP/svc"
expect_contains "$ERR" "No such attribute" "with ENODATA"
sh -c "printf via-mount > '$MP/dsvc/mount'"
expect_eq "/usr/bin/head" "$(list_of "$MP/dsvc/mount")" "an item written with sh > takes the default"
expect_eq "via-mount" "$(head -c 100 "$MP/dsvc/mount")" "head reads it"
refused_to "cat of the new item" cat "$MP/dsvc/mount"
touch "$MP/dsvc/touched"
# An empty new file is stored at its release, just after close(2) returns: it takes the
# default then.
i=0
while [ -z "$(list_of "$MP/dsvc/touched")" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
expect_eq "/usr/bin/head" "$(list_of "$MP/dsvc/touched")" "an empty file made with touch takes it"
printf 'via-cli' | kc add-generic-password -s dsvc -a cli >/dev/null
expect_eq "/usr/bin/head" "$(list_of "$MP/dsvc/cli")" "an item added by the CLI takes it"
expect_exit 77 "find -w of it by the CLI: exit 77" kc find-generic-password -s dsvc -a cli -w
printf 'given' | kc add-generic-password -s dsvc -a given -T /usr/bin/cat >/dev/null
expect_eq "/usr/bin/cat" "$(list_of "$MP/dsvc/given")" "-T given replaces the default"
printf 'anyone' | kc add-generic-password -s dsvc -a anyone -A >/dev/null
expect_eq "anyone" "$(cat "$MP/dsvc/anyone")" "-A: any program, the default not taken"
expect_eq "open-secret" "$(cat "$MP/svc/open")" "items that existed before are unchanged"
refused_to "changing a directory's default by a program not on it" setfattr -n $ACCESS -v /usr/bin/cat "$MP/dsvc"
refused_to "removing it by a program not on it" setfattr -x $ACCESS "$MP/dsvc"
expect_eq "/usr/bin/head" "$(list_of "$MP/dsvc")" "the default is unchanged"
expect_exit 1 "another setfattr name on a directory is refused" setfattr -n user.keychain.label -v x "$MP/dsvc"
mkdir -p "$MP/internet/git.example.org"
expect_exit 0 "a server directory's default" setfattr -n $ACCESS -v /usr/bin/head "$MP/internet/git.example.org"
printf 'protocol=https\nhost=git.example.org\nusername=bob\npassword=pw-of-bob\n\n' | "$HELPER" store
expect_eq "/usr/bin/head" "$(list_of "$MP/internet/git.example.org/443/bob")" "an item stored by git's helper takes the server's default"
printf 'protocol=https\nhost=git.example.org\nusername=bob\n\n' | "$HELPER" get >"$OUT" 2>&1
expect_not_contains "$OUT" "pw-of-bob" "and git's helper, not on it, is not given it"
mkdir -p "$MP/internet/git.example.org/8443"
sh -c "printf deep > '$MP/internet/git.example.org/8443/carol'"
expect_eq "/usr/bin/head" "$(list_of "$MP/internet/git.example.org/8443/carol")" "a file below a port directory takes its server's default"
mkdir "$MP/emptydir" && setfattr -n $ACCESS -v "/usr/bin/head" "$MP/emptydir"
SETDIR=$(realpath "$(command -v setfattr)")
mkdir "$MP/opendir"
expect_exit 0 "a default listing setfattr itself" setfattr -n $ACCESS -v "$SETDIR" "$MP/opendir"
expect_exit 0 "setfattr, on it, changes it" setfattr -n $ACCESS -v "$SETDIR
/usr/bin/head" "$MP/opendir"
expect_exit 0 "and removes it" setfattr -x $ACCESS "$MP/opendir"
expect_exit 1 "removed: ENODATA" getfattr -n $ACCESS "$MP/opendir"
for f in "$KEYCHAINFS_STORE" "$KEYCHAINFS_STORE-wal"; do
    [ -f "$f" ] || continue
    if grep -a -q -e dsvc -e emptydir "$f"; then fail "no directory name in plaintext in $(basename "$f")"; else pass "no directory name in plaintext in $(basename "$f")"; fi
done

echo "== the CLI and the git helper are programs like any other"
expect_exit 77 "find-generic-password -w: exit 77" kc find-generic-password -s svc -a acct -w
expect_not_contains "$OUT" "hunter2" "no secret on stdout"
expect_contains "$ERR" "Access denied" "it says access was denied"
expect_exit 77 "find-generic-password -g: exit 77" kc find-generic-password -s svc -a acct -g
expect_exit 0 "find without the secret is open" kc find-generic-password -s svc -a acct
expect_exit 77 "dump-keychain -d: exit 77" kc dump-keychain -d
# It goes on past each item that refuses it, as past a locked one, and says so in its place;
# it ends naming the first one met, by its path in the tree.
expect_contains "$OUT" "secret: <access denied: /svc/acct: " "each refused secret is said in its place"
expect_eq "$(grep -c '^class: ' "$OUT")" "$(grep -c '^secret: ' "$OUT")" "every item is dumped, each with a secret line"
NAMED=$(sed -n 's/^keychainfs: Access denied: \(\/[^:]*\): .*/\1/p' "$ERR")
if [ -n "$NAMED" ] && [ -f "$MP$NAMED" ] && [ -n "$(list_of "$MP$NAMED")" ]; then
    pass "the refusal names the item refused ($NAMED), a guarded item of the mount"
else fail "the refusal names the item refused, a guarded item of the mount" "$(cat "$ERR")"; fi
expect_not_contains "$OUT" "hunter2" "and shows no secret"
expect_not_contains "$ERR" "hunter2" "nor on stderr"
expect_exit 0 "dump-keychain without secrets is open" kc dump-keychain
expect_exit 77 "delete-generic-password: exit 77" kc delete-generic-password -s svc -a acct
expect_exit 77 "add -U over it: exit 77" sh -c "printf new | '$KEYCHAINFS_BIN' add-generic-password -s svc -a acct -U"
printf 'pw-of-git' | kc add-internet-password -s git.example.com -a alice -r https -T /usr/bin/head >/dev/null
GITREQ="$TEST_ROOT/gitreq"
printf 'protocol=https\nhost=git.example.com\nusername=alice\n\n' >"$GITREQ"
"$HELPER" get <"$GITREQ" >"$OUT" 2>"$ERR"
expect_not_contains "$OUT" "pw-of-git" "the git helper gets no password of an item not listing it"
expect_exit 0 "the item is still there" kc find-internet-password -s git.example.com -a alice
"$HELPER" erase <"$GITREQ" >/dev/null 2>&1
expect_exit 0 "the git helper's erase did not delete it" kc find-internet-password -s git.example.com -a alice

echo "== a user-owned allowed binary, replaced"
cp /usr/bin/head "$W/myhead"
printf 'mine' | kc add-generic-password -s own -a item -T "$W/myhead" >/dev/null
expect_eq "mine" "$("$W/myhead" -c 10 "$MP/own/item")" "the allowed binary reads"
cp /usr/bin/tail "$W/myhead"
refused_to "the binary rewritten in place" "$W/myhead" -c 10 "$MP/own/item"
cp /usr/bin/head "$W/myhead.new" && mv "$W/myhead.new" "$W/myhead"
refused_to "the binary replaced by another file (even a copy of head)" "$W/myhead" -c 10 "$MP/own/item"

echo "== interpreter plus script"
printf 'import sys\nprint(open(sys.argv[1]).read())\n' >"$W/allowed.py"
cp "$W/allowed.py" "$W/other.py"
printf 'scripted' | kc add-generic-password -s py -a item -T "$PY $W/allowed.py" >/dev/null
expect_eq "$PY $W/allowed.py" "$(list_of "$MP/py/item")" "the rule names the interpreter and its script"
expect_eq "scripted" "$($PY "$W/allowed.py" "$MP/py/item" 2>&1)" "python running the allowed script reads"
refused_to "the same interpreter running another script" $PY "$W/other.py" "$MP/py/item"
refused_to "python -c" $PY -c "import sys; print(open(sys.argv[1]).read())" "$MP/py/item"

echo "== a process that execs is identified again: same pid, same interpreter, another image"
cat >"$W/reexec.py" <<'EOF'
import os, sys
item = sys.argv[1]
if len(sys.argv) == 2:
    print("again:" + open(item).read(), flush=True)
    sys.exit(0)
print("first:" + open(item).read(), flush=True)
if sys.argv[2] == "other":
    os.execv(sys.executable, [sys.executable, os.path.join(os.path.dirname(sys.argv[0]), "other.py"), item])
os.execve(sys.executable, [sys.executable, sys.argv[0], item], dict(os.environ, LD_LIBRARY_PATH="/nonexistent"))
EOF
printf 'scripted' | kc add-generic-password -s py -a re -T "$PY $W/reexec.py" >/dev/null
expect_eq "again:scripted" "$($PY "$W/reexec.py" "$MP/py/re" 2>&1)" "the exec'd stage, run alone with no loader variable, reads"
got=$($PY "$W/reexec.py" "$MP/py/re" other 2>&1)
expect_contains "$got" "first:scripted" "the allowed script reads before it execs"
expect_contains "$got" "PermissionError" "the other script it execs (same pid, same python) is refused"
expect_eq 1 "$(printf '%s\n' "$got" | grep -c scripted)" "the other script read nothing"
got=$($PY "$W/reexec.py" "$MP/py/re" loader 2>&1)
expect_contains "$got" "first:scripted" "the allowed script reads before it execs itself"
expect_contains "$got" "PermissionError" "itself again with LD_LIBRARY_PATH (same pid, same python, same script) is refused"
expect_not_contains "$got" "again:scripted" "and read nothing"

printf '\n# changed\n' >>"$W/allowed.py"
refused_to "the allowed script once edited" $PY "$W/allowed.py" "$MP/py/item"

echo "== a known process is checked again at every open: a tracer attached since, its binary replaced"
# opener ITEM [MAPPED [vfork]]: one process that opens ITEM at each line on its input and
# prints what it read: identified at its first open, then found in the daemon's per-process
# cache, whose check must still see what changed. With MAPPED it first maps that file (and
# prints the address); with vfork the opens are made by a vfork child.
cat >"$W/opener.c" <<'CEOF'
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char line[64], buf[256];
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3) {
        int m = open(argv[2], O_RDONLY);
        void *p = m < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ, MAP_SHARED, m, 0);
        if (p == MAP_FAILED) { printf("map:%s\n", strerror(errno)); return 1; }
        printf("%lu\n", (unsigned long) p);
    }
    /* A vfork child shares its parent's address space. */
    if (argc == 4 && vfork() != 0) _exit(0);
    while (fgets(line, sizeof line, stdin)) {
        int fd = open(argv[1], O_RDONLY);
        ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
        if (n < 0) { printf("err:%s\n", strerror(errno)); if (fd >= 0) close(fd); continue; }
        close(fd);
        buf[n] = 0;
        printf("ok:%s\n", buf);
    }
    if (argc == 4) _exit(0);
    return 0;
}
CEOF
gcc -O2 -o "$W/rereader" "$W/opener.c" || fail "compile opener.c"
printf 'again' | kc add-generic-password -s re -a item -T "$W/rereader" >/dev/null
mkfifo "$W/re.in" "$W/re.out"
"$W/rereader" "$MP/re/item" <"$W/re.in" >"$W/re.out" 2>/dev/null &
RP=$!
on_exit_kill "$RP"
exec 7>"$W/re.in" 8<"$W/re.out"
# ask: one more open by the same process; prints its answer.
ask() { echo >&7; IFS= read -r line <&8; printf '%s' "$line"; }
tracer_of() { awk '/^TracerPid:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
wait_tracer() {
    i=0
    while [ "$(tracer_of "$1")" != "$2" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
}
expect_eq "ok:again" "$(ask)" "a long-running allowed process reads"
expect_eq "ok:again" "$(ask)" "and again, known to the daemon by now"
strace -o /dev/null -p "$RP" 2>/dev/null &
TP=$!
on_exit_kill "$TP"
wait_tracer "$RP" "$TP"
expect_eq "$TP" "$(tracer_of "$RP")" "strace -p has attached to it"
# A known process is checked in full once per 10 ms (CachedProcess.recheckInterval).
sleep 0.02
expect_eq "err:Permission denied" "$(ask)" "a tracer attached after its first reads: its next open is refused"
kill "$TP"
wait "$TP" 2>/dev/null
wait_tracer "$RP" 0
expect_eq "ok:again" "$(ask)" "once the tracer has gone it reads again"
cp "$W/rereader" "$W/rereader.new" && mv "$W/rereader.new" "$W/rereader"
sleep 0.02
expect_eq "err:Permission denied" "$(ask)" "its binary replaced since (by the same bytes, another file): its next open is refused"
exec 7>&- 8<&-
wait "$RP" 2>/dev/null
expect_eq "err:Permission denied" "$(echo | "$W/rereader" "$MP/re/item" 2>&1)" "a new process of the replacing file too, until it is allowed again"

echo "== a known caller's memory map held locked by others, or its executable on a slow file system, does not stall the mount"
# Another process may hold the lock of a caller's memory map across a slow fault: reading
# /proc/PID/mem at an address mapped from a slow file system holds it (read) until the page
# comes in. A third waiting to write it (clear_refs) makes every new reader wait. The exec
# witness of a known caller reads its memory under that lock: were the FUSE lead kept across
# that read, nothing would read the mount's requests until the slow page came, even for a
# single-threaded caller, which cannot itself hold the lock. The caller's own open waits (as
# would any fault of its own), nothing else does.
gcc -O2 -o "$W/mapper" "$W/opener.c" || fail "compile opener.c as mapper"
printf 'mapped' | kc add-generic-password -s map -a item -T "$W/mapper" >/dev/null
start_slow_fuse "$W/mapper"
mkfifo "$W/map.in" "$W/map.out"
# start_mapper PROGRAM ARGS...: an opener with a slow file mapped, on descriptors 7 and 8
# (as ask expects); sets MAPPER and MAPPED (its pid and the mapping's address).
start_mapper() {
    "$@" <"$W/map.in" >"$W/map.out" 2>/dev/null &
    MAPPER=$!
    on_exit_kill "$MAPPER"
    exec 7>"$W/map.in" 8<"$W/map.out"
    IFS= read -r MAPPED <&8
}
start_mapper "$W/mapper" "$MP/map/item" "$W/slow/f"
expect_eq "ok:mapped" "$(ask)" "a single-threaded allowed process with a slow file mapped reads"
expect_eq "ok:mapped" "$(ask)" "and again, known to the daemon by now"
$PY -c 'import os, sys; os.pread(os.open(sys.argv[1], os.O_RDONLY), 1, int(sys.argv[2]))' "/proc/$MAPPER/mem" "$MAPPED" &
HOLDER=$!
on_exit_kill "$HOLDER"
sleep 0.3
sh -c "echo 5 >/proc/$MAPPER/clear_refs" &
WRITER=$!
on_exit_kill "$WRITER"
sleep 0.3
echo >&7
sleep 0.3
expect_eq "open-secret" "$(timeout 5 cat "$MP/svc/open" 2>&1)" "its next open waits on its locked memory map; another program's read is answered meanwhile"
touch "$W/slow.release"
got=$(timeout 5 sh -c 'IFS= read -r line; printf "%s" "$line"' <&8)
expect_eq "ok:mapped" "$got" "once the slow page came in, its open is answered"
wait "$HOLDER" "$WRITER"
exec 7>&- 8<&-
wait "$MAPPER" 2>/dev/null
# The same program run from the slow file system, whose attributes are held back: the check
# of a known caller's executable (an fstat) waits on that file system, nothing else does.
printf 'mapped' | kc add-generic-password -s map -a slow -T "$W/slow/exe" >/dev/null
# A vfork child's exec witness is its layout, which reads no memory.
start_mapper "$W/slow/exe" "$MP/map/slow" "$W/slow/f" vfork
expect_eq "ok:mapped" "$(ask)" "an allowed program run from a slow file system reads (in a vfork child)"
expect_eq "ok:mapped" "$(ask)" "and again, known to the daemon by now"
touch "$W/slow.hold"
sleep 0.3
echo >&7
sleep 0.3
expect_eq "open-secret" "$(timeout 5 cat "$MP/svc/open" 2>&1)" "its next open waits on that file system; another program's read is answered meanwhile"
rm -f "$W/slow.hold"
got=$(timeout 5 sh -c 'IFS= read -r line; printf "%s" "$line"' <&8)
expect_eq "ok:mapped" "$got" "once that file system answers, its open is answered"
exec 7>&- 8<&-
wait "$MAPPER" 2>/dev/null
umount "$W/slow" 2>/dev/null

echo "== the list survives remount and passwd"
expect_exit 0 "unmount" kc unmount "$MP"
NEWPASS="$TEST_ROOT/newpass"
printf 'another passphrase 7\n' >"$NEWPASS"
expect_exit 0 "passwd" kc passwd --passphrase-file "$PASSFILE" --new-passphrase-file "$NEWPASS" --scrypt-log-n 10
cp "$NEWPASS" "$PASSFILE"
mount_kc "$MP" || fail "remount" "$(cat "$ERR")"
expect_eq "/usr/bin/head" "$(list_of "$ITEM")" "the list after remount and passwd"
mkdir -p "$MP/emptydir"
expect_eq "/usr/bin/head" "$(list_of "$MP/emptydir")" "an empty directory's default outlives remount and passwd"
printf 'later' | kc add-generic-password -s emptydir -a later >/dev/null
expect_eq "/usr/bin/head" "$(list_of "$MP/emptydir/later")" "and a new item there takes it"
expect_eq "hunter2" "$(head -c 100 "$ITEM")" "head still reads"
refused_to "cat after remount" cat "$ITEM"

echo "== export and import carry the list; export is itself guarded"
BACKUP="$TEST_ROOT/backup.kcfs"
expect_exit 77 "export by a CLI not on the list: exit 77" kc export "$BACKUP" --backup-passphrase-file "$PASSFILE" --scrypt-log-n 10
expect_exit 0 "dump-keychain --json shows the list" kc dump-keychain --json
expect_contains "$OUT" '"access"' "the JSON dump names the list"
expect_contains "$OUT" '/usr/bin/head' "the JSON dump lists head"
# A store whose item lists the CLI too: with no daemon the CLI is the caller, and may export it.
STORE2="$TEST_ROOT/second.db"
STORE3="$TEST_ROOT/third.db"
kc init --store "$STORE2" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
kc init --store "$STORE3" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
printf 'exported' | kc add-generic-password --store "$STORE2" --passphrase-file "$PASSFILE" -s ex -a item -T /usr/bin/head -T "$FULL" >/dev/null
expect_exit 0 "export by a listed CLI" kc export "$BACKUP" --store "$STORE2" --passphrase-file "$PASSFILE" --backup-passphrase-file "$PASSFILE" --scrypt-log-n 10
printf 'exported' | kc add-generic-password --store "$STORE3" --passphrase-file "$PASSFILE" -s other -a item -T /usr/bin/head >/dev/null
expect_exit 77 "export by the CLI not on a list (no daemon): exit 77" kc export "$TEST_ROOT/b3" --store "$STORE3" --passphrase-file "$PASSFILE" --backup-passphrase-file "$PASSFILE" --scrypt-log-n 10
expect_contains "$ERR" "Access denied: /other/item: " "the refusal names the item refused"
[ -e "$TEST_ROOT/b3" ] && fail "a refused export leaves no file" || pass "a refused export leaves no file"
STORE4="$TEST_ROOT/fourth.db"
kc init --store "$STORE4" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
printf 'net-secret' | kc add-internet-password --store "$STORE4" --passphrase-file "$PASSFILE" -s net.example.org -a nina -p api/v1 -T /usr/bin/head >/dev/null
expect_exit 77 "dump-keychain -d of an internet item not listing the CLI: exit 77" kc dump-keychain -d --store "$STORE4" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "Access denied: /internet/net.example.org/443/api/v1/nina: " "the refusal names the internet item by its path"
expect_not_contains "$ERR" "net-secret" "and shows no secret"
expect_not_contains "$OUT" "net-secret" "nor on stdout"
expect_exit 0 "import into another store" kc import "$BACKUP" --store "$STORE3" --passphrase-file "$PASSFILE" --backup-passphrase-file "$PASSFILE"
MP3="$TEST_ROOT/mnt3"
mkdir -p "$MP3"
mount_kc "$MP3" --store "$STORE3" || fail "mount the imported store" "$(cat "$ERR")"
expect_eq "/usr/bin/head
$FULL" "$(list_of "$MP3/ex/item")" "the imported item keeps its list"
expect_eq "exported" "$(head -c 100 "$MP3/ex/item")" "head reads the imported item"
refused_to "cat of the imported item" cat "$MP3/ex/item"
kc unmount "$MP3" >/dev/null 2>&1

echo "== a tampered list fails the item"
expect_exit 0 "unmount to tamper" kc unmount "$MP"
S="$KEYCHAINFS_STORE"
# The attacker drops the list by giving the guarded item the sealed attributes of its
# unguarded neighbour (svc/open, added second), in place.
sqlite3 "$S" "UPDATE items SET attributes = (SELECT attributes FROM items ORDER BY id LIMIT 1 OFFSET 1) WHERE id = (SELECT id FROM items ORDER BY id LIMIT 1)"
mount_kc "$MP" || fail "mount after tampering" "$(cat "$ERR")"
got=$(head -c 100 "$ITEM" 2>&1; cat "$ITEM" 2>&1)
expect_not_contains "$got" "hunter2" "the tampered item gives its secret to no one"
expect_exit 93 "verify names the tampered item (93)" kc verify
kc unmount "$MP" >/dev/null 2>&1
# Two directories' defaults swapped: each is bound to its own name, so neither opens, and no
# item is made there with another list than the one set.
sqlite3 "$S" "CREATE TEMP TABLE d AS SELECT * FROM directory_access; UPDATE directory_access SET sealed = (SELECT sealed FROM d WHERE d.group_blind <> directory_access.group_blind LIMIT 1)"
mount_kc "$MP" || fail "mount after tampering with the defaults" "$(cat "$ERR")"
expect_exit 1 "getfattr of a tampered default fails" getfattr -n $ACCESS "$MP/dsvc"
printf 'x' | kc add-generic-password -s dsvc -a tampered >/dev/null 2>&1
expect_exit 44 "no item was made under a tampered default" kc find-generic-password -s dsvc -a tampered

echo "== prompts, through a scripted pinentry"
kc unmount "$MP" >/dev/null 2>&1
# A fresh store: the tampered one stays tampered.
rm -f "$KEYCHAINFS_STORE"* && init_store
ANSWER="$W/answer"
PROMPTS="$W/prompts"
cp "$TESTS_DIR/access_pinentry.sh" "$W/pinentry"
chmod 755 "$W/pinentry"
mkdir -p "$XDG_CONFIG_HOME/keychainfs"
printf '[access]\npinentry = "%s"\nprompt-timeout = 2\n' "$W/pinentry" >"$XDG_CONFIG_HOME/keychainfs/config.toml"
mount_kc "$MP" || { fail "mount with a pinentry" "$(cat "$ERR")"; finish; }
printf 'hunter2' | kc add-generic-password -s svc -a acct -T /usr/bin/head >/dev/null
printf 'open-secret' | kc add-generic-password -s svc -a open >/dev/null
prompts() { grep -c '^prompt' "$PROMPTS" 2>/dev/null || echo 0; }

echo ok >"$ANSWER"
before=$(prompts)
expect_eq "hunter2|hunter2" "$($PY -c "import sys; a = open(sys.argv[1]).read(); b = open(sys.argv[1]).read(); print(a + '|' + b)" "$ITEM" 2>&1)" \
    "Allow once: python reads (and reads again in the same process)"
expect_eq "$((before + 1))" "$(prompts)" "one prompt for two opens by one process"
expect_contains "$PROMPTS" "python" "the prompt names the program"
expect_contains "$PROMPTS" "/svc/acct" "the prompt names the item"
expect_eq "/usr/bin/head" "$(list_of "$ITEM")" "Allow once does not change the list"
expect_eq "hunter2" "$($PY -c "import sys; print(open(sys.argv[1]).read())" "$ITEM" 2>&1)" "another python process is asked again (and allowed)"
expect_eq "$((before + 2))" "$(prompts)" "a new process, a new prompt"

echo cancel >"$ANSWER"
refused_to "Deny" cat "$ITEM"

echo hang >"$ANSWER"
start=$(date +%s)
refused_to "no answer within prompt-timeout (2 s)" cat "$ITEM"
took=$(($(date +%s) - start))
if [ "$took" -le 5 ]; then pass "the timeout answered in ${took} s"; else fail "the timeout answered in ${took} s"; fi

echo "-- a waiting prompt stalls no one else"
( cat "$ITEM" >"$W/waiting.out" 2>&1; echo "EXIT $?" >>"$W/waiting.out" ) &
WAITER=$!
sleep 0.3
start=$(date +%s%N)
other=$(head -c 100 "$ITEM"; cat "$MP/svc/open"; kc find-generic-password -s svc -a open -w)
listing=$(ls -l "$MP/svc" 2>&1; getfattr -n security.selinux "$ITEM" 2>&1)
took=$((($(date +%s%N) - start) / 1000000))
expect_eq "hunter2open-secretopen-secret" "$other" "head, cat and the CLI read while a prompt waits"
expect_contains "$listing" "acct" "ls -l lists the directory while a prompt waits"
expect_contains "$listing" "No such attribute" "getfattr of security.selinux answers while a prompt waits"
if [ "$took" -lt 1500 ]; then pass "they took ${took} ms (the prompt waits 2 s)"; else fail "they waited for the prompt: ${took} ms"; fi
wait $WAITER
expect_contains "$W/waiting.out" "Permission denied" "the waiting reader was refused at the timeout"

echo "-- twelve prompts at once stall no one else (the FUSE loop has 10 workers)"
WAITERS=""
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
    ( cat "$ITEM" >"$W/many.$i" 2>&1; echo "EXIT $?" >>"$W/many.$i" ) &
    WAITERS="$WAITERS $!"
done
sleep 0.5
start=$(date +%s%N)
other=$(timeout 10 cat "$MP/svc/open"; timeout 10 ls "$MP/svc" | tr '\n' ' ')
took=$((($(date +%s%N) - start) / 1000000))
expect_eq "open-secretacct open " "$other" "cat and ls answer while twelve prompts are asked for"
# Stalled, they answer when the first prompts time out, 1.5 s from here.
if [ "$took" -lt 800 ]; then pass "they took ${took} ms (the prompts wait 2 s)"; else fail "they waited for the prompts: ${took} ms"; fi
for pid in $WAITERS; do wait "$pid"; done
refused=$(grep -l "Permission denied" "$W"/many.* | wc -l)
expect_eq 12 "$refused" "every one of the twelve readers was refused"
expect_contains "$(kc access log)" "callers already wait for another prompt" "the log says why the ones beyond the queue were refused at once"

echo notok >"$ANSWER"
expect_eq "hunter2" "$(cat "$ITEM" 2>&1)" "Always allow: cat reads"
expect_eq "/usr/bin/head
/usr/bin/cat" "$(list_of "$ITEM")" "Always allow added cat to the list"
echo cancel >"$ANSWER"
before=$(prompts)
expect_eq "hunter2" "$(cat "$ITEM" 2>&1)" "cat reads again without a prompt"
expect_eq "$before" "$(prompts)" "no prompt for a listed program"

echo "-- ls -l of a guarded item: its attributes, and those ls asks for that no item has"
echo cancel >"$ANSWER"
before=$(prompts)
expect_contains "$(getfattr -n security.selinux "$ITEM" 2>&1)" "No such attribute" \
    "getfattr (not on the list) of security.selinux on the guarded item: No such attribute"
expect_contains "$(getfattr -n system.posix_acl_access "$ITEM" 2>&1)" "No such attribute" "nor system.posix_acl_access"
expect_contains "$(getfattr -n trusted.x "$ITEM" 2>&1)" "No such attribute" "nor trusted.*"
expect_contains "$(getfattr -n user.other "$ITEM" 2>&1)" "No such attribute" "nor a user.* name outside user.keychain.*"
expect_contains "$(ls -l "$MP/svc" 2>&1)" "-rw------- 1 $(id -un)" "ls -l shows the guarded item's attributes"
expect_eq "/usr/bin/head
/usr/bin/cat" "$(list_of "$ITEM")" "the list still reads"
expect_eq "$before" "$(prompts)" "none of these asks the user"

echo "-- a replaced binary, allowed again through the prompt"
cp /usr/bin/head "$W/myhead2"
echo ok >"$ANSWER"
expect_exit 0 "setfattr puts myhead2 on the list (cat and head, listed, are kept)" \
    setfattr -n $ACCESS -v "/usr/bin/head
/usr/bin/cat
$W/myhead2" "$ITEM"
expect_eq "hunter2" "$("$W/myhead2" -c 100 "$ITEM" 2>&1)" "myhead2 reads"
cp /usr/bin/tail "$W/myhead2"
echo cancel >"$ANSWER"
refused_to "myhead2 once replaced" "$W/myhead2" -c 100 "$ITEM"
echo notok >"$ANSWER"
expect_eq "hunter2" "$("$W/myhead2" -c 100 "$ITEM" 2>&1)" "Always allow pins the new myhead2"
echo cancel >"$ANSWER"
expect_eq "hunter2" "$("$W/myhead2" -c 100 "$ITEM" 2>&1)" "and it reads without a prompt after"

echo "== the access log"
expect_exit 0 "keychainfs access log" kc access log
for what in "refused /usr/bin/cat" "allowed-once" "always-allowed" "denied" "timed-out" "to allow: keychainfs access set-generic -s svc -a acct -T /usr/bin/head"; do
    expect_contains "$OUT" "$what" "the log shows: $what"
done
expect_exit 0 "keychainfs access log --json" kc access log --json
first=$(head -n 1 "$OUT")
expect_contains "$first" '"decision"' "JSON lines with the decision"
$PY -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$OUT" && pass "every line is JSON" || fail "every line is JSON"

echo "== the daemon ends with a prompt open: the prompt ends with it"
printf '[access]\npinentry = "%s"\nprompt-timeout = 20\n' "$W/pinentry" >"$XDG_CONFIG_HOME/keychainfs/config.toml"
kc unmount "$MP" >/dev/null 2>&1
cp /bin/cat "$W/endingcat"   # on no list, so it is asked about
mount_kc "$MP" || fail "mount with a 20 s prompt" "$(cat "$ERR")"
DPID=$(daemon_pid "$MP")
echo hang >"$ANSWER"
( "$W/endingcat" "$ITEM" >"$W/ending.out" 2>&1; echo "EXIT $?" >>"$W/ending.out" ) &
CATTER=$!
sleep 1
# The waiting reader holds the file: unmount is refused as busy, and nothing else changes.
if kc unmount "$MP" >"$OUT" 2>&1; then fail "unmount while a reader waits for a prompt is refused"
else expect_contains "$(cat "$OUT")" "busy" "unmount while a reader waits for a prompt: refused as busy"; fi
start=$(date +%s%N)
kill -TERM "$DPID"
i=0
while { ! ended "$DPID" || mountpoint -q "$MP"; } && [ $i -lt 300 ]; do sleep 0.01; i=$((i + 1)); done
took=$((($(date +%s%N) - start) / 1000000))
if [ "$took" -lt 500 ] && ! mountpoint -q "$MP"; then pass "a stop signal with a prompt open: the daemon ended and unmounted in ${took} ms (prompt-timeout 20 s)"
else fail "a stop signal with a prompt open: the daemon ended and unmounted within 500 ms" "after ${took} ms: $(ended "$DPID" && echo ended || echo running), $(mountpoint -q "$MP" && echo mounted || echo unmounted)"; fi
wait "$CATTER"
expect_contains "$W/ending.out" "Permission denied" "the waiting reader is refused"
expect_contains "$(kc access log)" "the mount is ending" "the access log says why"
if mountpoint -q "$MP"; then fusermount3 -u "$MP" 2>/dev/null; fi
echo cancel >"$ANSWER"

echo "== a real pinentry-tty, on the caller's terminal, driven through tmux"
kc unmount "$MP" >/dev/null 2>&1
# scripts/install-deps installs both: missing, this part fails rather than passing unseen.
have_real_pinentry=yes
for need in /usr/bin/tmux /usr/bin/pinentry-tty; do
    [ -x "$need" ] || { fail "$need is installed (scripts/install-deps)"; have_real_pinentry=no; }
done
if [ "$have_real_pinentry" = yes ]; then
    printf '[access]\npinentry = "/usr/bin/pinentry-tty"\nprompt-timeout = 20\n' >"$XDG_CONFIG_HOME/keychainfs/config.toml"
    mount_kc "$MP" || fail "mount with pinentry-tty" "$(cat "$ERR")"
    TMUX_SOCKET="kcfs-access-$$"
    tm() { tmux -L "$TMUX_SOCKET" "$@"; }
    on_exit "tmux -L '$TMUX_SOCKET' kill-server"
    # pane_reads KEY NAME: a python in a fresh pane opens the item; pinentry-tty asks on that
    # pane's terminal; KEY answers (o: Allow once, d: Deny).
    pane_reads() {
        rm -f "$W/tty.out"
        pane=$3
        tm new-session -d -s "$pane" -x 200 -y 60 "$PY -c \"import sys; print(open(sys.argv[1]).read())\" '$ITEM' >'$W/tty.out' 2>&1; echo EXIT \$? >>'$W/tty.out'; sleep 600"
        i=0
        while ! tm capture-pane -p -t "$pane" 2>/dev/null | grep -q "\\[oda\\]?" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
        screen=$(tm capture-pane -p -t "$pane" 2>/dev/null)
        expect_contains "$screen" "/svc/acct" "$2: the prompt on the caller's terminal names the item"
        tm send-keys -t "$pane" "$1"
        i=0
        while ! grep -q EXIT "$W/tty.out" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    }
    pane_reads o "Allow once" p1
    expect_contains "$W/tty.out" "hunter2" "pinentry-tty, Allow once: python reads"
    pane_reads d "Deny" p2
    expect_contains "$W/tty.out" "PermissionError" "pinentry-tty, Deny: python is refused"
    tm kill-server 2>/dev/null
    kc unmount "$MP" >/dev/null 2>&1
fi

echo "== as a normal user, in a private mount namespace with a 0666 /dev/fuse"
prepare_user_store kcfsaccess1
# Started with a low soft open-file limit: the daemon raises it to the hard one (it keeps
# descriptors for each identified caller).
expect_exit 0 "the user mounts it" as_user sh -c "ulimit -Sn 256 && exec '$BIN' mount '$UMP' --passphrase-file '$USERS_ROOT/pass'"
UPID=$(as_user "$BIN" status --json 2>/dev/null | $PY -c 'import json, sys; print(json.load(sys.stdin).get("daemon", {}).get("pid", ""))')
[ -n "$UPID" ] && on_exit_kill "$UPID"
HARD=$(as_user sh -c 'ulimit -Hn')
expect_eq "$HARD $HARD" "$(awk '/^Max open files/ { print $4, $5 }' "/proc/$UPID/limits" 2>&1)" "the daemon raised its open-file soft limit (started at 256) to the hard limit"
expect_exit 0 "the user adds an item listing head" as_user sh -c "printf user-secret | '$BIN' add-generic-password -s svc -a acct -T /usr/bin/head"
expect_eq "user-secret" "$(as_user head -c 100 "$UMP/svc/acct" 2>&1)" "as the user, head reads"
expect_exit 1 "as the user, cat is refused" as_user cat "$UMP/svc/acct"
expect_contains "$ERR" "Permission denied" "with EACCES"
expect_exit 1 "as the user, python open() is refused" as_user $PY -c "open('$UMP/svc/acct').read()"
as_user cp /usr/bin/head "$UH/myhead"
expect_exit 1 "as the user, a copy of head is refused" as_user "$UH/myhead" -c 100 "$UMP/svc/acct"
expect_exit 1 "as the user, head under strace is refused" as_user strace -o /dev/null head -c 100 "$UMP/svc/acct"
expect_exit 77 "as the user, find -w is refused (77)" as_user "$BIN" find-generic-password -s svc -a acct -w
expect_exit 0 "the user's own binary on a list" as_user sh -c "printf mine | '$BIN' add-generic-password -s own -a item -T '$UH/myhead'"
expect_eq "mine" "$(as_user "$UH/myhead" -c 10 "$UMP/own/item" 2>&1)" "as the user, the allowed own binary reads"
as_user cp /usr/bin/tail "$UH/myhead"
expect_exit 1 "as the user, the replaced binary is refused" as_user "$UH/myhead" -c 10 "$UMP/own/item"
echo "== as the user, a process in a user namespace of its own is not the program it names"
# forge_exe unshares a user namespace, where it may repoint its own /proc/PID/exe
# (PR_SET_MM_MAP's exe_fd) once its image is moved to anonymous memory: /proc then names
# /usr/bin/head, file and content. Rules name programs only of the daemon's user namespace.
FORGE="$USERS_ROOT/forge_exe"
if gcc -O2 -o "$FORGE" "$TESTS_DIR/forge_exe.c" 2>"$ERR"; then
    chmod 755 "$FORGE"
    got=$(as_user "$FORGE" /usr/bin/head "$UMP/svc/acct" 2>"$W/forge.err")
    rc=$?
    case "$rc:$got" in
        *user-secret*) fail "a process that names head as its executable from its own user namespace is refused" "it read the secret: $(cat "$W/forge.err")" ;;
        1:*) expect_contains "$W/forge.err" "Permission denied" "a process that names head as its executable from its own user namespace is refused (EACCES)" ;;
        *) fail "the forgery runs (unshare, mremap, PR_SET_MM_MAP)" "exit $rc: $(cat "$W/forge.err")" ;;
    esac
    expect_contains "$W/forge.err" "now names /usr/bin/head" "its /proc/PID/exe did name /usr/bin/head"
    # The route the rule does not close: a child sharing the process's memory does the same
    # from a namespace of its own, and the process stays in the daemon's. Shown, not hidden.
    got=$(as_user "$FORGE" --sharer /usr/bin/head "$UMP/svc/acct" 2>"$W/forge.err")
    case "$?:$got" in
        *user-secret*) skip "a process whose memory a child in another user namespace shares is refused" \
            "known gap, in the README (Only in the daemon's user namespace): it read the secret" ;;
        1:*) pass "a process whose memory a child in another user namespace shares is refused" ;;
        *) fail "forge_exe --sharer runs" "$(cat "$W/forge.err")" ;;
    esac
else
    fail "forge_exe.c builds" "$(cat "$ERR")"
fi
expect_exit 1 "as the user, head itself in a user namespace of its own is refused" as_user unshare --user --map-current-user head -c 100 "$UMP/svc/acct"
expect_contains "$ERR" "Permission denied" "with EACCES"
expect_exit 1 "as the user, head in a user namespace mapped to root is refused" as_user unshare --user --map-root-user head -c 100 "$UMP/svc/acct"
expect_eq "user-secret" "$(as_user head -c 100 "$UMP/svc/acct" 2>&1)" "head in the daemon's user namespace still reads"
expect_exit 0 "the user's access log" as_user "$BIN" access log
expect_contains "$OUT" "refused /usr/bin/cat" "the user's log shows cat refused"
expect_contains "$OUT" "another user namespace" "the user's log says why head in its own user namespace was refused"
as_user "$BIN" unmount "$UMP" >/dev/null 2>&1
echo "== as the user, with no daemon: the CLI is a program like any other, and known as one"
# It opens the store itself and hardens (non-dumpable, which makes its own /proc/PID/environ
# root's), so it identifies itself before: a listed CLI reads, exports; an unlisted one is refused.
FULL_U="$USERS_ROOT/keychainfs-full"
UP="--store $UH/cli.db --passphrase-file $USERS_ROOT/pass"
expect_exit 0 "the user makes a second store" as_user "$FULL_U" init --scrypt-log-n 10 $UP
expect_exit 0 "two items listing the CLI" as_user sh -c "printf cli-secret | '$FULL_U' add-generic-password -s cli -a item -T '$FULL_U' $UP && printf two | '$FULL_U' add-generic-password -s cli -a second -T '$FULL_U' $UP"
expect_eq "cli-secret" "$(as_user "$FULL_U" find-generic-password -s cli -a item -w $UP 2>&1)" "the listed CLI reads it with no daemon"
printf 'backup pass\n' >"$USERS_ROOT/bpass" && chown "$U:" "$USERS_ROOT/bpass"
expect_exit 0 "the listed CLI exports both with no daemon" as_user "$FULL_U" export "$UH/b.kcb" $UP --backup-passphrase-file "$USERS_ROOT/bpass"
expect_exit 0 "an item listing only head" as_user sh -c "printf head-only | '$FULL_U' add-generic-password -s cli -a headonly -T /usr/bin/head $UP"
expect_exit 77 "the CLI, not listed, is refused it with no daemon" as_user "$FULL_U" find-generic-password -s cli -a headonly -w $UP
finish
