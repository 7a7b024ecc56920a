#!/bin/sh
# Per-program access over the Secret Service (issue 17): an item whose access list names only
# /usr/bin/head gives its secret to no D-Bus client not on it (GetSecret, GetSecrets through
# secret-tool and python secretstorage), and is neither replaced, changed nor deleted by one.
# With no prompt configured they are refused at once and logged; with one, the user is asked
# (Allow once, Always allow, Deny) while the bus goes on serving other clients.
# Runs on a private session bus, as test_secret_service.sh does.
. "$(dirname "$0")/private_bus.sh"

. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
MNT="$TEST_ROOT/mnt"
mkdir -p "$MNT"
mount_guarded_secret_service "$MNT"
expect_eq "hunter2" "$(head -c 100 "$MNT/svc/acct")" "head reads the guarded item"

# The guarded item through secretstorage: GetSecret, SetSecret (with "set"), then Delete; each
# line of $OUT says what happened.
try_guarded_item() {
    $PY - "$@" >"$OUT" 2>&1 <<'PY'
import sys, secretstorage
bus = secretstorage.dbus_init()
c = secretstorage.get_default_collection(bus)
for item in c.search_items({"service": "svc", "username": "acct"}):
    try:
        print("secret:", item.get_secret())
    except Exception as e:
        print("refused:", type(e).__name__, e)
    if "set" in sys.argv[1:]:
        try:
            item.set_secret(b"overwritten")
            print("set")
        except Exception as e:
            print("set refused:", e)
    try:
        item.delete()
        print("deleted")
    except Exception as e:
        print("delete refused:", e)
PY
}
expect_eq "open-secret" "$(secret-tool lookup service svc username open 2>&1)" "secret-tool reads an item with no list"
got=$(secret-tool lookup service svc username acct 2>&1)
expect_not_contains "$got" "hunter2" "secret-tool lookup of the guarded item gets no secret"
secret-tool search --all --unlock service svc >"$OUT" 2>&1
expect_not_contains "$OUT" "hunter2" "secret-tool search --unlock (GetSecrets) leaves the guarded secret out"
expect_contains "$OUT" "open-secret" "and gives the open one"
try_guarded_item set
expect_contains "$OUT" "AccessDenied" "secretstorage GetSecret: org.freedesktop.DBus.Error.AccessDenied"
expect_not_contains "$OUT" "hunter2" "secretstorage gets no secret"
expect_contains "$OUT" "set refused" "SetSecret is refused"
expect_contains "$OUT" "delete refused" "Delete is refused"
printf 'replaced' | secret-tool store --label=x service svc username acct >/dev/null 2>&1
expect_eq "hunter2" "$(head -c 100 "$MNT/svc/acct")" "secret-tool store (CreateItem, replace) did not overwrite it"
expect_exit 0 "the access log" kc access log
expect_contains "$OUT" "secret-tool" "the log names secret-tool"
expect_contains "$OUT" "python" "and python"

echo "== Label and Attributes of a guarded item"
$PY - >"$OUT" 2>&1 <<'PY'
import secretstorage
bus = secretstorage.dbus_init()
c = secretstorage.get_default_collection(bus)
for item in c.search_items({"service": "svc", "username": "acct"}):
    for what, change in [("label", lambda: item.set_label("relabelled")),
                         ("attributes", lambda: item.set_attributes({"service": "svc", "username": "acct", "x": "y"}))]:
        try:
            change()
            print(what, "set")
        except Exception as e:
            print(what, "refused:", e)
PY
expect_contains "$OUT" "label refused: " "Label (SetProperty) is refused"
expect_contains "$OUT" "attributes refused: " "Attributes (SetProperty) is refused"
expect_contains "$OUT" "AccessDenied" "with AccessDenied"
expect_eq "" "$(getfattr --only-values -n user.keychain.label "$MNT/svc/acct" 2>/dev/null)" "the label is unchanged"

echo "== a service directory's default list, for an item created over D-Bus"
mkdir "$MNT/dbsvc"
expect_exit 0 "setfattr of the directory's default" setfattr -n user.keychain.access -v /usr/bin/head "$MNT/dbsvc"
printf 'made-over-dbus' | secret-tool store --label=made service dbsvc username u >"$OUT" 2>&1
expect_eq "/usr/bin/head" "$(getfattr --only-values -n user.keychain.access "$MNT/dbsvc/u")" "secret-tool store's new item takes the default"
expect_eq "made-over-dbus" "$(head -c 100 "$MNT/dbsvc/u")" "head reads it"
expect_not_contains "$(secret-tool lookup service dbsvc username u 2>&1)" "made-over-dbus" "secret-tool, not on it, gets no secret"

echo "== a bus connection handed to a child, its connector exec'ing a listed program"
# The bus vouches for the process that connected (SO_PEERCRED at connect), not for the one that
# writes a call: a program that connects, keeps the connection in a child and execs a listed
# program lends the child that program's identity. Nothing the bus tells its peers says who
# wrote a message, so the daemon cannot tell; the control socket can, and does
# (test_access_socket). Shown, not hidden: the README names it.
PYTHONPATH="$TESTS_DIR" $PY - >"$OUT" 2>&1 <<'PY'
import os, socket, types
import jeepney.io.blocking as blocking
from jeepney.bus import get_bus
import exec_head
connected = socket.socket(socket.AF_UNIX)
connected.connect(get_bus("SESSION"))
w = exec_head.exec_head_in_parent()
class Connected(socket.socket):
    def connect(self, address):
        pass
# jeepney authenticates and says Hello on the connection the parent made.
blocking.socket = types.SimpleNamespace(socket=lambda *a, **k: Connected(fileno=os.dup(connected.fileno())),
                                        timeout=socket.timeout, AF_UNIX=socket.AF_UNIX)
import secretstorage
c = secretstorage.get_default_collection(secretstorage.dbus_init())
for item in c.search_items({"service": "svc", "username": "acct"}):
    try:
        print("secret:", item.get_secret().decode())
    except Exception as e:
        print("refused:", type(e).__name__, e)
os.close(w)
PY
expect_contains "$OUT" "exec'd" "the connector has exec'd head, its child holds the connection"
case "$(cat "$OUT")" in
    *hunter2*) skip "the child's GetSecret on the handed connection is refused" \
        "known gap, in the README (Secret Service, Per-program access): it read the secret" ;;
    *AccessDenied*) pass "the child's GetSecret on the handed connection is refused" ;;
    *) fail "the child's GetSecret runs" "$(cat "$OUT")" ;;
esac

echo "== prompts for D-Bus callers, through the scripted pinentry"
expect_exit 0 "unmount" kc unmount "$MNT"
W="$TEST_ROOT/work"
mkdir -p "$W" "$XDG_CONFIG_HOME/keychainfs"
cp "$TESTS_DIR/access_pinentry.sh" "$W/pinentry"
printf '[access]\npinentry = "%s"\nprompt-timeout = 2\n' "$W/pinentry" >"$XDG_CONFIG_HOME/keychainfs/config.toml"
expect_exit 0 "mount --secret-service with a pinentry" kc mount "$MNT" --secret-service --passphrase-file "$PASSFILE"
prompts() { grep -c '^prompt' "$W/prompts" 2>/dev/null || echo 0; }
ST=$(realpath "$(command -v secret-tool)")

echo ok >"$W/answer"
before=$(prompts)
expect_eq "hunter2" "$(secret-tool lookup service svc username acct 2>&1)" "Allow once: secret-tool lookup (GetSecret) gets the secret"
expect_eq "$((before + 1))" "$(prompts)" "after one prompt"
expect_contains "$W/prompts" "secret-tool" "the prompt names the program"
expect_contains "$W/prompts" "/svc/acct" "and the item"
expect_eq "/usr/bin/head" "$(getfattr --only-values -n user.keychain.access "$MNT/svc/acct")" "Allow once leaves the list as it was"

echo cancel >"$W/answer"
got=$(secret-tool lookup service svc username acct 2>&1)
expect_not_contains "$got" "hunter2" "Deny: no secret"
try_guarded_item
expect_contains "$OUT" "AccessDenied" "Deny: secretstorage's GetSecret gets AccessDenied"
expect_contains "$OUT" "delete refused" "Deny: Delete is refused"
expect_eq "hunter2" "$(head -c 100 "$MNT/svc/acct")" "the item is still there"

echo "-- a property write is never asked about (sd-bus answers it on the spot)"
echo ok >"$W/answer"
before=$(prompts)
$PY - >"$OUT" 2>&1 <<'PY'
import secretstorage
bus = secretstorage.dbus_init()
for item in secretstorage.get_default_collection(bus).search_items({"service": "svc", "username": "acct"}):
    try:
        item.set_label("relabelled")
        print("label set")
    except Exception as e:
        print("label refused:", e)
PY
expect_contains "$OUT" "label refused: " "Label is refused, with a prompt configured that would allow"
expect_eq "$before" "$(prompts)" "and no prompt was shown"

echo "-- a waiting prompt stalls no other client"
echo hang >"$W/answer"
( secret-tool lookup service svc username acct >"$W/waiting.out" 2>&1; echo "EXIT $?" >>"$W/waiting.out" ) &
WAITER=$!
sleep 0.5
start=$(date +%s%N)
other=$(secret-tool lookup service svc username open 2>&1)
took=$((($(date +%s%N) - start) / 1000000))
expect_eq "open-secret" "$other" "another client reads while a prompt waits"
if [ "$took" -lt 1200 ]; then pass "it took ${took} ms (the prompt waits 2 s)"; else fail "it waited for the prompt: ${took} ms"; fi
wait $WAITER
expect_not_contains "$(cat "$W/waiting.out")" "hunter2" "the waiting caller got no secret at the timeout"

echo notok >"$W/answer"
expect_eq "hunter2" "$(secret-tool lookup service svc username acct 2>&1)" "Always allow: secret-tool gets the secret"
expect_eq "/usr/bin/head
$ST" "$(getfattr --only-values -n user.keychain.access "$MNT/svc/acct")" "Always allow added secret-tool to the list"
echo cancel >"$W/answer"
before=$(prompts)
expect_eq "hunter2" "$(secret-tool lookup service svc username acct 2>&1)" "secret-tool reads again with no prompt"
expect_eq "$before" "$(prompts)" "no prompt for a listed program"
echo cancel >"$W/answer"
printf 'set-over-dbus' | secret-tool store --label=x service dbsvc username u >/dev/null 2>&1
expect_eq "made-over-dbus" "$(head -c 100 "$MNT/dbsvc/u")" "Deny: CreateItem does not replace a guarded item"
echo ok >"$W/answer"
before=$(prompts)
printf 'set-over-dbus' | secret-tool store --label=x service dbsvc username u >/dev/null 2>&1
expect_eq "set-over-dbus" "$(head -c 100 "$MNT/dbsvc/u")" "Allow once: CreateItem replaces it"
expect_eq "$((before + 1))" "$(prompts)" "after one prompt"
expect_eq "/usr/bin/head" "$(getfattr --only-values -n user.keychain.access "$MNT/dbsvc/u")" "the replaced item keeps its list"
expect_exit 0 "the access log" kc access log
for what in allowed-once always-allowed denied timed-out; do
    expect_contains "$OUT" "$what" "the log shows: $what"
done
finish
