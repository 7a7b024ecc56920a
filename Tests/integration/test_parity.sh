#!/bin/sh
# macOS `security` parity and a command line that is safe and says the next step: the
# one-item delete, attribute filters, -g, -X, a bare -w, lock-after at run time, lock -a,
# passphrases asked again at a terminal (driven through a real pseudo-terminal), the
# git helper's options, man pages and value completions.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

P="--passphrase-file $PASSFILE"
T=$TEST_ROOT
# at_terminal [EXPECT SEND]... -- CMD...: CMD on a new pseudo-terminal, answering each EXPECT.
at_terminal() { python3 "$TESTS_DIR/terminal.py" "$@"; }

# keys [ARGS...]: every item as kind|service-or-server|port|account, sorted, so that a test can
# check that nothing but what it meant to change has changed.
keys() {
    kc dump-keychain --json $P "$@" | python3 -c '
import json, sys
for i in sorted(json.load(sys.stdin)["items"], key=lambda i: json.dumps(i, sort_keys=True)):
    print("%s|%s|%s|%s" % (i["kind"], i.get("service") or i.get("server"), i.get("port") or "", i["account"]))
' | sort
}
# in_own_mounts CMD...: CMD in a private mount namespace where only this test's keychainfs
# mounts are left (copies of the others are detached there, and only there), so that `lock -a`,
# which locks every keychainfs mount of the user, cannot lock another test's daemon running
# as the same user on this machine.
in_own_mounts() {
    unshare --mount --propagation private python3 - "$T" "$@" <<'PY'
import ctypes, os, sys
own = os.path.realpath(sys.argv[1]) + "/"
libc = ctypes.CDLL(None, use_errno=True)
def unescape(s):
    return s.encode().decode("unicode_escape").encode("latin-1").decode()
for line in open("/proc/self/mountinfo"):
    f = line.split()
    dash = f.index("-")
    mp = unescape(f[4])
    if f[dash + 1] == "fuse.keychainfs" and not mp.startswith(own):
        libc.umount2(mp.encode(), 2)  # MNT_DETACH
os.execvp(sys.argv[2], sys.argv[2:])
PY
}
# flat: stdin as one line, so that a phrase wrapped by --help or the README still matches.
flat() { tr '\n' ' ' | tr -s ' '; }
# without LINE: stdin without that exact line.
without() { grep -vxF "$1" || true; }

init_store
for pair in "svc-a bob" "svc-a carol" "svc-b alice" "svc-c bob" "svc-d bob"; do
    set -- $pair
    kc add-generic-password -s "$1" -a "$2" -w "pw-$1-$2" $P >/dev/null
done
kc add-internet-password -s example.org -a alice -w web-alice $P >/dev/null
kc add-internet-password -s example.org -a bob -w web-bob $P >/dev/null
kc add-internet-password -s example.org -r ssh -a alice -w ssh-alice $P >/dev/null

echo "== delete: one item unless --all"
before=$(keys)
expect_exit 0 "find -s svc-a" kc find-generic-password -s svc-a $P
expect_contains "$OUT" "account: bob" "find shows svc-a's first account, bob"
expect_exit 0 "delete -s svc-a with two matches" kc delete-generic-password -s svc-a $P
expect_eq "deleted 1 item" "$(cat "$ERR")" "it says one item was deleted"
expect_contains "$OUT" "service: svc-a" "it prints what it deleted: the service"
expect_contains "$OUT" "account: bob" "and the account find showed"
expect_not_contains "$OUT" "carol" "and not the other match"
expect_eq "$(printf '%s\n' "$before" | without "generic-password|svc-a||bob")" "$(keys)" "only that item is gone"
before=$(keys)
expect_exit 44 "delete of nothing: 44" kc delete-generic-password -s nope $P
expect_eq "$before" "$(keys)" "a delete that matches nothing changes nothing"
expect_exit 0 "delete -a bob --all" kc delete-generic-password -a bob --all $P
expect_eq "deleted 2 items" "$(cat "$ERR")" "--all deletes every match"
expect_contains "$OUT" "service: svc-c" "it prints the first"
expect_contains "$OUT" "service: svc-d" "and the second"
expect_eq "$(printf '%s\n' "$before" | without "generic-password|svc-c||bob" | without "generic-password|svc-d||bob")" \
    "$(keys)" "only the matches are gone"
before=$(keys)
expect_exit 64 "--all with no filter and no terminal: a usage error" \
    setsid -w "$KEYCHAINFS_BIN" delete-generic-password --all $P
expect_contains "$ERR" "add --yes" "it says to add --yes"
expect_eq "$before" "$(keys)" "and deletes nothing"
expect_exit 64 "--yes without --all: a usage error" kc delete-generic-password -s svc-a --yes $P
expect_eq "$before" "$(keys)" "and deletes nothing"
expect_exit 0 "delete-internet-password -s example.org" kc delete-internet-password -s example.org $P
expect_contains "$OUT" "port: 22" "the first internet match, in find's order, is the port-22 item"
expect_eq "$(printf '%s\n' "$before" | without "internet-password|example.org|22|alice")" "$(keys)" \
    "only that internet item is gone"
before=$(keys)
expect_exit 1 "--all with no filter at a terminal, answered n" \
    at_terminal "Delete all 2 generic passwords" n -- "$KEYCHAINFS_BIN" delete-generic-password --all $P
expect_contains "$OUT" "nothing was deleted" "it says nothing was deleted"
expect_eq "$before" "$(keys)" "and nothing was"
expect_exit 0 "--all with no filter at a terminal, answered y" \
    at_terminal "Delete all 2 generic passwords" y -- "$KEYCHAINFS_BIN" delete-generic-password --all $P
expect_contains "$OUT" "deleted 2 items" "it deletes both"
expect_eq "$(printf '%s\n' "$before" | grep '^internet')" "$(keys)" "the internet passwords stay"
kc add-generic-password -s stays -a here -w x $P >/dev/null
before=$(keys)
expect_exit 0 "delete-internet-password --all --yes" kc delete-internet-password --all --yes $P
expect_eq "deleted 2 items" "$(cat "$ERR")" "--yes deletes every internet password"
expect_eq "generic-password|stays||here" "$(keys)" "and no generic one"
expect_exit 44 "--all --yes with nothing left: 44" kc delete-internet-password --all --yes $P
kc delete-generic-password -s stays $P >/dev/null 2>&1

echo "== attribute filters: -l -j -D -G -c -C"
for n in 1 2; do
    kc add-generic-password -s f -a "acct$n" -w "gen-$n" -l "Lab$n" -j "Com$n" -D "Kind$n" -G "Gen$n" -c "cr$n " -C "ty$n " $P >/dev/null
    kc add-internet-password -s f.example -a "acct$n" -w "net-$n" -l "Lab$n" -j "Com$n" -D "Kind$n" -G "Gen$n" \
        -c "cr$n " -C "ty$n " $P >/dev/null
done
for filter in "-l Lab2" "-j Com2" "-D Kind2" "-G Gen2" "-c cr2 " "-C ty2 " "--label Lab2" "--comment Com2" \
    "--description Kind2" "--generic Gen2" "--creator cr2 " "--type ty2 "; do
    flag=${filter%% *} value=${filter#* }
    expect_exit 0 "find-generic-password $filter" kc find-generic-password "$flag" "$value" -w $P
    expect_eq "gen-2" "$(cat "$OUT")" "generic: $filter matches only the second item"
    expect_exit 0 "find-internet-password $filter" kc find-internet-password "$flag" "$value" -w $P
    expect_eq "net-2" "$(cat "$OUT")" "internet: $filter matches only the second item"
done
expect_exit 44 "a label nobody has: 44" kc find-generic-password -l Nope $P
expect_exit 44 "filters combine: label of one, comment of the other: 44" kc find-generic-password -l Lab1 -j Com2 $P
expect_exit 44 "filters combine with the key: 44" kc find-internet-password -a acct1 -l Lab2 $P
expect_exit 44 "labels match exactly" kc find-generic-password -l lab2 $P
expect_exit 65 "a bad creator code in a filter: 65" kc find-generic-password -c toolong $P
before=$(keys)
expect_exit 0 "delete with a label filter" kc delete-generic-password -s f -l Lab2 $P
expect_contains "$OUT" "label: Lab2" "it deletes the labelled item"
expect_eq "$(printf '%s\n' "$before" | without "generic-password|f||acct2")" "$(keys)" "and only it"
before=$(keys)
expect_exit 0 "a filter alone is a filter: --all needs no --yes" \
    setsid -w "$KEYCHAINFS_BIN" delete-internet-password --all -j Com1 $P
expect_eq "$(printf '%s\n' "$before" | without "internet-password|f.example|443|acct1")" "$(keys)" \
    "--all -j deletes only the item with that comment"

echo "== -g: the password after the attributes, on stderr, as macOS prints it"
kc add-generic-password -s g -a text -w 'plain text' $P >/dev/null
kc add-generic-password -s g -a binary -X 00ff41 $P >/dev/null
kc add-generic-password -s g -a utf8 -X c3a9 $P >/dev/null
kc add-generic-password -s g -a backslash -w 'a\b' $P >/dev/null
printf '' | kc add-generic-password -s g -a empty $P >/dev/null
expect_exit 0 "find -g" kc find-generic-password -s g -a text -g $P
expect_contains "$OUT" "account: text" "the attributes are on stdout"
expect_not_contains "$OUT" "plain text" "the password is not on stdout"
expect_eq 'password: "plain text"' "$(cat "$ERR")" "printable: password: \"text\""
expect_exit 0 "find -g of a binary password" kc find-generic-password -s g -a binary -g $P
expect_eq 'password: 0x00FF41  "\000\377A"' "$(cat "$ERR")" "mixed bytes: hex, then the text with octal escapes"
expect_exit 0 "find -g with no printable byte" kc find-generic-password -s g -a utf8 -g $P
expect_eq 'password: 0xC3A9 ' "$(cat "$ERR")" "no printable byte: hex only, and macOS's trailing space"
expect_exit 0 "find -g with a backslash" kc find-generic-password -s g -a backslash -g $P
expect_eq 'password: 0x615C62  "a\134b"' "$(cat "$ERR")" "a backslash is escaped, as macOS does"
expect_exit 0 "find -g of an empty password" kc find-generic-password -s g -a empty -g $P
expect_eq 'password: ' "$(cat "$ERR")" "empty: nothing after the label"
expect_exit 0 "find -g -w" kc find-generic-password -s g -a text -g -w $P
expect_eq "plain text" "$(cat "$OUT")" "-w wins: only the password on stdout"
expect_eq "" "$(cat "$ERR")" "and nothing on stderr"

echo "== -X HEX and -w"
expect_exit 0 "find the -X password" kc find-generic-password -s g -a binary -w $P
printf '\000\377A' >"$T/want-binary"
cmp -s "$T/want-binary" "$OUT" && pass "-X 00ff41 stores those three bytes" || fail "-X 00ff41 stores those three bytes"
expect_exit 0 "-X with 0x and mixed case" kc add-generic-password -s x -a case -X 0x4A4b $P
expect_eq "JK" "$(kc find-generic-password -s x -a case -w $P)" "0x4A4b is JK"
expect_exit 65 "-X with an odd number of digits: 65" kc add-generic-password -s x -a odd -X 123 $P
expect_exit 65 "-X with a non-hex digit: 65" kc add-generic-password -s x -a bad -X 4g $P
expect_exit 64 "-X and -w together: 64" kc add-generic-password -s x -a both -X 41 -w A $P
expect_exit 44 "none of those was stored" kc find-generic-password -s x -a odd $P
printf 'from-stdin' >"$T/secret"
expect_exit 0 "a bare -w with no terminal reads standard input" \
    setsid -w "$KEYCHAINFS_BIN" add-generic-password -s w -a stdin $P -w <"$T/secret"
expect_eq "from-stdin" "$(kc find-generic-password -s w -a stdin -w $P)" "the secret came from standard input"
expect_exit 65 "a bare -w with no terminal and nothing on standard input: 65" \
    setsid -w "$KEYCHAINFS_BIN" add-generic-password -s w -a nothing $P -w </dev/null
expect_contains "$ERR" "standard input was empty" "it says why"
expect_exit 44 "no empty secret was stored" kc find-generic-password -s w -a nothing $P
printf 'second' >"$T/secret2"
expect_exit 0 "-w followed by another option is bare too" \
    setsid -w "$KEYCHAINFS_BIN" add-generic-password -s w -a stdin -w -U $P <"$T/secret2"
expect_eq "second" "$(kc find-generic-password -s w -a stdin -w $P)" "and -U after it still applies"
expect_exit 0 "a bare -w at a terminal asks twice, without echo" \
    at_terminal "password data for new item: " typed-s3cret "retype password for new item: " typed-s3cret \
    -- "$KEYCHAINFS_BIN" add-generic-password -s w -a prompted $P -w
expect_not_contains "$OUT" "typed-s3cret" "the password is not echoed"
expect_eq "typed-s3cret" "$(kc find-generic-password -s w -a prompted -w $P)" "the typed password is stored"
expect_exit 0 "a mismatch is asked again" \
    at_terminal "password data for new item: " one "retype password for new item: " two \
    "password data for new item: " three "retype password for new item: " three \
    -- "$KEYCHAINFS_BIN" add-generic-password -s w -a retyped $P -w
expect_contains "$OUT" "The two passwords differ" "it says they differ"
expect_eq "three" "$(kc find-generic-password -s w -a retyped -w $P)" "the matching pair is stored"
expect_exit 0 "-w VALUE still works" kc add-generic-password -s w -a value -w 'given value' $P
expect_eq "given value" "$(kc find-generic-password -s w -a value -w $P)" "-w VALUE is stored"

echo "== --help says what differs from macOS"
for verb in add-generic-password find-generic-password delete-generic-password \
    add-internet-password find-internet-password delete-internet-password; do
    expect_exit 0 "$verb --help" kc "$verb" --help
    help=$(flat <"$OUT")
    expect_contains "$help" "Unlike macOS security" "$verb --help has its differences from macOS"
    case $verb in
        find-*) expect_contains "$help" "no newline after them" "$verb --help: no newline after -w's output" ;;
        add-*) expect_contains "$help" "visible to other users in the process list" "$verb --help: -w VALUE is visible" ;;
        delete-*) expect_contains "$help" "--all deletes every match" "$verb --help: --all" ;;
    esac
    case $verb in
        *-internet-*) expect_contains "$help" "port 0" "$verb --help: port 0" ;;
    esac
done
expect_exit 0 "add-internet-password --help" kc add-internet-password --help
expect_contains "$(flat <"$OUT")" "the protocol defaults to https" "add-internet-password --help: the default protocol"
expect_contains "$(flat <"$REPO/README.md")" "visible to other users in the process list" "the README says -w VALUE is visible"
expect_exit 0 "keychainfs --help" kc --help
expect_contains "$(flat <"$OUT")" "default-synchronizable, allow-root, secret-service, access" "--help names every config.toml key"
expect_contains "$OUT" "find it with fuser -vm" "--help's exit 16 names fuser -vm, as the README and the error do"

echo "== passphrases at a terminal"
BS="--store $T/tty.db"
kc init $BS --scrypt-log-n 10 $P >/dev/null
kc add-generic-password $BS -s s -a a -w tty-secret $P >/dev/null
expect_exit 0 "a wrong passphrase is asked again" \
    at_terminal "Passphrase for" wrong "Passphrase for" "$PASSPHRASE" \
    -- "$KEYCHAINFS_BIN" find-generic-password $BS -s s -a a -w
expect_contains "$OUT" "the passphrase is wrong; try again" "it says so"
expect_contains "$OUT" "tty-secret" "the second try works"
expect_exit 51 "three wrong passphrases: 51" \
    at_terminal "Passphrase for" wrong1 "Passphrase for" wrong2 "Passphrase for" wrong3 \
    -- "$KEYCHAINFS_BIN" find-generic-password $BS -s s -a a -w
expect_eq "2" "$(grep -c "try again" "$OUT")" "asked three times in all"
expect_exit 0 "init at a terminal: empty, then a mismatch, then a match" \
    at_terminal "Passphrase for the new keychain: " "" \
    "Passphrase for the new keychain: " first "Repeat the passphrase: " other \
    "Passphrase for the new keychain: " "$PASSPHRASE" "Repeat the passphrase: " "$PASSPHRASE" \
    -- "$KEYCHAINFS_BIN" init --store "$T/new.db" --scrypt-log-n 10
expect_contains "$OUT" "the passphrase is empty" "an empty passphrase is refused"
expect_eq "2" "$(grep -c "Repeat the passphrase" "$OUT")" "at once: it is not asked to be repeated"
expect_contains "$OUT" "the two passphrases differ; try again" "a mismatch is asked again"
expect_exit 44 "the store opens with the passphrase that matched" kc find-generic-password --store "$T/new.db" -s none $P
expect_exit 65 "three rounds without a match: 65" \
    at_terminal "Passphrase for the new keychain: " "" "Passphrase for the new keychain: " "" \
    "Passphrase for the new keychain: " "" -- "$KEYCHAINFS_BIN" init --store "$T/never.db" --scrypt-log-n 10
[ ! -e "$T/never.db" ] && pass "and no store was made" || fail "and no store was made"

echo "== an expensive scrypt setting says what it costs"
expect_exit 0 "init --help" kc init --help
expect_contains "$OUT" "128 MiB" "init --help names the default's memory"
expect_exit 0 "init --scrypt-log-n 18" kc init --store "$T/costly.db" --scrypt-log-n 18 $P
expect_contains "$ERR" "scrypt 2^18 needs 256 MiB of memory" "it names the memory"
expect_contains "$ERR" "s on this machine" "and the time"
expect_exit 0 "at a terminal, the cost comes before the passphrase is asked" \
    at_terminal "Passphrase for the new keychain: " "$PASSPHRASE" "Repeat the passphrase: " "$PASSPHRASE" \
    -- "$KEYCHAINFS_BIN" init --store "$T/costly2.db" --scrypt-log-n 18
expect_contains "$(head -n 1 "$OUT")" "needs 256 MiB" "the first line is the cost"
expect_exit 0 "the default cost says nothing" kc init --store "$T/cheap.db" --scrypt-log-n 17 $P
expect_eq "" "$(cat "$ERR")" "no note at the default"
printf 'new one\n' >"$T/new-pass"
expect_exit 0 "passwd --scrypt-log-n 18" kc passwd --store "$T/cheap.db" $P --new-passphrase-file "$T/new-pass" --scrypt-log-n 18
expect_contains "$ERR" "needs 256 MiB" "passwd says the cost too"

echo "== through a mount: lock-after at run time, lock -a, locked messages"
on_exit_unmount "$MP"
# In the foreground the daemon itself unlocks, so a retry must find the store free again.
(
    i=0
    while [ "$(state "$MP")" != unlocked ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    kc unmount "$MP" >/dev/null 2>&1
) &
expect_exit 0 "mount --foreground at a terminal, after a wrong passphrase" \
    at_terminal "Passphrase for" wrong "Passphrase for" "$PASSPHRASE" -- "$KEYCHAINFS_BIN" mount --foreground "$MP"
wait
expect_contains "$OUT" "try again" "it asked again"
expect_contains "$OUT" "serving" "and served once unlocked"
expect_exit 0 "mount at a terminal, after a wrong passphrase" \
    at_terminal "Passphrase for" wrong "Passphrase for" "$PASSPHRASE" -- "$KEYCHAINFS_BIN" mount "$MP"
expect_contains "$OUT" "try again" "mount asked again"
pid=$(daemon_pid "$MP")
[ -n "$pid" ] && on_exit_kill "$pid"
expect_eq "unlocked" "$(state "$MP")" "and the mount is unlocked"
expect_exit 0 "status" kc status
expect_contains "$OUT" "lock-after: never" "lock-after starts off"
expect_exit 0 "set-keychain-settings -t 300" kc set-keychain-settings -t 300
expect_exit 0 "status" kc status
expect_contains "$OUT" "lock-after: 300 s" "status shows 300 s"
expect_eq "300" "$(getfattr --only-values -n user.keychain.lock-after "$MP" 2>/dev/null)" "so does the root's lock-after"
expect_exit 0 "set-keychain-settings -u" kc set-keychain-settings -u "$MP"
expect_eq "off" "$(getfattr --only-values -n user.keychain.lock-after "$MP" 2>/dev/null)" "-u alone: never"
kc set-keychain-settings -t 300 >/dev/null
expect_exit 0 "set-keychain-settings with no option" kc set-keychain-settings
expect_eq "off" "$(getfattr --only-values -n user.keychain.lock-after "$MP" 2>/dev/null)" "no -t: never, as on macOS"
expect_exit 65 "-t 0: 65" kc set-keychain-settings -t 0
expect_contains "$ERR" "for never, give -u alone" "-t 0 says how to turn lock-after off"
expect_exit 64 "-t abc: 64" kc set-keychain-settings -t abc
expect_exit 65 "-t -3: 65" kc set-keychain-settings -t -3
expect_contains "$ERR" "must be a positive number of seconds" "a negative timeout is a bad timeout, not a missing value"
expect_exit 69 "a store that is not mounted: 69" kc set-keychain-settings -t 5 --store "$T/tty.db"
expect_contains "$ERR" "is not mounted; 'keychainfs mount MOUNTPOINT --store $T/tty.db' mounts it" "and says how to mount it"
expect_exit 69 "unlock of a store that does not exist: 69" kc unlock --store "$T/none.db"
expect_contains "$ERR" "there is no store there (create one with 'keychainfs init --store $T/none.db')" "and it says so, and how to make one"
expect_exit 0 "setfattr lock-after 120" setfattr -n user.keychain.lock-after -v 120 "$MP"
expect_exit 0 "status" kc status
expect_contains "$OUT" "lock-after: 120 s" "setfattr changes the setting"
expect_errno "setfattr lock-after 5s: EINVAL" "Invalid argument" setfattr -n user.keychain.lock-after -v 5s "$MP"
expect_errno "setfattr lock-after 0: EINVAL" "Invalid argument" setfattr -n user.keychain.lock-after -v 0 "$MP"
expect_eq "120" "$(getfattr --only-values -n user.keychain.lock-after "$MP" 2>/dev/null)" "a refused value changes nothing"
expect_exit 0 "setfattr lock-after off" setfattr -n user.keychain.lock-after -v off "$MP"
expect_eq "off" "$(getfattr --only-values -n user.keychain.lock-after "$MP" 2>/dev/null)" "off turns it off"
mkdir -p "$MP/idle"
printf 'idle-secret' >"$MP/idle/item"
expect_exit 0 "set-keychain-settings -t 2" kc set-keychain-settings -t 2
sleep 4
expect_exit 0 "status after 4 idle seconds" kc status
expect_contains "$OUT" "state: locked" "the new setting locked the idle mount"
expect_exit 36 "a locked item: 36" kc find-generic-password -s idle -a item -w
expect_contains "$ERR" "run 'keychainfs unlock'" "the locked error says to run keychainfs unlock"
expect_exit 36 "-g of a locked item: 36" kc find-generic-password -s idle -a item -g
expect_eq "" "$(cat "$OUT")" "and prints no attributes half-way"
kc set-keychain-settings -u >/dev/null
expect_exit 0 "unlock at a terminal, after a wrong passphrase" \
    at_terminal "Passphrase for" wrong "Passphrase for" "$PASSPHRASE" -- "$KEYCHAINFS_BIN" unlock "$MP"
expect_contains "$OUT" "try again" "unlock asked again"
expect_eq "unlocked" "$(state "$MP")" "and unlocked"
printf 'sibling' >"$MP/idle/other"
expect_exit 0 "delete through the daemon" kc delete-generic-password -s idle
expect_contains "$OUT" "account: item" "it deletes the first account"
expect_exit 1 "the mount sees it gone" test -e "$MP/idle/item"
expect_eq "sibling" "$(cat "$MP/idle/other")" "the other item stays"
# The filters and --all cross the control socket: the daemon applies them, and the tree agrees.
for pair in "one keep" "two drop" "three drop"; do
    set -- $pair
    kc add-generic-password -s filt -a "$1" -l "$2" -c crea -w "pw-$1" >/dev/null
done
expect_exit 0 "find -l through the daemon" kc find-generic-password -l keep
expect_contains "$OUT" "account: one" "the daemon filters by label"
expect_exit 44 "find -l with no match through the daemon: 44" kc find-generic-password -s filt -l none
expect_exit 44 "-c and -l that no one item has: 44" kc find-generic-password -c crea -l other
expect_exit 0 "delete --all -l drop through the daemon" kc delete-generic-password -l drop --all
expect_contains "$ERR" "deleted 2 items" "both labelled items, no confirmation (there is a filter)"
expect_contains "$OUT" "account: three" "the deleted records come back over the socket"
expect_contains "$OUT" "account: two" "each of them"
expect_eq "one" "$(ls "$MP/filt" | tr '\n' ' ' | sed 's/ $//')" "the tree shows only the kept item"
expect_eq "pw-one" "$(cat "$MP/filt/one")" "which still reads"
kc init --store "$T/second.db" --scrypt-log-n 10 $P >/dev/null
MP2="$T/mnt2"
mkdir -p "$MP2"
expect_exit 70 "mount at a directory that does not exist: 70" kc mount "$T/mnt3" --store "$T/second.db" $P
expect_contains "$ERR" "No such file or directory; make the directory first: mkdir -p $T/mnt3" "and it says to make it"
expect_exit 0 "mount a second store" mount_kc "$MP2" --store "$T/second.db"
mkdir -p "$T/mnt3"
expect_exit 75 "mount of a store served elsewhere: 75" kc mount "$T/mnt3" --store "$T/second.db" $P
expect_contains "$ERR" "to mount it at $T/mnt3, unmount it first: keychainfs unmount $MP2" "and it says how to move it"
expect_exit 75 "mount of a store already mounted there: 75" kc mount "$MP2" --store "$T/second.db" $P
expect_contains "$ERR" "is already mounted at $MP2 ('keychainfs status'" "and it says that is where it is"
expect_exit 32 "neither mounted it again" mountpoint -q "$T/mnt3"
expect_exit 0 "lock -a" in_own_mounts "$KEYCHAINFS_BIN" lock -a
expect_eq "locked" "$(state "$MP")" "the first mount is locked"
expect_eq "locked" "$(state "$MP2")" "the second mount is locked"
expect_exit 64 "lock -a with a mountpoint: 64" kc lock -a "$MP"
expect_exit 64 "lock -a with --store: 64" kc lock -a --store "$T/second.db"
kc unmount "$MP2" >/dev/null 2>&1
kc unmount "$MP" >/dev/null 2>&1
expect_exit 0 "lock -a with nothing mounted" in_own_mounts "$KEYCHAINFS_BIN" lock -a

echo "== access set-* on a store with no passphrase says so before asking for one"
kc init --no-passphrase --store "$T/nopass.db" >/dev/null
printf 'v' | kc add-generic-password --store "$T/nopass.db" -s np -a item -T /usr/bin/cat >/dev/null
for route in direct daemon; do
    if [ $route = daemon ]; then
        mkdir -p "$T/mnt-nopass"
        expect_exit 0 "mount the store with no passphrase" mount_kc "$T/mnt-nopass" --store "$T/nopass.db"
    fi
    expect_exit 65 "access set-generic, $route: 65" kc access set-generic --store "$T/nopass.db" -s np -a item -A </dev/null
    expect_contains "$ERR" "has no passphrase" "it says the store has none ($route)"
    expect_contains "$ERR" "passwd --add" "and what can change the list instead ($route)"
    expect_not_contains "$ERR" "no terminal" "without asking for a passphrase first ($route)"
    expect_exit 0 "find, $route" kc find-generic-password --store "$T/nopass.db" -s np -a item
    expect_contains "$OUT" "access: /usr/bin/cat" "the list is unchanged ($route)"
done
kc unmount "$T/mnt-nopass" >/dev/null 2>&1

echo "== man pages"
for page in keychainfs git-credential-keychainfs; do
    file="$REPO/docs/man/$page.1"
    man --warnings -l "$file" >/dev/null 2>"$ERR"
    rc=$?
    [ $rc -eq 0 ] && [ ! -s "$ERR" ] && pass "$page.1 renders without warnings" ||
        { fail "$page.1 renders without warnings" "exit $rc"; show_output; }
    LC_ALL=C MANWIDTH=300 man -l "$file" >"$T/$page.txt" 2>/dev/null
    for section in NAME SYNOPSIS DESCRIPTION ENVIRONMENT FILES EXAMPLES "SEE ALSO"; do
        grep -q "^$section" "$T/$page.txt" && pass "$page(1) has $section" || fail "$page(1) has $section"
    done
done
for section in "THE TREE" "EXTENDED ATTRIBUTES" "LOCK STATES AND CLASSES" "EXIT STATUS"; do
    grep -q "^$section" "$T/keychainfs.txt" && pass "keychainfs(1) has $section" || fail "keychainfs(1) has $section"
done
for needle in "%2F" "%69nternet" "user.keychain.lock-after" "after-first-unlock" "set-keychain-settings"; do
    expect_contains "$T/keychainfs.txt" "$needle" "keychainfs(1) covers $needle"
done
kc --help | sed -n '/^EXIT STATUS/,/^USAGE/p' | grep '^  [0-9]' >"$T/codes"
missing=""
while read -r code meaning; do
    grep -q "^ *$code  *$meaning" "$T/keychainfs.txt" || missing="$missing $code"
done <"$T/codes"
expect_eq "" "$missing" "keychainfs(1) lists every exit status of --help ($(wc -l <"$T/codes" | tr -d ' ') codes)"
expect_contains "$T/git-credential-keychainfs.txt" "keychain is locked" "git-credential-keychainfs(1) describes its one line"

echo "== completions complete values"
kc --generate-completion-script bash >"$T/keychainfs.bash"
mkdir -p "$T/comp/a-directory"
: >"$T/comp/a-file"
complete_words() {
    (cd "$T/comp" && bash -c '
        . "$1"; shift
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
        _keychainfs keychainfs "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
        printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' complete "$T/keychainfs.bash" "$@")
}
for verb in add-internet-password find-internet-password delete-internet-password; do
    expect_contains "$(complete_words keychainfs "$verb" -r "")" " https " "$verb -r completes protocols"
    expect_contains "$(complete_words keychainfs "$verb" -r "")" " ssh " "$verb -r offers ssh"
    expect_contains "$(complete_words keychainfs "$verb" -t "")" " html-form " "$verb -t completes auth types"
done
expect_eq "imap imaps " "$(complete_words keychainfs add-internet-password -r ima)" "-r ima completes to imap and imaps"
expect_contains "$(complete_words keychainfs add-generic-password --accessible "")" "when-unlocked-this-device-only" \
    "--accessible completes classes"
expect_contains "$(complete_words keychainfs mount "$MP" --default-accessible "")" "after-first-unlock" \
    "--default-accessible completes classes"
expect_eq "a-directory a-file " "$(complete_words keychainfs find-generic-password --store "")" "--store completes files"
expect_eq "a-directory a-file " "$(complete_words keychainfs init --passphrase-file "")" "--passphrase-file completes files"
expect_eq "a-directory a-file " "$(complete_words keychainfs passwd --new-passphrase-file "")" \
    "--new-passphrase-file completes files"
expect_eq "a-directory " "$(complete_words keychainfs mount "")" "mount completes directories only"
expect_eq "a-directory " "$(complete_words keychainfs unmount "")" "unmount completes directories only"

echo "== README"
expect_contains "$(sed -n '/^## Walkthrough/,/^```sh/p' "$REPO/README.md")" "<service>/<account>" \
    "the walkthrough says where items live before its first command"
expect_contains "$REPO/README.md" "| macOS \`security\`" "the README has the macOS table"

finish
