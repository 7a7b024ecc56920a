#!/bin/sh
# A directory of 100,000 items lists from the store in pages: its first entry comes at once,
# the whole listing (`ls -f`, `ls -l`) is right, and the daemon's memory after it stays far
# below what holding every name took (about 410 MiB); a listing that runs while names are
# created, deleted and renamed lists every name that existed throughout exactly once.
. "$(dirname "$0")/lib.sh"
. "$TESTS_DIR/mount_lib.sh"

FILL=${KEYCHAINFS_FILL_BIN:-$(dirname "$KEYCHAINFS_BIN")/keychainfs-fill}
RSS_LIMIT_MIB=${KEYCHAINFS_LISTING_RSS_MIB:-200}

kc init --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
# svc0 gets items 0-99,999, svc1 items 100,000-101,999.
expect_exit 0 "fill: one service of 100,000 items, one of 2,000" "$FILL" "$KEYCHAINFS_STORE" "$PASSFILE" 102000 listing 100000
expect_exit 0 "mount" mount_kc "$MP"
pid=$(daemon_pid "$MP")

echo "== the first entry of a directory of 100,000"
/usr/bin/python3 - "$MP/svc0" >"$OUT" 2>"$ERR" <<'PY'
import os, sys, time
t = time.perf_counter()
with os.scandir(sys.argv[1]) as it:
    first = next(it).name
print("%s %.0f" % (first, (time.perf_counter() - t) * 1000))
PY
first_ms=$(cut -d' ' -f2 "$OUT")
case $(cut -d' ' -f1 "$OUT") in
    a*) pass "scandir gives a first entry ($first_ms ms)" ;;
    *) fail "scandir gives a first entry" "$(cat "$OUT" "$ERR")" ;;
esac
rss=$(awk '/^VmRSS:/ {print int($2 / 1024)}' /proc/"$pid"/status)
[ "$rss" -lt 64 ] && pass "and the daemon read no more than a page for it (RSS $rss MiB)" || fail "a page read for the first entry" "RSS $rss MiB"

echo "== the whole listing"
ls -f "$MP/svc0" >"$TEST_ROOT/ls-f" 2>"$ERR"
expect_eq "100002 100002" "$(wc -l <"$TEST_ROOT/ls-f") $(sort -u "$TEST_ROOT/ls-f" | wc -l)" "ls -f: 100,000 names and . and .., none twice"
expect_eq "0" "$(grep -v -e '^a[0-9]*$' -e '^\.$' -e '^\.\.$' "$TEST_ROOT/ls-f" | wc -l)" "ls -f: only the items' names"
expect_eq "a0 a99999" "$(grep -x -e a0 -e a99999 "$TEST_ROOT/ls-f" | sort | tr '\n' ' ' | sed 's/ $//')" "ls -f: the first and the last item"
ls -l "$MP/svc0" >"$TEST_ROOT/ls-l" 2>"$ERR"
expect_eq "100000" "$(grep -c '^-r' "$TEST_ROOT/ls-l")" "ls -l: 100,000 files with their attributes"
rss=$(awk '/^VmRSS:/ {print int($2 / 1024)}' /proc/"$pid"/status)
[ "$rss" -lt "$RSS_LIMIT_MIB" ] && pass "the daemon's RSS after ls -l of 100,000: $rss MiB (< $RSS_LIMIT_MIB)" \
    || fail "the daemon's RSS after ls -l of 100,000" "$rss MiB, limit $RSS_LIMIT_MIB"

echo "== a listing while the directory changes"
/usr/bin/python3 "$TESTS_DIR/listing_race.py" "$MP/svc1" >"$OUT" 2>"$ERR"
rc=$?
expect_eq "0" "$rc" "every name that existed throughout listed once: $(cat "$OUT" "$ERR" | head -3)"
expect_eq "now stored" "$(cat "$MP/svc1/pending-one")" "the file pending when the listing began is stored"

finish
