#!/bin/sh
# The keychainfs command line, run as a user would: every verb, and every exit code but
# 1, 73 and 74 (a failing disk). The last part goes through a real mount's control socket
# when /dev/fuse is there; the mount's own behaviour is tested in the mount tests.
#
#     swift build --scratch-path .build-cli &&
#         KEYCHAINFS_BIN=$PWD/.build-cli/debug/keychainfs sh Tests/integration/test_cli.sh

. "$(dirname "$0")/lib.sh"

P="--passphrase-file $PASSFILE"
T=$TEST_ROOT

# --- help, usage, completions ------------------------------------------------------------

expect_exit 0 "--help" kc --help
expect_contains "$OUT" "EXIT STATUS" "--help shows the exit-status table"
expect_contains "$OUT" "44  item not found" "--help lists not found as 44"
for verb in init passwd add-generic-password find-generic-password delete-generic-password \
    add-internet-password find-internet-password delete-internet-password dump-keychain verify \
    lock unlock status unmount mount; do
    expect_exit 0 "$verb --help" kc "$verb" --help
done
expect_contains "$OUT" "mountpoint" "mount --help names the mountpoint"
expect_exit 0 "bash completion script" kc --generate-completion-script bash
expect_contains "$OUT" "add-generic-password" "completion script knows the verbs"
expect_exit 64 "unknown verb is a usage error" kc frobnicate
expect_exit 64 "unknown flag is a usage error" kc find-generic-password --frobnicate
expect_exit 64 "both passphrase options is a usage error" \
    kc find-generic-password -s x --passphrase-fd 0 --passphrase-file "$PASSFILE"

# --- init ---------------------------------------------------------------------------------

expect_exit 50 "no store yet: 50" kc find-generic-password -s x $P
expect_exit 0 "init" kc init --scrypt-log-n 10 $P
[ -f "$KEYCHAINFS_STORE" ] && pass "init makes the store file" || fail "init makes the store file"
expect_eq "600" "$(stat -c %a "$KEYCHAINFS_STORE")" "store file is 0600"
expect_exit 48 "init over an existing store: 48" kc init --scrypt-log-n 10 $P
expect_exit 65 "scrypt cost out of range: 65" kc init --store "$T/cost.db" --scrypt-log-n 30 $P
printf '' >"$T/empty-pass"
expect_exit 65 "an empty passphrase is refused" kc init --store "$T/empty.db" --scrypt-log-n 10 --passphrase-file "$T/empty-pass"
expect_exit 65 "a missing passphrase file: 65" kc find-generic-password -s x --passphrase-file "$T/nope"

# --- generic passwords --------------------------------------------------------------------

expect_exit 0 "add generic" kc add-generic-password -s github -a alice -w s3cret \
    -l "GitHub" -j "my comment" -D "web password" -G "gen-attr" -c abcd -C wxyz $P
expect_exit 0 "find generic -w" kc find-generic-password -s github -a alice -w $P
expect_eq "s3cret" "$(cat "$OUT")" "find -w prints the secret"
expect_eq "6" "$(wc -c <"$OUT" | tr -d ' ')" "find -w adds no newline"
expect_exit 0 "find generic attributes" kc find-generic-password -s github -a alice $P
for line in "class: generic-password" "service: github" "account: alice" "label: GitHub" \
    "comment: my comment" "description: web password" 'generic: "gen-attr"' "creator: abcd" \
    "type: wxyz" "accessible: when-unlocked" "created: " "modified: "; do
    expect_contains "$OUT" "$line" "find shows '$line'"
done
expect_not_contains "$OUT" "s3cret" "find without -w does not show the secret"
expect_exit 45 "duplicate without -U: 45" kc add-generic-password -s github -a alice -w other $P
expect_exit 0 "update with -U" kc add-generic-password -s github -a alice -w n3w -U $P
expect_exit 0 "find after update" kc find-generic-password -s github -a alice -w $P
expect_eq "n3w" "$(cat "$OUT")" "-U replaced the secret"
expect_exit 0 "attributes after update" kc find-generic-password -s github -a alice $P
expect_contains "$OUT" "label: GitHub" "-U keeps attributes it was not given"
expect_exit 0 "delete generic" kc delete-generic-password -s github -a alice $P
expect_eq "deleted 1 item" "$(cat "$ERR")" "delete says how many, on stderr"
expect_contains "$OUT" "account: alice" "delete shows what it deleted"
expect_exit 44 "find after delete: 44" kc find-generic-password -s github -a alice $P
expect_exit 44 "delete of nothing: 44" kc delete-generic-password -s github -a alice $P

# Secrets from standard input, exactly.
printf 'pw' >"$T/pw"
expect_exit 0 "add from stdin" kc add-generic-password -s stdin -a two <"$T/pw" $P
expect_exit 0 "find stdin secret" kc find-generic-password -s stdin -a two -w $P
expect_eq "2" "$(wc -c <"$OUT" | tr -d ' ')" "printf 'pw' | add stores 2 bytes"
printf 'a\000b\nc\377\000\n\n' >"$T/binary"
expect_exit 0 "add a binary secret" kc add-generic-password -s stdin -a binary <"$T/binary" $P
expect_exit 0 "find the binary secret" kc find-generic-password -s stdin -a binary -w $P
cmp -s "$T/binary" "$OUT" && pass "binary secret with NUL bytes round-trips" || fail "binary secret with NUL bytes round-trips"
printf '' >"$T/nothing"
expect_exit 0 "an empty secret" kc add-generic-password -s stdin -a empty <"$T/nothing" $P
expect_exit 0 "find the empty secret" kc find-generic-password -s stdin -a empty -w $P
expect_eq "0" "$(wc -c <"$OUT" | tr -d ' ')" "empty secret stays empty"

# Passphrase descriptors: a whole fd without newline, another fd, and fd 0 shared with the secret.
printf '%s' "$PASSPHRASE" >"$T/pass-no-newline"
expect_exit 0 "--passphrase-fd to EOF without newline" kc find-generic-password -s stdin -a two -w --passphrase-fd 0 <"$T/pass-no-newline"
expect_exit 0 "--passphrase-fd 3" kc find-generic-password -s stdin -a two -w --passphrase-fd 3 3<"$PASSFILE"
# A descriptor the caller did not open: bad input, not a wrong passphrase (it had read the
# process's own /proc file opened as that number, and three such tries made the next wait).
for n in 4 5 6 7 4 6; do
    expect_exit 65 "--passphrase-fd $n, not open: bad input" kc find-generic-password -s stdin -a two -w --passphrase-fd $n
done
expect_contains "$ERR" "file descriptor 6 was not open when keychainfs started" "  the error says so"
expect_exit 0 "  and no wrong passphrase was counted (three would make this one wait: 52)" kc find-generic-password -s stdin -a two -w --passphrase-fd 3 3<"$PASSFILE"
printf '%s\nfrom-fd-0' "$PASSPHRASE" >"$T/pass-then-secret"
expect_exit 0 "--passphrase-fd 0 then the secret on stdin" kc add-generic-password -s stdin -a shared --passphrase-fd 0 <"$T/pass-then-secret"
expect_exit 0 "find the secret that followed the passphrase" kc find-generic-password -s stdin -a shared -w $P
expect_eq "from-fd-0" "$(cat "$OUT")" "the passphrase line is not part of the secret"
printf '%s\r\n' "$PASSPHRASE" >"$T/pass-crlf"
expect_exit 51 "only the newline is stripped (a CR stays)" kc find-generic-password -s stdin -a two --passphrase-file "$T/pass-crlf"
expect_exit 65 "no passphrase and no terminal: 65" setsid -w "$KEYCHAINFS_BIN" find-generic-password -s stdin -a two

# Partial matches, order, and deleting several.
for pair in "svc-b alice" "svc-a carol" "svc-a bob" "svc-c bob"; do
    set -- $pair
    kc add-generic-password -s "$1" -a "$2" -w "pw-$1-$2" $P >/dev/null
done
expect_exit 0 "find with only -s" kc find-generic-password -s svc-a -w $P
expect_eq "pw-svc-a-bob" "$(cat "$OUT")" "only -s: the first account in order"
expect_exit 0 "find with only -a" kc find-generic-password -a bob -w $P
expect_eq "pw-svc-a-bob" "$(cat "$OUT")" "only -a: the first service in order"
expect_exit 0 "find with only -a shows the service" kc find-generic-password -a alice $P
expect_contains "$OUT" "service: svc-b" "only -a finds the one match"
expect_exit 0 "delete --all with only -a" kc delete-generic-password -a bob --all $P
expect_eq "deleted 2 items" "$(cat "$ERR")" "delete of several matches says 2"
expect_exit 44 "both are gone" kc find-generic-password -a bob $P
expect_exit 0 "the rest stays" kc find-generic-password -s svc-a -a carol $P

# --- internet passwords -------------------------------------------------------------------

expect_exit 0 "add internet with defaults" kc add-internet-password -s example.org -a alice -w web1 $P
expect_exit 0 "find internet attributes" kc find-internet-password -s example.org -a alice $P
for line in "class: internet-password" "server: example.org" "port: 443" "protocol: https" \
    "authentication-type: default" "account: alice"; do
    expect_contains "$OUT" "$line" "internet find shows '$line'"
done
expect_exit 0 "find internet -w" kc find-internet-password -s example.org -w $P
expect_eq "web1" "$(cat "$OUT")" "internet secret"
expect_exit 45 "duplicate internet: 45" kc add-internet-password -s example.org -a alice -w x $P
expect_exit 45 "port 443 is the same item as port 0 for https" kc add-internet-password -s example.org -P 443 -a alice -w x $P
expect_exit 0 "update internet with -U" kc add-internet-password -s example.org -a alice -w web2 -U -l Example $P
expect_exit 0 "find updated internet" kc find-internet-password -s example.org -a alice -w $P
expect_eq "web2" "$(cat "$OUT")" "internet -U replaced the secret"
expect_exit 0 "add ssh variant" kc add-internet-password -s example.org -r ssh -a alice -p /srv/git -w sshpw $P
expect_exit 0 "add form variant by four-char codes" kc add-internet-password -s example.org -r htps -t form -d realm -a alice -w formpw $P
expect_exit 0 "find by protocol name" kc find-internet-password -s example.org -r ssh -w $P
expect_eq "sshpw" "$(cat "$OUT")" "the ssh variant"
expect_exit 0 "find ssh attributes" kc find-internet-password -s example.org -r ssh $P
expect_contains "$OUT" "port: 22" "ssh defaults to port 22"
expect_contains "$OUT" "path: srv/git" "the path is kept (normalised)"
expect_exit 0 "find by auth type name" kc find-internet-password -s example.org -t html-form -w $P
expect_eq "formpw" "$(cat "$OUT")" "html-form is 'form'"
expect_exit 0 "find by domain" kc find-internet-password -d realm -w $P
expect_eq "formpw" "$(cat "$OUT")" "match on the security domain"
expect_exit 0 "find by port" kc find-internet-password -P 22 -w $P
expect_eq "sshpw" "$(cat "$OUT")" "match on the port"
expect_exit 0 "find by path" kc find-internet-password -p srv/git -w $P
expect_eq "sshpw" "$(cat "$OUT")" "match on the path"
expect_exit 44 "internet not found: 44" kc find-internet-password -s example.org -r ftp $P
expect_exit 0 "delete the ssh variant" kc delete-internet-password -s example.org -r ssh $P
expect_eq "deleted 1 item" "$(cat "$ERR")" "internet delete count"
expect_exit 0 "delete the rest of the server" kc delete-internet-password -s example.org --all $P
expect_eq "deleted 2 items" "$(cat "$ERR")" "internet delete of several"
expect_exit 44 "internet delete of nothing: 44" kc delete-internet-password -s example.org $P

# --- bad input ----------------------------------------------------------------------------

expect_exit 65 "empty service: 65" kc add-generic-password -s "" -a a -w x $P
expect_exit 65 "no service: 65" kc add-generic-password -a a -w x $P
expect_exit 65 "empty server: 65" kc add-internet-password -s "" -a a -w x $P
expect_exit 65 "unknown protocol: 65" kc add-internet-password -s h -a a -r gopherish -w x $P
expect_exit 65 "unknown protocol in find: 65" kc find-internet-password -r gopherish $P
expect_exit 65 "unknown auth type: 65" kc add-internet-password -s h -a a -t kerberosish -w x $P
expect_exit 65 "unknown class: 65" kc add-generic-password -s s -a a -w x --accessible sometimes $P
expect_exit 65 "bad creator code: 65" kc add-generic-password -s s -a a -w x -c toolong $P
expect_exit 65 "port 99999: 65" kc add-internet-password -s h -a a -P 99999 -w x $P
expect_exit 65 "port abc: 65" kc add-internet-password -s h -a a -P abc -w x $P
expect_exit 65 "port 0x1bb: 65" kc find-internet-password -s h -P 0x1bb $P
expect_exit 65 "port -1: 65" kc add-internet-password -s h -a a -P -1 -w x $P
expect_contains "$ERR" "port '-1' is not a number from 1 to 65535" "a negative port is a bad port, not a missing value"
long=$(printf '%0300d' 0)
expect_exit 66 "service over 255 bytes: 66" kc add-generic-password -s "$long" -a a -w x $P
expect_exit 66 "account over 255 bytes: 66" kc add-internet-password -s h -a "$long" -w x $P
head -c 16777216 /dev/zero >"$T/16mib"
expect_exit 0 "a 16 MiB secret is accepted" kc add-generic-password -s big -a max <"$T/16mib" $P
expect_exit 0 "the 16 MiB secret reads back" kc find-generic-password -s big -a max -w $P
cmp -s "$T/16mib" "$OUT" && pass "16 MiB secret round-trips" || fail "16 MiB secret round-trips"
printf 'x' >>"$T/16mib"
expect_exit 67 "a secret over 16 MiB from stdin: 67" kc add-generic-password -s big -a over <"$T/16mib" $P
expect_contains "$ERR" "16777217 bytes" "the error gives the size"
rm -f "$T/16mib"
expect_exit 44 "the oversized item was not stored" kc find-generic-password -s big -a over $P
# An argument that is not UTF-8 is refused whole: decoded, its bytes would become U+FFFD, and
# x\376 and x\377 would be one name, stored as a third.
bad_ff=$(printf 'x\377') bad_fe=$(printf 'x\376')
expect_exit 65 "a service that is not UTF-8: 65" kc add-generic-password -s "$bad_ff" -a a -w x $P
expect_contains "$ERR" "argument 3 is not UTF-8" "the refusal names the argument"
expect_exit 65 "another one: 65, not a duplicate" kc add-generic-password -s "$bad_fe" -a a -w x $P
expect_exit 44 "nothing was stored under U+FFFD" kc find-generic-password -s "x$(printf '\357\277\275')" -a a $P
expect_exit 65 "a -w secret that is not UTF-8: 65" kc add-generic-password -s utf -a a -w "$bad_ff" $P
expect_exit 44 "and it stored nothing" kc find-generic-password -s utf -a a $P
expect_exit 65 "a --store path that is not UTF-8: 65" kc find-generic-password -s x --store "$T/$bad_ff" $P
expect_exit 65 "a KEYCHAINFS_STORE that is not UTF-8: 65" env KEYCHAINFS_STORE="$T/$bad_ff" "$KEYCHAINFS_BIN" find-generic-password -s x $P
expect_contains "$ERR" "KEYCHAINFS_STORE is not UTF-8" "the refusal names the variable"
expect_exit 65 "a HOME that is not UTF-8: 65" env HOME="$T/$bad_ff" "$KEYCHAINFS_BIN" status

# --- stores that are not ours, or missing -------------------------------------------------

expect_exit 50 "--store to a missing file: 50" kc find-generic-password -s x --store "$T/missing.db" $P
head -c 8192 /dev/urandom >"$T/random.db"
expect_exit 49 "a random file: 49" kc find-generic-password -s x --store "$T/random.db" $P
sqlite3 "$T/other.db" "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello');"
expect_exit 49 "an SQLite file with another schema: 49" kc find-generic-password -s x --store "$T/other.db" $P
{ printf 'SQLite format 3\000'; head -c 8192 /dev/urandom; } >"$T/corrupt.db"
expect_exit 49 "a corrupt SQLite file: 49" kc find-generic-password -s x --store "$T/corrupt.db" $P
expect_exit 50 "KEYCHAINFS_STORE chooses the store" env KEYCHAINFS_STORE="$T/missing-env.db" "$KEYCHAINFS_BIN" find-generic-password -s x $P

# --- a store without a passphrase ---------------------------------------------------------

NP="--store $T/nopass.db"
expect_exit 0 "init --no-passphrase" kc init $NP --no-passphrase
expect_exit 64 "--no-passphrase with a passphrase option is a usage error" kc init --store "$T/np2.db" --no-passphrase $P
expect_exit 0 "add without any passphrase" setsid -w "$KEYCHAINFS_BIN" add-generic-password $NP -s s -a a -w devonly
expect_exit 0 "find without any passphrase" setsid -w "$KEYCHAINFS_BIN" find-generic-password $NP -s s -a a -w
expect_eq "devonly" "$(cat "$OUT")" "device-key-only store works"
expect_exit 65 "when-passcode-set on a store without passphrase: 65" \
    kc add-generic-password $NP -s s -a p -w x --accessible when-passcode-set-this-device-only
expect_exit 65 "passwd on a store without passphrase: 65" kc passwd $NP $P --new-passphrase-file "$PASSFILE"
expect_exit 0 "when-passcode-set on a passphrase store is fine" \
    kc add-generic-password -s classes -a passcode -w x --accessible when-passcode-set-this-device-only $P

# --- this-device-only items without the device key: 36 ------------------------------------

expect_exit 0 "add a this-device-only item" \
    kc add-generic-password -s classes -a device -w devsecret --accessible when-unlocked-this-device-only $P
DEVKEY="$XDG_STATE_HOME/keychainfs/device.key"
mv "$DEVKEY" "$T/device.key.away"
on_exit "[ -f '$T/device.key.away' ] && mv '$T/device.key.away' '$DEVKEY'"
expect_exit 36 "a this-device-only item without the device key: 36" kc find-generic-password -s classes -a device -w $P
expect_exit 0 "other items still read without the device key" kc find-generic-password -s stdin -a two -w $P
mv "$T/device.key.away" "$DEVKEY"
expect_exit 0 "with the device key back it reads" kc find-generic-password -s classes -a device -w $P
expect_eq "devsecret" "$(cat "$OUT")" "this-device-only secret"

# --- dump-keychain ------------------------------------------------------------------------

expect_exit 0 "dump-keychain" kc dump-keychain $P
expect_contains "$OUT" "service: svc-a" "dump lists generic items"
expect_contains "$OUT" "account: carol" "dump lists accounts"
expect_not_contains "$OUT" "secret:" "dump without -d has no secrets"
expect_exit 0 "dump-keychain -d" kc dump-keychain -d $P
expect_contains "$OUT" 'secret: "pw-svc-a-carol"' "dump -d shows text secrets quoted"
expect_contains "$OUT" "secret: 0x610062" "dump -d shows binary secrets as hex"
expect_exit 0 "dump-keychain -d --json" kc dump-keychain -d --json $P
python3 -m json.tool "$OUT" >/dev/null 2>&1 && pass "dump --json is valid JSON" || fail "dump --json is valid JSON"
expect_contains "$OUT" '"secret" : "cHc="' "JSON secrets are base64"

# --- integrity ----------------------------------------------------------------------------

IS="--store $T/tamper.db"
kc init $IS --scrypt-log-n 10 $P >/dev/null
for a in one two three; do kc add-generic-password $IS -s tamper -a "$a" -w "secret-$a" $P >/dev/null; done
expect_exit 0 "verify a sound store" kc verify $IS $P
expect_contains "$OUT" "checked 3 items, 0 failed" "verify counts"
# Flip one hex digit of a sealed column of one row.
flip() { # flip COLUMN ID
    hex=$(sqlite3 "$T/tamper.db" "SELECT hex($1) FROM items WHERE id = $2")
    digit=$(printf '%s' "$hex" | cut -c41)
    [ "$digit" = 0 ] && new=1 || new=0
    patched="$(printf '%s' "$hex" | cut -c1-40)$new$(printf '%s' "$hex" | cut -c42-)"
    sqlite3 "$T/tamper.db" "UPDATE items SET $1 = X'$patched' WHERE id = $2"
}
flip secret 1
expect_exit 93 "verify after tampering with a secret: 93" kc verify $IS $P
expect_contains "$OUT" "item #1" "verify names the tampered item"
expect_not_contains "$OUT" "item #2" "verify does not blame item 2"
expect_not_contains "$OUT" "item #3" "verify does not blame item 3"
expect_exit 93 "reading the tampered secret: 93" kc find-generic-password $IS -s tamper -a one -w $P
expect_exit 0 "the other items still read" kc find-generic-password $IS -s tamper -a two -w $P
expect_eq "secret-two" "$(cat "$OUT")" "untouched item intact"
expect_exit 93 "dump -d goes on past a damaged secret but exits 93" kc dump-keychain $IS -d $P
expect_contains "$OUT" "<integrity failure" "dump marks the damaged secret"
expect_contains "$OUT" 'secret: "secret-three"' "dump still shows the others"
flip attributes 3
expect_exit 93 "verify after tampering with attributes: 93" kc verify $IS $P
expect_contains "$OUT" "item #3" "verify names the item with tampered attributes"
expect_not_contains "$OUT" "item #2" "item 2 still passes"
expect_exit 0 "item 2 reads by its exact key" kc find-generic-password $IS -s tamper -a two -w $P

# --- wrong passphrase and backoff ---------------------------------------------------------

BS="--store $T/backoff.db"
kc init $BS --scrypt-log-n 10 $P >/dev/null
kc add-generic-password $BS -s s -a a -w backoff $P >/dev/null
printf 'wrong\n' >"$T/wrong"
W="--passphrase-file $T/wrong"
expect_exit 51 "wrong passphrase: 51" kc find-generic-password $BS -s s -a a -w $W
expect_contains "$ERR" "keychainfs: " "errors are prefixed with the program name"
expect_exit 51 "second wrong passphrase: 51" kc find-generic-password $BS -s s -a a -w $W
expect_exit 51 "third wrong passphrase: 51" kc find-generic-password $BS -s s -a a -w $W
expect_exit 52 "after three wrong, even the right one waits: 52" kc find-generic-password $BS -s s -a a -w $P
expect_exit 52 "the wait survives a new process: 52" kc find-generic-password $BS -s s -a a -w $P
# The wait runs from the last failure's time, kept in the store: set a minute back rather than
# waited for on the wall clock (BackoffTests checks the wait itself with an injected clock).
past=$(( $(date +%s) - 60 ))
sqlite3 "$T/backoff.db" "UPDATE meta SET value = CAST('$past' AS BLOB) WHERE name = 'last_failed_unlock'"
expect_exit 0 "after the wait the right passphrase works" kc find-generic-password $BS -s s -a a -w $P
expect_eq "backoff" "$(cat "$OUT")" "secret after backoff"
expect_exit 51 "the count was reset by the success" kc find-generic-password $BS -s s -a a -w $W
expect_exit 0 "so one wrong does not make it wait" kc find-generic-password $BS -s s -a a -w $P

# --- passwd -------------------------------------------------------------------------------

PS="--store $T/passwd.db"
kc init $PS --scrypt-log-n 10 $P >/dev/null
kc add-generic-password $PS -s s -a a -w kept $P >/dev/null
printf 'a new passphrase\n' >"$T/new-pass"
expect_exit 51 "passwd with a wrong old passphrase: 51" kc passwd $PS $W --new-passphrase-file "$T/new-pass"
expect_exit 0 "passwd" kc passwd $PS $P --new-passphrase-file "$T/new-pass"
expect_exit 51 "the old passphrase no longer works: 51" kc find-generic-password $PS -s s -a a -w $P
expect_exit 0 "the new passphrase works" kc find-generic-password $PS -s s -a a -w --passphrase-file "$T/new-pass"
expect_eq "kept" "$(cat "$OUT")" "items survive passwd"
printf 'a new passphrase\nthird one\n' >"$T/two-lines"
expect_exit 0 "passwd with old and new on one fd" kc passwd $PS --passphrase-fd 0 --new-passphrase-fd 0 <"$T/two-lines"
printf 'third one\n' >"$T/third"
expect_exit 0 "the passphrase from the second line works" kc find-generic-password $PS -s s -a a -w --passphrase-file "$T/third"

# --- daemon verbs without a daemon: 69 ----------------------------------------------------

expect_exit 69 "lock without a mount: 69" kc lock
expect_exit 69 "unlock without a mount: 69" kc unlock $P
expect_exit 69 "status without a mount: 69" kc status
expect_exit 69 "unmount without a mount: 69" kc unmount
mkdir -p "$T/not-a-mount"
expect_exit 69 "lock of a directory that is not mounted: 69" kc lock "$T/not-a-mount"

# --- through a running daemon (the control socket) ---------------------------------------

if [ -c /dev/fuse ] && have fusermount3; then
    MS="--store $T/mounted.db"
    MNT="$T/mnt"
    kc init $MS --scrypt-log-n 10 $P >/dev/null
    mkdir -p "$MNT"
    on_exit_unmount "$MNT"
    daemon_pid() { sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$T/mounted.db.daemon" 2>/dev/null; }
    expect_exit 0 "mount" kc mount "$MNT" $MS $P
    pid=$(daemon_pid)
    [ -n "$pid" ] && on_exit_kill "$pid"
    expect_eq "600" "$(stat -c %a "$T/mounted.db.daemon")" "the daemon's record beside the store is 0600"
    expect_exit 69 "lock of the default store while another one is mounted: 69" kc lock
    expect_contains "$ERR" "$T/mounted.db at $MNT" "the message names the store that is mounted, and where"
    expect_contains "$ERR" "--store" "and how to name it"
    expect_eq "600" "$(stat -c %a "$T/mounted.db.sock")" "its control socket beside the store is 0600"
    mkdir -p "$T/mnt2"
    on_exit_unmount "$T/mnt2"
    expect_exit 75 "a second daemon on the same store: 75" kc mount "$T/mnt2" $MS $P
    expect_contains "$ERR" "$(realpath "$MNT")" "the refusal names the existing mountpoint"
    : >"$T/not-a-dir"
    expect_exit 70 "mount on a file: 70" kc mount "$T/not-a-dir" --store "$T/tamper.db" $P
    expect_exit 0 "add through the daemon with no passphrase at hand" \
        setsid -w "$KEYCHAINFS_BIN" add-generic-password $MS -s daemon -a cli -w viaSocket
    expect_eq "viaSocket" "$(cat "$MNT/daemon/cli" 2>&1)" "the mount sees the CLI's item at once"
    printf 'fromMount' >"$MNT/daemon/file"
    expect_exit 0 "find an item written through the mount" kc find-generic-password $MS -s daemon -a file -w
    expect_eq "fromMount" "$(cat "$OUT")" "the CLI sees the mount's item at once"
    expect_exit 0 "a binary secret through the socket" kc add-generic-password $MS -s daemon -a binary <"$T/binary"
    expect_exit 0 "read it back through the socket" kc find-generic-password $MS -s daemon -a binary -w
    cmp -s "$T/binary" "$OUT" && pass "binary secret round-trips through the daemon" || fail "binary secret round-trips through the daemon"
    expect_exit 45 "duplicate through the daemon: 45" kc add-generic-password $MS -s daemon -a cli -w x
    expect_exit 44 "not found through the daemon: 44" kc find-generic-password $MS -s daemon -a nobody
    # keychainfs's front answers this lookup itself: a name that is not UTF-8 goes, bytes
    # unchanged, to the full tool, which refuses it.
    expect_exit 65 "a lookup of a name that is not UTF-8 through the daemon: 65" \
        kc find-generic-password $MS -s "$(printf 'daemon\377')" -a cli -w
    expect_contains "$ERR" "is not UTF-8" "the full tool's refusal"
    expect_exit 65 "bad input through the daemon: 65" kc add-generic-password $MS -s daemon -a p -w x --accessible nope
    expect_exit 0 "status" kc status $MS
    expect_contains "$OUT" "state: unlocked" "status: unlocked"
    expect_contains "$OUT" "mountpoint: $(realpath "$MNT")" "status names the mountpoint"
    expect_contains "$OUT" "when-unlocked: 3" "status counts items per class"
    expect_exit 0 "status by mountpoint" kc status "$MNT"
    expect_exit 0 "lock" kc lock $MS
    expect_exit 36 "a locked class through the daemon: 36" kc find-generic-password $MS -s daemon -a cli -w
    expect_exit 0 "attributes stay readable while locked" kc find-generic-password $MS -s daemon -a cli
    expect_exit 0 "dump -d while locked" kc dump-keychain $MS -d
    expect_contains "$OUT" "<unavailable" "dump marks locked secrets"
    expect_exit 0 "status while locked" kc status "$MNT"
    expect_contains "$OUT" "state: locked" "status: locked"
    expect_exit 51 "unlock with a wrong passphrase: 51" kc unlock "$MNT" $W
    expect_exit 0 "unlock" kc unlock "$MNT" $P
    expect_exit 0 "read after unlock" kc find-generic-password $MS -s daemon -a cli -w
    expect_exit 0 "verify through the daemon" kc verify $MS
    expect_exit 0 "delete through the daemon" kc delete-generic-password $MS -s daemon --all
    expect_eq "deleted 3 items" "$(cat "$ERR")" "delete count through the daemon"
    [ ! -e "$MNT/daemon/cli" ] && pass "the mount sees the delete" || fail "the mount sees the delete"
    expect_exit 0 "unmount" kc unmount $MS
    expect_exit 69 "status after unmount: 69" kc status $MS
    expect_exit 0 "mount again" kc mount "$MNT" $MS $P
    pid=$(daemon_pid)
    [ -n "$pid" ] && on_exit_kill "$pid" && kill -9 "$pid"
    sleep 0.3
    expect_exit 0 "unmount detaches the mount of a killed daemon" kc unmount "$MNT"
    ls "$MNT" >/dev/null 2>&1 && pass "the mountpoint works again" || fail "the mountpoint works again"
    expect_exit 69 "nothing left to unmount: 69" kc unmount "$MNT"

    # One rule for the class of a new item, mounted or not: a class given is kept; with
    # none, the configured default (a mount's --default-accessible for its life).
    mkdir -p "$XDG_CONFIG_HOME/keychainfs"
    printf 'default-accessible = "after-first-unlock"\n' >"$XDG_CONFIG_HOME/keychainfs/config.toml"
    on_exit "rm -f '$XDG_CONFIG_HOME/keychainfs/config.toml'"
    class_of() { kc find-generic-password $MS -s rule -a "$1" $P 2>&1 | sed -n 's/^accessible: //p'; }
    expect_exit 0 "add with no --accessible, not mounted" kc add-generic-password $MS -s rule -a off -w x $P
    expect_exit 0 "mount with the same configuration" kc mount "$MNT" $MS $P
    pid=$(daemon_pid)
    [ -n "$pid" ] && on_exit_kill "$pid"
    expect_exit 0 "the same add, mounted" kc add-generic-password $MS -s rule -a on -w x
    expect_eq "after-first-unlock" "$(class_of on)" "mounted: the configured default class"
    expect_eq "after-first-unlock" "$(class_of off)" "not mounted: the same class"
    expect_exit 0 "a stricter neighbour" kc add-generic-password $MS -s rule -a strict -w x --accessible when-unlocked
    expect_exit 0 "add beside it, mounted" kc add-generic-password $MS -s rule -a on2 -w x
    expect_eq "after-first-unlock" "$(class_of on2)" "mounted: the default, whatever is beside it"
    expect_exit 0 "unmount" kc unmount $MS
    expect_exit 0 "add beside it, not mounted" kc add-generic-password $MS -s rule -a off2 -w x $P
    expect_eq "after-first-unlock" "$(class_of off2)" "not mounted: the same"
    expect_exit 0 "a class given is kept" kc add-generic-password $MS -s rule -a given -w x --accessible always $P
    expect_eq "always" "$(class_of given)" "a class given is the class stored"
    rm -f "$XDG_CONFIG_HOME/keychainfs/config.toml"
else
    [ -c /dev/fuse ] || skip "the checks through a daemon" "no /dev/fuse"
fi

# --- nothing in plaintext on disk ---------------------------------------------------------

DS="--store $T/plain.db"
kc init $DS --scrypt-log-n 10 $P >/dev/null
# A reader holding a snapshot keeps the WAL from being checkpointed away, so it can be searched too.
python3 -c '
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN"); c.execute("SELECT count(*) FROM meta").fetchall()
open(sys.argv[2], "w").close()
time.sleep(120)' "$T/plain.db" "$T/reader-ready" &
READER=$!
on_exit_kill $READER
while [ ! -f "$T/reader-ready" ]; do sleep 0.05; done
kc add-generic-password $DS -s ZqSvcMarker -a ZqAcctMarker -w ZqSecretMarker -l ZqLabelMarker -j ZqCommentMarker $P >/dev/null
kc add-internet-password $DS -s ZqServerMarker -a ZqNetAcctMarker -p /ZqPathMarker -w ZqNetSecretMarker -j ZqNetComment $P >/dev/null
kc add-generic-password $DS -s ZqSvcMarker -a ZqAcctMarker -w ZqUpdatedSecretMarker -U $P >/dev/null
kc add-generic-password $DS -s ZqGoneSvcMarker -a ZqGoneAcct -w ZqGoneSecretMarker $P >/dev/null
kc delete-generic-password $DS -s ZqGoneSvcMarker $P >/dev/null 2>&1
files=""
for f in "$T/plain.db" "$T/plain.db-wal" "$T/plain.db-shm" "$T/plain.db-journal"; do
    [ -f "$f" ] && files="$files $f"
done
hits=0
for marker in ZqSvcMarker ZqAcctMarker ZqSecretMarker ZqLabelMarker ZqCommentMarker ZqServerMarker \
    ZqNetAcctMarker ZqPathMarker ZqNetSecretMarker ZqNetComment ZqUpdatedSecretMarker \
    ZqGoneSvcMarker ZqGoneAcct ZqGoneSecretMarker; do
    for f in $files; do
        n=$(grep -c -a "$marker" "$f")
        [ "$n" -eq 0 ] || { hits=$((hits + n)); echo "     $marker found in $f"; }
    done
done
[ -s "$T/plain.db-wal" ] && pass "the WAL was kept for the search" || fail "the WAL was kept for the search"
expect_eq "0" "$hits" "no secret or name in plaintext in the db, WAL or journal ($(echo $files | wc -w) files)"
kill $READER 2>/dev/null

finish
