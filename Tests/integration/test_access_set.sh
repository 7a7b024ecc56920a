#!/bin/sh
# Issue 17: the access log's "to allow" command works where the refusal happened. With no
# prompt configured, `keychainfs access set-generic|set-internet` changes an item's list,
# vouched for by the store's passphrase (no program on the list needed), through the daemon
# and without one; it leaves the secret as it was; a wrong passphrase changes nothing and
# counts towards the unlock backoff; a listed program already on the list keeps the file it
# was allowed with. And a prompt that cannot be shown (pinentry-tty, no terminal) adds no
# program. Through a real mount and real programs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

for tool in getfattr; do have "$tool" || finish; done
ACCESS=user.keychain.access
W="$TEST_ROOT/work"
mkdir -p "$W"
WRONG="$TEST_ROOT/wrong"
printf 'not the passphrase\n' >"$WRONG"
list_of() { getfattr --only-values -n $ACCESS "$1" 2>/dev/null; }

init_store
mount_kc "$MP" || { fail "mount" "$(cat "$ERR")"; finish; }
ITEM="$MP/svc/acct"
expect_exit 0 "an item that lists only head" sh -c "printf hunter2 | '$KEYCHAINFS_BIN' add-generic-password -s svc -a acct -T /usr/bin/head"

echo "== a refused program, and the command the log gives"
expect_exit 1 "cat is refused (no prompt is configured)" cat "$ITEM"
kc access log >"$W/log" 2>&1
hint=$(sed -n 's/^ *to allow: //p' "$W/log" | tail -n 1)
expect_eq "keychainfs access set-generic -s svc -a acct -T /usr/bin/head -T /usr/bin/cat" "$hint" "the log's command sets the list alone"
# The old hint (add -U) is refused to the CLI, a program not on the list, and would replace the secret.
expect_exit 77 "add -U from the CLI is refused, as to any program not on the list" \
    sh -c "printf other | '$KEYCHAINFS_BIN' add-generic-password -s svc -a acct -U -T /usr/bin/head -T /usr/bin/cat"

echo "== a wrong passphrase changes nothing"
expect_exit 51 "the log's command with a wrong passphrase" kc access set-generic -s svc -a acct -T /usr/bin/head -T /usr/bin/cat --passphrase-file "$WRONG"
expect_eq "/usr/bin/head" "$(list_of "$ITEM")" "the list is as it was"
expect_exit 1 "cat is still refused" cat "$ITEM"
expect_exit 0 "the daemon's log says why" grep -q "access list change refused" "$XDG_STATE_HOME/keychainfs/daemon.log"

echo "== the log's command, as the log gives it, with the passphrase"
# shellcheck disable=SC2086 # the words of the log's command, none with a space here
expect_exit 0 "run the log's command" kc ${hint#keychainfs } --passphrase-file "$PASSFILE"
expect_eq "/usr/bin/head
/usr/bin/cat" "$(list_of "$ITEM")" "the list names head and cat"
expect_eq "hunter2" "$(cat "$ITEM" 2>&1)" "cat reads it, the secret as it was"
expect_eq "hunter2" "$(head -c 100 "$ITEM" 2>&1)" "head still reads it"

echo "== a listed program keeps the file it was allowed with"
cp /usr/bin/head "$W/myhead"
expect_exit 0 "set the list to myhead" kc access set-generic -s svc -a acct -T "$W/myhead" --passphrase-file "$PASSFILE"
expect_eq "hunter2" "$("$W/myhead" -c 100 "$ITEM" 2>&1)" "myhead reads it"
cp /usr/bin/tail "$W/myhead"
expect_exit 0 "list myhead again (and cat) after it was replaced" \
    kc access set-generic -s svc -a acct -T "$W/myhead" -T /usr/bin/cat --passphrase-file "$PASSFILE"
expect_exit 1 "the replaced myhead stays refused: it was kept as first allowed" "$W/myhead" -c 100 "$ITEM"
expect_eq "hunter2" "$(cat "$ITEM" 2>&1)" "cat, newly listed, reads it"
hint=$(kc access log 2>/dev/null | sed -n 's/^ *to allow: //p' | tail -n 1)
expect_eq "keychainfs access set-generic -s svc -a acct -T /usr/bin/cat -T $W/myhead --repin $W/myhead" "$hint" \
    "for a listed program whose file changed, the log's command pins it anew"
expect_exit 65 "--repin of a program not among -T" kc access set-generic -s svc -a acct -T /usr/bin/cat --repin "$W/myhead" --passphrase-file "$PASSFILE"
# shellcheck disable=SC2086
expect_exit 0 "run it" kc ${hint#keychainfs } --passphrase-file "$PASSFILE"
expect_eq "hunter2" "$("$W/myhead" -c 100 "$ITEM" 2>&1)" "the replaced myhead reads it now"

echo "== bad input"
expect_exit 64 "neither -T nor -A is a usage error" kc access set-generic -s svc -a acct --passphrase-file "$PASSFILE"
expect_exit 65 "both -T and -A is refused, as by add" kc access set-generic -s svc -a acct -A -T /usr/bin/cat --passphrase-file "$PASSFILE"
expect_exit 44 "an item that does not exist" kc access set-generic -s svc -a nobody -A --passphrase-file "$PASSFILE"
expect_exit 65 "a program that is not an absolute path" kc access set-generic -s svc -a acct -T cat --passphrase-file "$PASSFILE"
expect_eq "/usr/bin/cat
$W/myhead" "$(list_of "$ITEM")" "none of these changed the list"

echo "== an internet password"
expect_exit 0 "an internet item that lists only head" \
    sh -c "printf netpw | '$KEYCHAINFS_BIN' add-internet-password -s example.com -P 8443 -p api -r https -a carol -T /usr/bin/head"
NET="$MP/internet/example.com/8443/api/carol"
expect_exit 1 "cat is refused" cat "$NET"
hint=$(kc access log 2>/dev/null | sed -n 's/^ *to allow: //p' | tail -n 1)
expect_eq "keychainfs access set-internet -s example.com -P 8443 -p api -r https -a carol -T /usr/bin/head -T /usr/bin/cat" "$hint" "the log's command names the internet item"
# shellcheck disable=SC2086
expect_exit 0 "run it" kc ${hint#keychainfs } --passphrase-file "$PASSFILE"
expect_eq "netpw" "$(cat "$NET" 2>&1)" "cat reads the internet item"

echo "== without a daemon"
kc unmount "$MP" >/dev/null 2>&1
expect_exit 51 "a wrong passphrase opens nothing" kc access set-generic -s svc -a acct -A --passphrase-file "$WRONG"
expect_exit 0 "-A: any program, the store opened here" kc access set-generic -s svc -a acct -A --passphrase-file "$PASSFILE"
mount_kc "$MP" || fail "mount again" "$(cat "$ERR")"
expect_eq "" "$(list_of "$ITEM")" "the list is empty"
expect_eq "hunter2" "$(tail -c 100 "$ITEM" 2>&1)" "any program reads it"

echo "== a prompt that cannot be shown adds nothing"
# pinentry-tty given no terminal answers "not OK", its Always allow button, to every prompt.
have setsid && [ -x /usr/bin/pinentry-tty ] || fail "setsid and pinentry-tty (scripts/install-deps)"
mkdir -p "$XDG_CONFIG_HOME/keychainfs"
printf '[access]\npinentry = "/usr/bin/pinentry-tty"\nprompt-timeout = 5\n' >"$XDG_CONFIG_HOME/keychainfs/config.toml"
kc unmount "$MP" >/dev/null 2>&1
mount_kc "$MP" || fail "mount with pinentry-tty" "$(cat "$ERR")"
expect_exit 0 "an item that lists only head" sh -c "printf nt-secret | '$KEYCHAINFS_BIN' add-generic-password -s nt -a item -T /usr/bin/head"
expect_eq "" "$(setsid cat "$MP/nt/item" </dev/null 2>/dev/null)" "cat with no terminal gets no secret"
expect_eq "/usr/bin/head" "$(list_of "$MP/nt/item")" "and is not added to the list"
rm "$XDG_CONFIG_HOME/keychainfs/config.toml"

echo "== the backoff counts these attempts"
for i in 1 2 3; do kc access set-generic -s svc -a acct -A --passphrase-file "$WRONG" >/dev/null 2>&1; done
expect_exit 52 "after three wrong ones, the next waits" kc access set-generic -s svc -a acct -A --passphrase-file "$PASSFILE"
expect_exit 0 "status while unlocked" kc status
expect_contains "$OUT" "the next is heard in" "status shows the wait while unlocked too"
kc lock >/dev/null 2>&1
expect_exit 52 "and so does unlock" kc unlock --passphrase-file "$PASSFILE"

finish
