#!/bin/sh
# Per-program access against denial of service: identifying a caller reads its /proc files,
# stats its executable and hashes it, and a caller can make each slow (its executable on a
# file system that does not answer, a file too large to hash in time). Only that caller may
# wait: the control socket goes on accepting and answering others, and the mount's workers
# go on serving other readers. Also: a process whose main thread has exited is refused, and
# the log says why.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

for tool in gcc pkg-config timeout truncate; do have "$tool" || finish; done
W="$TEST_ROOT/work"
mkdir -p "$W"
init_store
mount_kc "$MP" || { fail "mount" "$(cat "$ERR")"; finish; }
SOCK=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["socketPath"])' "$KEYCHAINFS_STORE.daemon")
printf 'open-secret' | kc add-generic-password -s open -a acct >/dev/null
printf 'hunter2' | kc add-generic-password -s svc -a acct -T /usr/bin/head >/dev/null
expect_eq "hunter2" "$(head -c 100 "$MP/svc/acct")" "head, on the list, reads the item"

cat >"$W/opener.c" <<'CEOF'
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
/* opener open|connect ITEM SOCKET GOFILE: once GOFILE exists, reads ITEM or connects to
 * SOCKET (and keeps the connection), prints what came of it, and waits to be killed; for
 * open, reads ITEM again once GOFILE.again exists. */
static void readit(const char *item) {
    char buf[256];
    int fd = open(item, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (n < 0) printf("refused:%s\n", strerror(errno)); else { buf[n] = 0; printf("read:%s\n", buf); }
    if (fd >= 0) close(fd);
}
int main(int argc, char **argv) {
    char again[4096];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (access(argv[4], F_OK) != 0) usleep(10000);
    if (!strcmp(argv[1], "open")) {
        readit(argv[2]);
        snprintf(again, sizeof again, "%s.again", argv[4]);
        while (access(again, F_OK) != 0) usleep(10000);
        readit(argv[2]);
    } else {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        strncpy(a.sun_path, argv[3], sizeof a.sun_path - 1);
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        printf("%s\n", connect(s, (struct sockaddr *)&a, sizeof a) == 0 ? "connected" : "failed");
    }
    pause();
    return 0;
}
CEOF
gcc -O2 -o "$W/opener" "$W/opener.c" || { fail "compile opener.c"; finish; }
start_slow_fuse "$W/opener" || finish

# start_openers N ACTION TAG: N openers ready to ACTION the guarded item (or connect) once
# $W/go.TAG exists (start_slow_clients), each writing to $W/client.TAG.I.
start_openers() { start_slow_clients "$1" "$3" "$2" "$MP/svc/acct" "$SOCK"; }

echo "== a client whose executable's attributes do not come: the control socket goes on"
start_openers 20 connect connect
touch "$W/slow.hold"
sleep 0.3
touch "$W/go.connect"
sleep 0.5
expect_contains "$(cat "$W"/client.connect.*)" "connected" "clients run from the slow file system connect (identifying them waits)"
expect_exit 0 "another client is answered meanwhile" timeout 5 "$KEYCHAINFS_BIN" find-generic-password -s open -a acct -w
expect_contains "$OUT" "open-secret" "it gets its secret"
answered_within 5 "the CLI, listed or not, is answered about a guarded item meanwhile" "$KEYCHAINFS_BIN" find-generic-password -s svc -a acct -w
rm -f "$W/slow.hold"
stop_slow_clients

echo "== readers whose executable's attributes do not come: the mount goes on"
start_openers 12 open open
touch "$W/slow.hold"
sleep 0.3
touch "$W/go.open"
sleep 0.5
answered_within 5 "cat of an item with no list is answered meanwhile" cat "$MP/open/acct"
expect_contains "$OUT" "open-secret" "cat reads it"
answered_within 5 "ls of the mount is answered meanwhile" ls "$MP"
answered_within 5 "head of the guarded item is answered meanwhile (at once, refused while callers wait)" head -c 100 "$MP/svc/acct"
expect_contains "$(kc access log)" "other callers are being identified or wait for their executables to be hashed" \
    "the log says why the callers beyond the bound were refused at once"
rm -f "$W/slow.hold"
sleep 0.5
expect_contains "$(cat "$W"/client.open.*)" "refused:Permission denied" "the slow readers, not listed, are refused once they are identified"
expect_eq "hunter2" "$(timeout 5 head -c 100 "$MP/svc/acct")" "head reads the item again once they have gone"
stop_slow_clients

echo "== readers known already, whose executable's attributes then do not come: the mount goes on"
# Identified at their first read (refused: not listed); their second looks at their
# executable's attributes again, an executable on FUSE being checked at every request.
start_openers 12 open known
touch "$W/go.known"
j=0
while [ "$(cat "$W"/client.known.* | grep -c refused:)" -lt 12 ] && [ $j -lt 100 ]; do sleep 0.1; j=$((j + 1)); done
touch "$W/slow.hold"
sleep 0.3
touch "$W/go.known.again"
sleep 0.5
answered_within 5 "cat of an item with no list is answered meanwhile" cat "$MP/open/acct"
expect_contains "$OUT" "open-secret" "cat reads it"
answered_within 5 "ls of the mount is answered meanwhile" ls "$MP"
rm -f "$W/slow.hold"
j=0
while [ "$(cat "$W"/client.known.* | grep -c refused:)" -lt 24 ] && [ $j -lt 100 ]; do sleep 0.1; j=$((j + 1)); done
expect_eq 24 "$(cat "$W"/client.known.* | grep -c refused:)" "each of their reads is refused"
stop_slow_clients

echo "== readers whose executable's bytes do not come: the mount goes on, they are refused in time"
# Another file as far as the digest cache knows (its size and ctime change), not hashed yet,
# whose pages past those the processes run from (kept cached) are read only by the hash.
truncate -s 64M "$W/opener"
sleep 0.2
start_openers 12 open hash
touch "$W/slow.readhold"
start=$(date +%s)
touch "$W/go.hash"
sleep 0.5
answered_within 5 "cat of an item with no list is answered while its hash waits" cat "$MP/open/acct"
expect_contains "$OUT" "open-secret" "cat reads it"
j=0
while [ "$(cat "$W"/client.hash.* | grep -c refused)" -lt 12 ] && [ $j -lt 100 ]; do sleep 0.1; j=$((j + 1)); done
took=$(($(date +%s) - start))
expect_eq 12 "$(cat "$W"/client.hash.* | grep -c refused:)" "every reader whose executable cannot be read is refused"
[ "$took" -le 6 ] && pass "within the hash's bound (${took} s)" || fail "within the hash's bound" "took $took s"
expect_contains "$(kc access log)" "could not be hashed within 3 s" "the log says the executable could not be hashed in time"
rm -f "$W/slow.readhold"
stop_slow_clients

echo "== an executable too large to hash is refused at once"
cp /usr/bin/head "$W/bighead"
truncate -s 8G "$W/bighead"
answered_within 3 "a sparse 8 GiB copy of head is answered at once" "$W/bighead" -c 100 "$MP/svc/acct"
expect_not_contains "$OUT" "hunter2" "and refused"
expect_contains "$(kc access log)" "too large to hash" "the log says why"

echo "== a program to pin whose file is huge, or does not answer: refused in time"
# -T and the access xattr pin a program by its file's digest. The slow file system's f answers
# no read until $W/slow.release exists (at exit).
expect_exit 65 "-T naming an 8 GiB file is refused" timeout 5 "$KEYCHAINFS_BIN" add-generic-password -s pin -a big -T "$W/bighead" -w x
expect_contains "$(cat "$ERR")" "is over 1073741824 bytes" "it says the file is too large"
start=$(date +%s)
timeout 10 "$KEYCHAINFS_BIN" add-generic-password -s pin -a slow -T "$W/slow/f" -w x >"$OUT" 2>"$ERR"
rc=$?
took=$(($(date +%s) - start))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && pass "-T naming a file that does not answer is refused (exit $rc)" || fail "-T naming a file that does not answer is refused" "exit $rc"
expect_contains "$(cat "$ERR")" "could not be read within 3 s" "it says why"
[ "$took" -le 6 ] && pass "within the bound (${took} s)" || fail "-T: within the bound" "took $took s"
expect_exit 44 "no item was made" "$KEYCHAINFS_BIN" find-generic-password -s pin -a slow
for i in 1 2 3; do
    timeout 10 setfattr -n user.keychain.access -v "$W/slow/f" "$MP/open/acct" 2>"$W/setfattr.$i" &
    SETTERS="${SETTERS:-} $!"
done
sleep 0.5
answered_within 5 "cat is answered while setfattr pins a file that does not answer" cat "$MP/open/acct"
expect_contains "$OUT" "open-secret" "cat reads it"
for p in $SETTERS; do wait "$p"; expect_eq 1 "$?" "setfattr naming it fails in time (not killed by timeout)"; done
expect_eq "" "$(getfattr --only-values -n user.keychain.access "$MP/open/acct" 2>/dev/null)" "the item's list is unchanged"

echo "== a process whose main thread has exited"
cat >"$W/zombie.c" <<'CEOF'
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
/* zombie ITEM: reads ITEM, then its main thread exits and another thread reads ITEM again. */
static const char *item;
static void readit(const char *who) {
    char buf[256];
    int fd = open(item, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    buf[n < 0 ? 0 : n] = 0;
    printf("%s:%s\n", who, n < 0 ? "refused" : buf);
    fflush(stdout);
    if (fd >= 0) close(fd);
}
static void *later(void *arg) {
    (void)arg;
    usleep(300000);
    readit("thread");
    _exit(0);
}
int main(int argc, char **argv) {
    pthread_t t;
    item = argv[1];
    readit("main");
    pthread_create(&t, NULL, later, NULL);
    pthread_exit(NULL);
}
CEOF
gcc -O2 -pthread -o "$W/zombie" "$W/zombie.c" || fail "compile zombie.c"
printf 'zsecret' | kc add-generic-password -s zomb -a acct -T "$W/zombie" >/dev/null
got=$(timeout 10 "$W/zombie" "$MP/zomb/acct")
expect_contains "$got" "main:zsecret" "the listed program reads the item"
expect_contains "$got" "thread:refused" "once its main thread has exited, it is refused"
expect_contains "$(kc access log)" "its main thread has exited" "the log says why"
finish
