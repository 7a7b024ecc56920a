#!/bin/sh
# Names in two Unicode forms (é as one code point, NFC, or as e and a combining accent, NFD)
# are two names everywhere the kernel and the store tell them apart by their bytes: mountpoints,
# program paths in access lists, attribute searches, the CLI's order, and git's input. Swift's
# String compares them as equal, and splits text on characters, in which a separator followed
# by a combining mark is one character with it. (The mount's own names: test_posix.sh.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

GIT_HELPER_BIN=${GIT_HELPER_BIN:-$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs}
nfc=$(printf 'caf\303\251') nfd=$(printf 'cafe\314\201') ac=$(printf '\314\201')

init_store
STORE2="$TEST_ROOT/second.db"
kc init --store "$STORE2" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null

expect_exit 0 "mount" mount_kc "$MP"

echo "== program paths in access lists are files, not equivalent strings"
mkdir "$TEST_ROOT/x"
cp "$(command -v cat)" "$TEST_ROOT/x/$nfc"
cp "$(command -v cat)" "$TEST_ROOT/x/$nfd"
cp "$(command -v cat)" "$TEST_ROOT/x/other"
printf s | kc add-generic-password -s acc -a both -T "$TEST_ROOT/x/$nfc" -T "$TEST_ROOT/x/$nfd" >"$OUT" 2>"$ERR"
expect_eq 0 "$?" "an item may list both forms (two programs)"
expect_eq s "$("$TEST_ROOT/x/$nfc" "$MP/acc/both" 2>&1)" "the NFC program reads it"
expect_eq s "$("$TEST_ROOT/x/$nfd" "$MP/acc/both" 2>&1)" "the NFD program reads it"
expect_exit 1 "an unlisted program does not" "$TEST_ROOT/x/other" "$MP/acc/both"
printf s | kc add-generic-password -s acc -a one -T "$TEST_ROOT/x/$nfc" >/dev/null
expect_exit 1 "a list of the NFC program refuses the NFD one" "$TEST_ROOT/x/$nfd" "$MP/acc/one"
printf s | kc add-generic-password -s acc -a twice -T "$TEST_ROOT/x/other" -T "$TEST_ROOT/x/other" >"$OUT" 2>"$ERR"
expect_eq 0 "$?" "a program given twice with -T is listed once"
expect_eq 1 "$(getfattr --only-values -n user.keychain.access "$MP/acc/twice" 2>/dev/null | grep -c .)" "(one line)"

echo "== searches and order"
printf A | kc add-generic-password -s lbl -a x -l "$nfc" >/dev/null
expect_exit 44 "find by label of the other form finds nothing" kc find-generic-password -l "$nfd"
expect_exit 0 "its own form finds it" kc find-generic-password -l "$nfc"
printf 1 | kc add-generic-password -s tie1 -a "$nfc" >/dev/null
printf 2 | kc add-generic-password -s tie1 -a "$nfd" >/dev/null
printf 2 | kc add-generic-password -s tie2 -a "$nfd" >/dev/null
printf 1 | kc add-generic-password -s tie2 -a "$nfc" >/dev/null
expect_eq "2 2" "$(kc find-generic-password -s tie1 -w) $(kc find-generic-password -s tie2 -w)" \
    "the first match is the first in byte order, whatever order the items were stored in"

echo "== git's input"
printf '%s\n' protocol=https host=ext.example username=u password=P "oauth_refresh_token=${ac}tok" \
    password_expiry_utc=4000000000 | "$GIT_HELPER_BIN" store
printf '%s\n' protocol=https host=ext.example username=u | "$GIT_HELPER_BIN" get >"$OUT"
expect_contains "$OUT" "oauth_refresh_token=${ac}tok" "a refresh token that begins with a combining mark is kept"
printf '%s\n' protocol=https "host=[${ac}::1]:8443" username=u password=Q | "$GIT_HELPER_BIN" store
expect_eq Q "$(kc find-internet-password -s "${ac}::1" -P 8443 -a u -w 2>&1)" "a bracketed host whose address begins with a mark keeps its port"
printf '%s\n' protocol=https "host=hh:${ac}8443" username=u password=R | "$GIT_HELPER_BIN" store 2>"$ERR"
expect_exit 44 "a port that begins with a mark is no port: nothing is stored" kc find-internet-password -s hh -a u
expect_exit 44 "nor under the whole text" kc find-internet-password -s "hh:${ac}8443" -a u

echo "== the variant marker and directory moves, on bytes"
# U+0600 prepends: Swift joins it to the % after it, so a search of characters misses %~.
pre=$(printf 'x\330\200')
printf V | kc add-internet-password -s marks -P 443 -r ssh -a "$pre" >/dev/null
expect_eq V "$(cat "$MP/internet/marks/443/$pre%~ssh" 2>&1)" "a variant whose account ends in a prepending character opens"
mkdir -p "$MP/internet/marks/443/$nfc" "$MP/internet/marks/443/$nfd"
expect_exit 0 "an empty path directory moves into the other form's directory" mv "$MP/internet/marks/443/$nfc" "$MP/internet/marks/443/$nfd/sub"

echo "== xattr names"
printf v >"$MP/acc/plain"
setfattr -n user.keychain.zzz -v 1 "$MP/acc/plain" 2>"$OUT"
setfattr -n "user.keychain.${ac}label" -v 1 "$MP/acc/plain" 2>"$ERR"
expect_eq "$(sed 's/.*: //' "$OUT")" "$(sed 's/.*: //' "$ERR")" "a keychain attribute name with a mark after the prefix is refused as any unknown one"
echo "== text written for a shell, systemd or libfuse is escaped scalar by scalar"
# A quote or a backslash followed by a combining mark is one Swift character with it: escaped
# by character, it was left as it was, and ended the quoted word early.
# (No space in it: a space in a listed path is written %20, which would spoil the attack.)
evil="$TEST_ROOT/evil/y'${ac};touch\${IFS}PWNED;'${ac}"
mkdir -p "$TEST_ROOT/evil" "$TEST_ROOT/paste" "$TEST_ROOT/bin"
cp "$(command -v cat)" "$evil"
ln -s "$KEYCHAINFS_BIN" "$TEST_ROOT/bin/keychainfs"
printf g | kc add-generic-password -s guard -a acc -T /usr/bin/head >/dev/null
"$evil" "$MP/guard/acc" >/dev/null 2>&1
hint=$(kc access log 2>/dev/null | sed -n 's/^ *to allow: //p' | tail -n 1)
(cd "$TEST_ROOT/paste" && PATH="$TEST_ROOT/bin:$PATH" sh -c "$hint --passphrase-file '$PASSFILE'") >"$OUT" 2>"$ERR"
expect_eq "" "$(ls "$TEST_ROOT/paste")" "pasting the access log's command for a program named with quotes runs nothing else"
expect_eq g "$("$evil" "$MP/guard/acc" 2>&1)" "and allows that program"
kc service show --store "/x/q\"${ac} --allow-root --store /tmp/evil.db \"${ac}y" >"$OUT" 2>&1
expect_contains "$OUT" "q\\\"${ac} --allow-root" "a unit's store path keeps its quotes escaped"
kc init --store "$TEST_ROOT/s,${ac}b.db" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
mkdir "$TEST_ROOT/mcomma"
expect_exit 0 "a store whose path has a comma before a combining mark mounts" mount_kc "$TEST_ROOT/mcomma" --store "$TEST_ROOT/s,${ac}b.db"
kc unmount "$TEST_ROOT/mcomma" >/dev/null 2>&1
mkdir "$TEST_ROOT/out"
expect_exit 0 "export to a file whose name begins with a combining mark" \
    kc export "$TEST_ROOT/out/${ac}b.kcbk" --store "$STORE2" --scrypt-log-n 10 --passphrase-file "$PASSFILE" --backup-passphrase-file "$PASSFILE"
expect_exit 0 "writes it in the directory named" test -s "$TEST_ROOT/out/${ac}b.kcbk"

echo "== a mount whose path is not UTF-8 leaves the mount table readable"
# The kernel escapes only space, tab, newline and backslash in /proc/self/mountinfo: another
# user's FUSE mount (or any mount) at such a path was enough to hide every keychainfs mount.
bad="$TEST_ROOT/$(printf 'bad\377')"
mkdir "$bad" && mount -t tmpfs -o size=1m kcfs-test "$bad" && on_exit "umount '$bad' 2>/dev/null"
expect_exit 0 "lock with no mountpoint finds the mount" kc lock
kc status "$MP" >"$OUT" 2>&1
expect_contains "$OUT" "locked" "and locked it"
expect_exit 0 "unlock" kc unlock "$MP" --passphrase-file "$PASSFILE"
umount "$bad"

echo "== a mountpoint in one form is not the other's"
STORE3="$TEST_ROOT/third.db"
kc init --store "$STORE3" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
mkdir "$TEST_ROOT/m$nfd" "$TEST_ROOT/m$nfc"
expect_exit 0 "a store mounts at the NFD name" mount_kc "$TEST_ROOT/m$nfd" --store "$STORE3"
expect_exit 0 "another store mounts at the NFC name" mount_kc "$TEST_ROOT/m$nfc" --store "$STORE2"
kc status "$TEST_ROOT/m$nfc" >"$OUT" 2>&1
expect_contains "$OUT" "$STORE2" "status of the NFC mountpoint names its own store"
expect_exit 0 "unmount of the NFC mountpoint" kc unmount "$TEST_ROOT/m$nfc"
expect_exit 0 "leaves the NFD one mounted" mountpoint -q "$TEST_ROOT/m$nfd"
expect_exit 32 "and unmounts its own (32: not a mountpoint)" mountpoint -q "$TEST_ROOT/m$nfc"
finish
