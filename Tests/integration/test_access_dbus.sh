#!/bin/sh
# Per-program access over the Secret Service (issue 17): an item whose access list names only
# /usr/bin/head gives its secret to no D-Bus client not on it (GetSecret, GetSecrets through
# secret-tool and python secretstorage), and is neither replaced, changed nor deleted by one.
# The bus thread serves every client, so there is no prompt here: refused at once, logged.
# Runs on a private session bus, as test_secret_service.sh does.
. "$(dirname "$0")/private_bus.sh"

. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
MNT="$TEST_ROOT/mnt"
mkdir -p "$MNT"
init_store
on_exit_unmount "$MNT"
expect_exit 0 "mount --secret-service" kc mount "$MNT" --secret-service --passphrase-file "$PASSFILE"
printf 'hunter2' | kc add-generic-password -s svc -a acct -T /usr/bin/head >/dev/null
printf 'open-secret' | kc add-generic-password -s svc -a open >/dev/null
expect_eq "hunter2" "$(head -c 100 "$MNT/svc/acct")" "head reads the guarded item"

expect_eq "open-secret" "$(secret-tool lookup service svc username open 2>&1)" "secret-tool reads an item with no list"
got=$(secret-tool lookup service svc username acct 2>&1)
expect_not_contains "$got" "hunter2" "secret-tool lookup of the guarded item gets no secret"
secret-tool search --all --unlock service svc >"$OUT" 2>&1
expect_not_contains "$OUT" "hunter2" "secret-tool search --unlock (GetSecrets) leaves the guarded secret out"
expect_contains "$OUT" "open-secret" "and gives the open one"
$PY - >"$OUT" 2>&1 <<'PY'
import secretstorage
bus = secretstorage.dbus_init()
c = secretstorage.get_default_collection(bus)
for item in c.search_items({"service": "svc", "username": "acct"}):
    try:
        print("secret:", item.get_secret())
    except Exception as e:
        print("refused:", type(e).__name__, e)
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
expect_contains "$OUT" "AccessDenied" "secretstorage GetSecret: org.freedesktop.DBus.Error.AccessDenied"
expect_not_contains "$OUT" "hunter2" "secretstorage gets no secret"
expect_contains "$OUT" "set refused" "SetSecret is refused"
expect_contains "$OUT" "delete refused" "Delete is refused"
printf 'replaced' | secret-tool store --label=x service svc username acct >/dev/null 2>&1
expect_eq "hunter2" "$(head -c 100 "$MNT/svc/acct")" "secret-tool store (CreateItem, replace) did not overwrite it"
expect_exit 0 "the access log" kc access log
expect_contains "$OUT" "secret-tool" "the log names secret-tool"
expect_contains "$OUT" "python" "and python"
finish
