#!/bin/sh
# Per-program access over the Secret Service against denial of service: the bus has one thread
# for every client, and identifying a caller reads its /proc files and stats its executable,
# which a client can make slow (its executable on a file system that does not answer). Such a
# client's call on a guarded item waits on a thread of its own: other clients are answered
# meanwhile, a property write (which sd-bus answers on the spot) is refused after a bounded
# wait, and the slow callers are refused once they are identified. test_access_dos.sh does the
# same for the mount and the control socket. Runs on a private session bus.
. "$(dirname "$0")/private_bus.sh"

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

for tool in gcc pkg-config timeout secret-tool; do have "$tool" || finish; done
W="$TEST_ROOT/work"
mkdir -p "$W"
mount_guarded_secret_service "$MP"
SEARCH=$(secret-tool search --all service svc username acct 2>&1)
# secret-tool prints the item's path within its collection: [/ID].
ITEM=/org/freedesktop/secrets/collection/login$(printf "%s\n" "$SEARCH" | sed -n 's/^\[\(\/[0-9]*\)\]$/\1/p' | head -n 1)
case "$ITEM" in */login/[0-9]*) pass "the guarded item's object path: $ITEM" ;; *) fail "the guarded item's object path" "$SEARCH"; finish ;; esac

cat >"$W/busopener.c" <<'CEOF'
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <systemd/sd-bus.h>
/* busopener delete|label ITEM GOFILE: once GOFILE exists, deletes the Secret Service item ITEM
 * or sets its Label, prints what came of it, and waits to be killed. */
int main(int argc, char **argv) {
    sd_bus *bus = NULL;
    sd_bus_error e = SD_BUS_ERROR_NULL;
    sd_bus_message *reply = NULL;
    int r;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 4 || sd_bus_open_user(&bus) < 0) { printf("failed: no bus\n"); return 1; }
    printf("ready\n");
    while (access(argv[3], F_OK) != 0) usleep(10000);
    if (!strcmp(argv[1], "delete"))
        r = sd_bus_call_method(bus, "org.freedesktop.secrets", argv[2], "org.freedesktop.Secret.Item", "Delete", &e, &reply, "");
    else
        r = sd_bus_set_property(bus, "org.freedesktop.secrets", argv[2], "org.freedesktop.Secret.Item", "Label", &e, "s", "changed");
    if (r < 0) printf("error:%s:%s\n", e.name ? e.name : "?", e.message ? e.message : strerror(-r));
    else printf("done\n");
    pause();
    return 0;
}
CEOF
gcc -O2 -o "$W/busopener" "$W/busopener.c" $(pkg-config --cflags --libs libsystemd) || { fail "compile busopener.c"; finish; }
start_slow_fuse "$W/busopener" || finish

echo "== clients whose executable's attributes do not come: the bus goes on"
start_slow_clients 1 label label "$ITEM"
LABELER=$SLOW_CLIENTS
start_slow_clients 3 del delete "$ITEM"
touch "$W/slow.hold"
sleep 0.3
touch "$W/go.del"
sleep 0.5
answered_within 5 "secret-tool reads an item with no list meanwhile" secret-tool lookup service svc username open
expect_eq "open-secret" "$(cat "$OUT")" "and gets its secret"
answered_within 5 "secret-tool is answered about the guarded item meanwhile" secret-tool lookup service svc username acct
expect_not_contains "$OUT" "hunter2" "and gets no secret"
expect_eq "" "$(cat "$W"/client.del.* | grep -v ready)" "the slow clients' Delete calls wait (for their identification)"

echo "== a property write by a slow client: refused after a bounded wait"
start=$(date +%s%N)
touch "$W/go.label"
j=0
while ! grep -q "error:\|done" "$W/client.label.0" 2>/dev/null && [ $j -lt 100 ]; do sleep 0.1; j=$((j + 1)); done
took=$((($(date +%s%N) - start) / 1000000))
expect_contains "$(cat "$W/client.label.0")" "error:org.freedesktop.DBus.Error.AccessDenied:the caller could not be identified within 2 s" "the Label write is refused, saying why"
if [ "$took" -lt 6000 ]; then pass "within the bounded wait (${took} ms)"; else fail "within the bounded wait" "took ${took} ms"; fi
answered_within 5 "secret-tool is answered right after it" secret-tool lookup service svc username open
expect_eq "open-secret" "$(cat "$OUT")" "and gets its secret"

echo "== the slow clients are refused once identified"
rm -f "$W/slow.hold"
j=0
while [ "$(cat "$W"/client.del.* | grep -c error:)" -lt 3 ] && [ $j -lt 100 ]; do sleep 0.1; j=$((j + 1)); done
expect_eq 3 "$(cat "$W"/client.del.* | grep -c 'error:org.freedesktop.DBus.Error.AccessDenied')" "each Delete is refused: AccessDenied"
expect_eq "hunter2" "$(timeout 5 head -c 100 "$MP/svc/acct")" "the guarded item is still there, unchanged"
expect_not_contains "$(secret-tool search --all service svc username acct 2>&1)" "label = changed" "its label is unchanged"
expect_exit 0 "the access log" kc access log
expect_contains "$OUT" "$W/slow/exe" "the log names the slow clients"
stop_slow_clients
finish
