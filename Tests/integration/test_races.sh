#!/bin/sh
# One owner: for 20 s, CLI writers and deleters (through the daemon), shell writers and rm
# (through the mount) and mv all work on a few names at once. Afterwards three views must
# agree exactly, names and values: the mount, `dump-keychain -d` through the daemon, and a
# fresh mount of the store.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

DURATION=${RACE_SECONDS:-20}
init_store
expect_exit 0 "mount" mount_kc "$MP"
mkdir -p "$MP/race"

end=$(($(date +%s) + DURATION))
worker() {
    i=0
    while [ "$(date +%s)" -lt "$end" ]; do
        i=$((i + 1))
        n=$((i % 4))
        case $1 in
            cli-add) printf 'cli-%s' "$i" | kc add-generic-password -s race -a "n$n" -U >/dev/null 2>&1 ;;
            cli-del) kc delete-generic-password -s race -a "n$(((i + 1) % 4))" >/dev/null 2>&1 ;;
            sh-write) sh -c "printf 'sh-%s' $i > '$MP/race/n$n'" 2>/dev/null ;;
            sh-rm) rm -f "$MP/race/n$(((i + 2) % 4))" 2>/dev/null ;;
            mv) sh -c "printf 'mv-%s' $i > '$MP/race/tmp$n'" 2>/dev/null && mv -f "$MP/race/tmp$n" "$MP/race/n$(((i + 3) % 4))" 2>/dev/null ;;
        esac
    done
    echo "$1 $i" >>"$TEST_ROOT/rounds"
}
for w in cli-add cli-del sh-write sh-rm mv; do worker "$w" & done
wait
expect_eq 5 "$(wc -l <"$TEST_ROOT/rounds" | tr -d ' ')" "all five kinds of writer ran for ${DURATION}s"
sed 's/^/     rounds: /' "$TEST_ROOT/rounds"

# view: "name=value" lines, sorted, from the mount at $1.
mount_view() {
    for f in "$1"/race/*; do
        [ -e "$f" ] || continue
        printf '%s=%s\n' "$(basename "$f")" "$(cat "$f")"
    done | sort
}
dump_view() {
    kc dump-keychain -d --json | python3 -c '
import base64, json, sys
for item in json.load(sys.stdin)["items"]:
    if item.get("service") == "race":
        print("%s=%s" % (item["account"], base64.b64decode(item["secret"]).decode()))
' | sort
}

sleep 1.1   # the kernel's 1 s name cache must not decide the listing
mounted=$(mount_view "$MP")
dumped=$(dump_view)
expect_eq "$dumped" "$mounted" "the mount shows exactly what the daemon dumps"
if [ -z "$mounted" ]; then
    # Some names must survive for the comparison to mean something.
    printf 'sh-final' > "$MP/race/n0"
    mounted=$(mount_view "$MP"); dumped=$(dump_view)
fi
expect_contains "$mounted" "=" "the views are not empty"
pid=$(daemon_pid "$MP")
expect_exit 0 "unmount" kc unmount "$MP"
wait_gone "$pid"
expect_exit 0 "a fresh mount" mount_kc "$MP"
expect_eq "$mounted" "$(mount_view "$MP")" "a fresh mount shows the same names and values"
expect_eq "$dumped" "$(dump_view)" "and so does a dump through the new daemon"
expect_exit 0 "verify finds no damage" kc verify

echo "== sixteen wrong unlocks at once are judged one at a time"
kc lock "$MP" >/dev/null
echo wrong >"$TEST_ROOT/wrong"
for i in $(seq 16); do
    (kc unlock "$MP" --passphrase-file "$TEST_ROOT/wrong" >/dev/null 2>&1; echo $? >>"$TEST_ROOT/unlock-codes") &
done
wait
expect_eq 16 "$(wc -l <"$TEST_ROOT/unlock-codes" | tr -d ' ')" "all sixteen answered"
expect_eq 3 "$(grep -c '^51$' "$TEST_ROOT/unlock-codes")" "three were judged wrong (51)"
expect_eq 13 "$(grep -c '^52$' "$TEST_ROOT/unlock-codes")" "the other thirteen were refused by the backoff (52)"
expect_eq locked "$(state "$MP")" "and the keychain stayed locked"

echo "== two commands open an unmounted store at once"
# The last connection to close removes the WAL and its index, so each pair finds them missing
# and both make them: one found made by the other is checked as the store's, not refused as
# planted (it was, in about one pair of six: "it appeared while the store was opened").
ALONE="$TEST_ROOT/alone.db"
init_store --store "$ALONE"
printf 'alone-secret' | kc add-generic-password -s alone -a a --store "$ALONE" --passphrase-file "$PASSFILE" >/dev/null
: >"$TEST_ROOT/pair-codes"
for i in $(seq 30); do
    for j in 1 2; do
        (kc find-generic-password -s alone -a a -w --store "$ALONE" --passphrase-file "$PASSFILE" \
            >"$TEST_ROOT/pair-$j.out" 2>&1; echo "$?" >>"$TEST_ROOT/pair-codes") &
    done
    wait
    grep -v '^alone-secret$' "$TEST_ROOT/pair-1.out" "$TEST_ROOT/pair-2.out" >>"$TEST_ROOT/pair-errors"
done
expect_eq 60 "$(grep -c '^0$' "$TEST_ROOT/pair-codes")" "60 finds in 30 pairs all read the secret"
expect_eq "" "$(cat "$TEST_ROOT/pair-errors" 2>/dev/null)" "with no complaint about the store's files"
finish
