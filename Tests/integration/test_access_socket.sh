#!/bin/sh
# Per-program access through the control socket: the caller is the process that sends the
# request, not merely the one that connected. A program not on an item's list connects, keeps
# the connection in a child, and then execs a listed program (which never asks for anything):
# were the connection's peer (SO_PEERPIDFD, SO_PEERCRED) the caller, the child's request would
# be answered as the listed program once the daemon identifies the peer after the exec. The
# daemon's identification of the connection is held back here (the client runs from a slow
# file system that holds back its executable's attributes) so that it does; on a busy machine
# it needs no help.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

for tool in gcc pkg-config; do have "$tool" || finish; done
PY=/usr/bin/python3
W="$TEST_ROOT/work"
mkdir -p "$W"
init_store
mount_kc "$MP" || { fail "mount" "$(cat "$ERR")"; finish; }
SOCK=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["socketPath"])' "$KEYCHAINFS_STORE.daemon")
# The control protocol's version, as the daemon's record gives it: frames written by hand carry it.
PROTO=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["protocol"])' "$KEYCHAINFS_STORE.daemon")
printf 'hunter2' | kc add-generic-password -s svc -a acct -T /usr/bin/head >/dev/null
expect_eq "hunter2" "$(head -c 100 "$MP/svc/acct")" "head, on the list, reads the item"

# The daemon identifies each connection on a thread of its own; an attacker can hold that
# back, as here: python run from a slow file system (its attributes held back while
# $W/slow.hold exists) makes identifying it wait until after it has exec'd head.
start_slow_fuse "$(realpath "$PY")" || finish

# handoff.py SOCKET WHO: connects, forks; the parent execs head (listed; it waits on a pipe
# that stays open, and reads nothing from the mount), the child prints the reply to a
# find-generic-password -w svc/acct on the connection. WHO "child": the child writes it once
# head runs and the daemon has said it identified the peer; "early": the parent writes it
# before it execs head.
cat >"$W/handoff.py" <<'PYEOF'
import os, socket, struct, sys, time
import exec_head
def field(tag, value): return struct.pack(">HI", tag, len(value)) + value
def frame(kind, payload): return b"KCFS" + struct.pack(">HHI", PROTO_VERSION, kind, len(payload)) + payload
def read_exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk: return None
        data += chunk
    return data
print("ready", flush=True)
while not os.path.exists(sys.argv[3]): time.sleep(0.01)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
query = field(10, b"\x01") + field(12, b"acct") + field(13, b"svc")
request = frame(2, field(52, query) + field(57, b"\x01"))
if sys.argv[2] == "early":
    s.sendall(request)
w = exec_head.exec_head_in_parent()
out = []
if sys.argv[2] == "child":
    # As a client does: once the daemon has identified the connection's peer (head by now).
    header = read_exactly(s, 12)
    out.append("%#x" % struct.unpack(">4sHHI", header)[2])
    read_exactly(s, struct.unpack(">4sHHI", header)[3])
    s.sendall(request)
while True:
    header = read_exactly(s, 12)
    if header is None: break
    _, version, kind, n = struct.unpack(">4sHHI", header)
    payload = read_exactly(s, n) or b""
    out.append("%#x %s" % (kind, payload.decode("latin-1")))
print(" | ".join(out) if out else "closed", flush=True)
os.close(w)
PYEOF
sed -i "s/PROTO_VERSION/$PROTO/" "$W/handoff.py"

# handoff WHO: handoff.py WHO, run by python from the slow file system, connects once its
# attributes are held back (identifying it waits on them), and execs head; then let go.
# Sets $got to what the child printed.
handoff() {
    rm -f "$W/go"
    PYTHONHOME=/usr PYTHONPATH="$TESTS_DIR" "$W/slow/exe" "$W/handoff.py" "$SOCK" "$1" "$W/go" >"$W/handoff.out" 2>&1 &
    HP=$!
    on_exit_kill "$HP"
    i=0
    while ! grep -q ready "$W/handoff.out" && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
    touch "$W/slow.hold"
    sleep 0.3
    touch "$W/go"
    i=0
    while ! grep -q "exec'd" "$W/handoff.out" && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
    expect_contains "$W/handoff.out" "exec'd" "the connector has exec'd head, its child holds the connection"
    rm -f "$W/slow.hold"
    i=0
    while [ "$(wc -l <"$W/handoff.out")" -lt 3 ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
    got=$(sed 1d "$W/handoff.out")
    wait "$HP" 2>/dev/null
}
echo "== a connection handed to a child, its connector exec'ing a listed program"
handoff child
case "$got" in
    *hunter2*) fail "the child's request on the handed connection is refused" "it read the secret: $got" ;;
    *"0x80ff"*) pass "the child's request on the handed connection is refused" ;;
    *) fail "the child's request is answered with a refusal" "$got" ;;
esac
expect_contains "$got" "not the process that connected" "the refusal names why"
echo "== a request written by the connector before it exec'd a listed program"
# Clients send their request only once the daemon has identified them (the `identified`
# frame): one already waiting when it has was written by whatever the process ran before.
handoff early
case "$got" in
    *hunter2*) fail "the request written before the exec is refused" "it read the secret: $got" ;;
    *"0x80ff"*) pass "the request written before the exec is refused" ;;
    *) fail "the request written before the exec is answered with a refusal" "$got" ;;
esac
expect_contains "$got" "before the daemon identified" "the refusal names why"

echo "== a listed program that connects, then execs another that asks on the connection"
cat >"$W/connexec.c" <<'CEOF'
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
/* connexec SOCKET PROGRAM ARG...: connects, waits for the daemon's first frame (identified),
 * then execs PROGRAM with the connection on descriptor 3. */
int main(int argc, char **argv) {
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    unsigned char header[12];
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 1; }
    if (recv(s, header, sizeof header, MSG_WAITALL) != sizeof header) { perror("recv"); return 1; }
    if (dup2(s, 3) != 3) return 1;
    execv(argv[2], argv + 2);
    return 1;
}
CEOF
gcc -O2 -o "$W/connexec" "$W/connexec.c" || fail "compile connexec.c"
printf 'conn-secret' | kc add-generic-password -s cx -a acct -T "$W/connexec" >/dev/null
got=$("$W/connexec" "$SOCK" $PY -c '
import socket, struct, sys
def field(tag, value): return struct.pack(">HI", tag, len(value)) + value
s = socket.socket(fileno=3)
query = field(10, b"\x01") + field(12, b"acct") + field(13, b"cx")
payload = field(52, query) + field(57, b"\x01")
s.sendall(b"KCFS" + struct.pack(">HHI", '"$PROTO"', 2, len(payload)) + payload)
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk: break
    data += chunk
print("reply:" + data.decode("latin-1"))
' 2>&1)
case "$got" in
    *"reply:"*conn-secret*) fail "the program it execs is refused on the connection" "$got" ;;
    *"reply:"*) pass "the program it execs is refused on the connection" ;;
    *) fail "the program it execs asks on the connection" "$got" ;;
esac

echo "== the CLI itself, listed, still reads through the socket"
FULL="$(dirname "$KEYCHAINFS_BIN")/keychainfs-full"
printf 'cli-secret' | kc add-generic-password -s cli -a acct -T "$(realpath "$KEYCHAINFS_BIN")" -T "$(realpath "$FULL")" >/dev/null
expect_exit 0 "find-generic-password -w of an item listing the CLI" kc find-generic-password -s cli -a acct -w
expect_contains "$OUT" "cli-secret" "it prints the secret"
expect_exit 77 "and of one that does not: exit 77" kc find-generic-password -s svc -a acct -w
touch "$W/slow.release"

prepare_user_store kcfsaccess2
UW="$USERS_ROOT/work"
mkdir -m 755 "$UW"
expect_exit 0 "the user mounts it" as_user "$BIN" mount "$UMP" --passphrase-file "$USERS_ROOT/pass"
UPID=$(as_user "$BIN" status --json 2>/dev/null | $PY -c 'import json, sys; print(json.load(sys.stdin).get("daemon", {}).get("pid", ""))')
[ -n "$UPID" ] && on_exit_kill "$UPID"
USOCK=$($PY -c 'import json, glob, sys; print(json.load(open(glob.glob(sys.argv[1] + "/.local/share/keychainfs/*.daemon")[0]))["socketPath"])' "$UH")
echo "== a listed program that execs another, which hides itself (non-dumpable) and connects"
# A client that is no longer dumpable is known by the process identified before (the CLI
# hardens after its first connection), but only while that process runs the address space it
# was identified in: not once it has exec'd another program. A daemon of a normal user cannot
# read a non-dumpable process's executable (root's can), so this runs as one.
cat >"$W/readexec.c" <<'CEOF'
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
/* readexec ITEM PROGRAM ARG...: reads ITEM once (and prints it), then execs PROGRAM (same pid). */
int main(int argc, char **argv) {
    char buf[256];
    int fd = open(argv[1], O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    buf[n < 0 ? 0 : n] = 0;
    printf("read:%s\n", n < 0 ? "refused" : buf);
    fflush(stdout);
    execv(argv[2], argv + 2);
    return 1;
}
CEOF
cat >"$W/hardened.py" <<'PYEOF'
import ctypes, socket, struct, sys
def field(tag, value): return struct.pack(">HI", tag, len(value)) + value
def frame(kind, payload): return b"KCFS" + struct.pack(">HHI", PROTO_VERSION, kind, len(payload)) + payload
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: /proc/PID/exe and environ hidden from the daemon
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
query = field(10, b"\x01") + field(12, sys.argv[3].encode()) + field(13, sys.argv[2].encode())
s.sendall(frame(2, field(52, query) + field(57, b"\x01")))
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk: break
    data += chunk
print("reply:" + data.decode("latin-1"), flush=True)
PYEOF
sed -i "s/PROTO_VERSION/$PROTO/" "$W/hardened.py"
gcc -O2 -o "$UW/readexec" "$W/readexec.c" || fail "compile readexec.c"
cp "$W/hardened.py" "$UW/hardened.py"
chmod 755 "$UW/readexec" && chmod 644 "$UW/hardened.py"
expect_exit 0 "the user adds an item listing readexec" as_user sh -c "printf exec-secret | '$BIN' add-generic-password -s rx -a acct -T '$UW/readexec'"
got=$(as_user "$UW/readexec" "$UMP/rx/acct" $PY "$UW/hardened.py" "$USOCK" rx acct 2>&1)
expect_contains "$got" "read:exec-secret" "the listed program reads the item through the mount"
case "$got" in
    *"reply:"*exec-secret*) fail "the non-dumpable program it execs is refused through the socket" "$got" ;;
    *"reply:"*) pass "the non-dumpable program it execs is refused through the socket" ;;
    *) fail "the program it execs asks the socket" "$got" ;;
esac

echo "== as the user, a listed client that hardens and connects again is still known"
# The git helper connects, hardens (non-dumpable), then asks: known by its first connection.
cp "$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs" "$USERS_ROOT/git-credential-keychainfs"
chmod 755 "$USERS_ROOT/git-credential-keychainfs"
GH="$USERS_ROOT/git-credential-keychainfs"
printf 'protocol=https\nhost=example.com\nusername=u\npassword=git-secret\n\n' | as_user "$GH" store
expect_exit 0 "the item the helper stored is listed for the helper alone" \
    as_user setfattr -n user.keychain.access -v "$GH" "$UMP/internet/example.com/443/u"
got=$(printf 'protocol=https\nhost=example.com\nusername=u\n\n' | as_user "$GH" get 2>&1)
expect_contains "$got" "password=git-secret" "the listed helper, hardened after it connected, gets the password"
expect_exit 1 "as the user, cat is refused the item" as_user cat "$UMP/internet/example.com/443/u"
as_user "$BIN" unmount "$UMP" >/dev/null 2>&1
finish
