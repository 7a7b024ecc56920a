#!/bin/sh
# Per-program access through the control socket: the caller is the process that sends the
# request, not merely the one that connected. A program not on an item's list connects, keeps
# the connection in a child, and then execs a listed program (which never asks for anything):
# were the connection's peer (SO_PEERPIDFD, SO_PEERCRED) the caller, the child's request would
# be answered as the listed program once the daemon identifies the peer after the exec. The
# daemon's accept is held back here (another client whose executable's attributes a slow file
# system holds back) so that it does; on a busy machine it needs no help.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

for tool in gcc pkg-config; do have "$tool" || finish; done
PY=/usr/bin/python3
W="$TEST_ROOT/work"
mkdir -p "$W"
init_store
mount_kc "$MP" || { fail "mount" "$(cat "$ERR")"; finish; }
SOCK=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["socketPath"])' "$KEYCHAINFS_STORE.daemon")
printf 'hunter2' | kc add-generic-password -s svc -a acct -T /usr/bin/head >/dev/null
expect_eq "hunter2" "$(head -c 100 "$MP/svc/acct")" "head, on the list, reads the item"

cat >"$W/connector.c" <<'CEOF'
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
/* connector SOCKET: at each input line, connects to SOCKET (and keeps the connection). */
int main(int argc, char **argv) {
    char line[64];
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        printf("%s\n", connect(s, (struct sockaddr *)&a, sizeof a) == 0 ? "connected" : "failed");
    }
    return 0;
}
CEOF
gcc -O2 -o "$W/connector" "$W/connector.c" || fail "compile connector.c"
start_slow_fuse "$W/connector" || finish

# handoff.py SOCKET: connects, forks; the parent execs head (listed; it waits on a pipe that
# stays open, and reads nothing from the mount), the child sends find-generic-password -w
# svc/acct on the connection once head runs, and prints the reply.
cat >"$W/handoff.py" <<'PYEOF'
import os, socket, struct, sys, time
def field(tag, value): return struct.pack(">HI", tag, len(value)) + value
def frame(kind, payload): return b"KCFS" + struct.pack(">HHI", 7, kind, len(payload)) + payload
def read_exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk: return None
        data += chunk
    return data
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
r, w = os.pipe()
parent = os.getpid()
if os.fork() != 0:
    os.dup2(r, 0)
    os.execv("/usr/bin/head", ["head", "-c", "1"])
os.close(r)
for _ in range(500):
    if os.readlink("/proc/%d/exe" % parent) == "/usr/bin/head": break
    time.sleep(0.01)
print("exec'd", flush=True)
# Sent at once: the bytes wait in the socket until the daemon reads them.
query = field(10, b"\x01") + field(12, b"acct") + field(13, b"svc")
s.sendall(frame(2, field(52, query) + field(57, b"\x01")))
out = []
while True:
    header = read_exactly(s, 12)
    if header is None: break
    _, version, kind, n = struct.unpack(">4sHHI", header)
    payload = read_exactly(s, n) or b""
    out.append("%#x %s" % (kind, payload.decode("latin-1")))
print(" | ".join(out) if out else "closed", flush=True)
os.close(w)
PYEOF

echo "== a connection handed to a child, its connector exec'ing a listed program"
mkfifo "$W/dec.in" "$W/dec.out"
"$W/slow/exe" "$SOCK" <"$W/dec.in" >"$W/dec.out" 2>&1 &
DP=$!
on_exit_kill "$DP"
exec 7>"$W/dec.in" 8<"$W/dec.out"
# Its executable's attributes held back (cached 0.1 s): the daemon identifying it waits.
touch "$W/slow.hold"
sleep 0.3
echo >&7
IFS= read -r line <&8
expect_eq "connected" "$line" "a client run from the slow file system connects (the daemon's accept waits on it)"
$PY "$W/handoff.py" "$SOCK" >"$W/handoff.out" 2>&1 &
HP=$!
on_exit_kill "$HP"
i=0
while ! grep -q "exec'd" "$W/handoff.out" && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
expect_contains "$W/handoff.out" "exec'd" "the connector has exec'd head, its child holds the connection"
rm -f "$W/slow.hold"
i=0
while [ "$(wc -l <"$W/handoff.out")" -lt 2 ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
got=$(cat "$W/handoff.out")
case "$got" in
    *hunter2*) fail "the child's request on the handed connection is refused" "it read the secret: $got" ;;
    *"0x80ff"*) pass "the child's request on the handed connection is refused" ;;
    *) fail "the child's request is answered with a refusal" "$got" ;;
esac
expect_contains "$got" "not the process that connected" "the refusal names why"
exec 7>&- 8<&-
wait "$HP" 2>/dev/null

echo "== the CLI itself, listed, still reads through the socket"
FULL="$(dirname "$KEYCHAINFS_BIN")/keychainfs-full"
printf 'cli-secret' | kc add-generic-password -s cli -a acct -T "$(realpath "$KEYCHAINFS_BIN")" -T "$(realpath "$FULL")" >/dev/null
expect_exit 0 "find-generic-password -w of an item listing the CLI" kc find-generic-password -s cli -a acct -w
expect_contains "$OUT" "cli-secret" "it prints the secret"
expect_exit 77 "and of one that does not: exit 77" kc find-generic-password -s svc -a acct -w
touch "$W/slow.release"
finish
