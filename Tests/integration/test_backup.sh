#!/bin/sh
# export and import: a round trip between stores, this-device-only items left out and
# counted, skip versus -U, and files that must be refused before anything is written (wrong
# backup passphrase, cut short, one byte changed). Then the same through a mount's daemon.
. "$(dirname "$0")/lib.sh"

P="--passphrase-file $PASSFILE"
T=$TEST_ROOT
BACKUP_PASS="$T/backup-pass"
printf 'backup passphrase\n' >"$BACKUP_PASS"
B="--backup-passphrase-file $BACKUP_PASS --scrypt-log-n 10"
BI="--backup-passphrase-file $BACKUP_PASS"
A="$T/a.db"

# dump STORE: every item with its secret, without the lines that name the store or the ids.
dump() { kc dump-keychain -d --store "$1" $P | grep -v -e '^keychain: ' -e '^item-id: '; }

init_store --store "$A"
kc add-generic-password --store "$A" $P -s github -a alice -w 's3cret' -l GitHub -j "a comment" -D kind -c abcd -C wxyz
printf 'a\000b\nc\377' | kc add-generic-password --store "$A" $P -s binary -a nul
kc add-generic-password --store "$A" $P -s empty -a nothing </dev/null
kc add-generic-password --store "$A" $P -s early -a riser -w up --accessible always
kc add-generic-password --store "$A" $P -s after -a first -w later --accessible after-first-unlock
kc add-internet-password --store "$A" $P -s example.com -P 8443 -r https -p api/v1 -a carol -w web
kc add-internet-password --store "$A" $P -s example.com -r ssh -a carol -w shell -t html-form -d realm
kc add-generic-password --store "$A" $P -s device -a one -w d1 --accessible always-this-device-only
kc add-generic-password --store "$A" $P -s device -a two -w d2 --accessible when-unlocked-this-device-only

echo "== help"
expect_exit 0 "export --help" kc export --help
expect_contains "$OUT" "--backup-passphrase-file" "export --help names the backup passphrase options"
expect_contains "$OUT" "-f, --force" "export --help names --force"
expect_contains "$(kc --help)" "48  already exists" "keychainfs --help's exit table gives 48 its meaning"
expect_contains "$(kc --help)" "39  mountpoint not empty" "and 39"
expect_exit 0 "import --help" kc import --help
expect_contains "$OUT" "-U" "import --help names -U"
expect_exit 64 "import without a file: 64" kc import
expect_contains "$(kc --help)" "export" "keychainfs --help lists export"

echo "== export"
expect_exit 0 "export" kc export "$T/a.kcb" --store "$A" $P $B
expect_contains "$OUT" "exported 7 items to $T/a.kcb" "export says how many items it wrote"
expect_contains "$OUT" "left out 2 this-device-only items" "export says how many this-device-only items it left out"
expect_eq "600" "$(stat -c %a "$T/a.kcb")" "the backup file is 0600"
for needle in s3cret github alice example.com carol GitHub; do
    if grep -q "$needle" "$T/a.kcb"; then fail "no '$needle' in the backup file"; else pass "no '$needle' in the backup file"; fi
done
cp "$T/a.kcb" "$T/a.before"
# Refused before any passphrase is asked: with none to read here, asking would exit 65.
expect_exit 48 "export over an existing file is refused: 48" kc export "$T/a.kcb" --store "$A" </dev/null
expect_contains "$ERR" "$T/a.kcb exists; give --force to replace it" "the refusal names the file and --force"
cmp -s "$T/a.kcb" "$T/a.before" && pass "and the existing file is left intact" || fail "and the existing file is left intact"
ln -s "$T/nowhere" "$T/dangling.kcb"
expect_exit 48 "a dangling symlink counts as existing: 48" kc export "$T/dangling.kcb" --store "$A" $P $B
[ -L "$T/dangling.kcb" ] && [ ! -e "$T/nowhere" ] && pass "the link is left as it was, and not followed" \
    || fail "the link is left as it was, and not followed"
expect_exit 0 "export --force replaces the file" kc export "$T/a.kcb" --force --store "$A" $P $B
cmp -s "$T/a.kcb" "$T/a.before" && fail "the file was rewritten (a new salt)" || pass "the file was rewritten (a new salt)"
expect_eq "600" "$(stat -c %a "$T/a.kcb")" "the replaced backup file is 0600"
expect_exit 0 "-f is --force" kc export "$T/a.kcb" -f --store "$A" $P $B
ls -a "$T" | grep -q '\.tmp$' && fail "no temporary file is left" || pass "no temporary file is left"
expect_exit 65 "no terminal and no backup passphrase option: 65" kc export "$T/x.kcb" --store "$A" $P </dev/null
expect_contains "$ERR" "--backup-passphrase-fd" "the message names the options to use instead"
expect_exit 64 "both backup passphrase options: 64" kc export "$T/x.kcb" --store "$A" $P $B --backup-passphrase-fd 0
printf '\n' >"$T/empty-pass"
expect_exit 65 "an empty backup passphrase is refused" \
    kc export "$T/x.kcb" --store "$A" $P --backup-passphrase-file "$T/empty-pass" --scrypt-log-n 10
expect_exit 65 "scrypt cost out of range: 65" kc export "$T/x.kcb" --store "$A" $P --backup-passphrase-file "$BACKUP_PASS" --scrypt-log-n 9
expect_exit 74 "an unwritable destination: 74" kc export "$T/no/such/dir/x.kcb" --store "$A" $P $B
[ ! -e "$T/x.kcb" ] && pass "failed exports leave no file" || fail "failed exports leave no file"
expect_exit 51 "a wrong store passphrase: 51" kc export "$T/x.kcb" --store "$A" --passphrase-file "$BACKUP_PASS" $B

echo "== import: round trip"
init_store --store "$T/b.db"
expect_exit 0 "import into an empty store" kc import "$T/a.kcb" --store "$T/b.db" $P $BI
expect_eq "imported 7 items from $T/a.kcb" "$(cat "$OUT")" "import says how many items it added"
expect_eq "" "$(cat "$ERR")" "no progress line without a terminal"
dump "$A" >"$T/a.dump"
dump "$T/b.db" >"$T/b.dump"
# The exported items only: the two this-device-only blocks are removed from a's dump.
python3 - "$T/a.dump" >"$T/a.expected" <<'PY'
import sys
blocks = open(sys.argv[1], encoding="latin-1").read().split("\n\n")
print("\n\n".join(b for b in blocks if "service: device\n" not in b + "\n").rstrip("\n"))
PY
if cmp -s "$T/a.expected" "$T/b.dump"; then
    pass "every exported item comes back with its attributes, class, dates and secret"
else
    fail "every exported item comes back with its attributes, class, dates and secret" "$(diff "$T/a.expected" "$T/b.dump" | head -20)"
fi
expect_exit 0 "find the binary secret" kc find-generic-password --store "$T/b.db" $P -s binary -a nul -w
printf 'a\000b\nc\377' >"$T/binary"
cmp -s "$T/binary" "$OUT" && pass "a binary secret round-trips byte for byte" || fail "a binary secret round-trips byte for byte"
expect_exit 44 "this-device-only items are not in the backup" kc find-generic-password --store "$T/b.db" $P -s device
expect_exit 0 "verify the imported store" kc verify --store "$T/b.db" $P
expect_contains "$OUT" "checked 7 items, 0 failed" "every imported item verifies"

echo "== import: conflicts"
init_store --store "$T/c.db"
kc add-generic-password --store "$T/c.db" $P -s github -a alice -w local -l Mine
expect_exit 0 "import with an existing item" kc import "$T/a.kcb" --store "$T/c.db" $P $BI
expect_contains "$OUT" 'exists, skipped: generic-password service "github" account "alice"' "the skipped item is named"
expect_contains "$OUT" "imported 6 items from $T/a.kcb; skipped 1 that exist already (-U overwrites them)" "the summary counts the skipped item"
expect_eq "local" "$(kc find-generic-password --store "$T/c.db" $P -s github -a alice -w)" "a skipped item keeps its secret"
expect_contains "$(kc find-generic-password --store "$T/c.db" $P -s github -a alice)" "label: Mine" "a skipped item keeps its attributes"
expect_exit 0 "import -U" kc import -U "$T/a.kcb" --store "$T/c.db" $P $BI
expect_contains "$OUT" "imported 7 items from $T/a.kcb (7 overwritten)" "-U says how many it overwrote"
expect_not_contains "$OUT" "skipped" "-U skips nothing"
expect_eq "s3cret" "$(kc find-generic-password --store "$T/c.db" $P -s github -a alice -w)" "-U takes the backup's secret"
expect_contains "$(kc find-generic-password --store "$T/c.db" $P -s github -a alice)" "label: GitHub" "-U takes the backup's attributes"
expect_eq 0 "$(tr -d '\000' <"$T/c.db-wal" 2>/dev/null | wc -c)" "-U leaves the WAL empty: the replaced values are erased"
expect_exit 0 "the store opens after -U with no rollback reported" kc verify --store "$T/c.db" $P
dump "$T/c.db" >"$T/c.dump"
cmp -s "$T/b.dump" "$T/c.dump" && pass "after -U the store equals the backup" || fail "after -U the store equals the backup" "$(diff "$T/b.dump" "$T/c.dump" | head)"

echo "== bad files change nothing"
init_store --store "$T/d.db"
kc add-generic-password --store "$T/d.db" $P -s keep -a me -w kept
dump "$T/d.db" >"$T/d.before"
unchanged() {
    dump "$T/d.db" >"$T/d.after"
    cmp -s "$T/d.before" "$T/d.after" && pass "$1: nothing was written" || fail "$1: nothing was written" "$(diff "$T/d.before" "$T/d.after" | head)"
}
printf 'wrong\n' >"$T/wrong-pass"
expect_exit 51 "a wrong backup passphrase: 51" kc import "$T/a.kcb" --store "$T/d.db" $P --backup-passphrase-file "$T/wrong-pass"
expect_contains "$ERR" "backup passphrase does not open" "the message says it is the backup passphrase"
unchanged "wrong backup passphrase"
size=$(stat -c %s "$T/a.kcb")
head -c $((size - 1)) "$T/a.kcb" >"$T/cut1.kcb"
expect_exit 93 "a file one byte short: 93" kc import "$T/cut1.kcb" --store "$T/d.db" $P $BI
expect_contains "$ERR" "truncated or was altered" "the message says the file is cut or altered"
unchanged "one byte short"
head -c 100 "$T/a.kcb" >"$T/cut2.kcb"
expect_exit 93 "a file cut after its header: 93" kc import "$T/cut2.kcb" --store "$T/d.db" $P $BI
unchanged "cut after the header"
head -c 40 "$T/a.kcb" >"$T/cut3.kcb"
expect_exit 93 "a file cut inside its header: 93" kc import "$T/cut3.kcb" --store "$T/d.db" $P $BI
unchanged "cut inside the header"
# One byte of ciphertext flipped, in the middle of the items.
python3 - "$T/a.kcb" "$T/tampered.kcb" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[71 + (len(data) - 71) // 2] ^= 0x01
open(sys.argv[2], "wb").write(data)
PY
expect_exit 93 "a changed byte: 93" kc import "$T/tampered.kcb" --store "$T/d.db" $P $BI
unchanged "a changed byte"
expect_exit 93 "a changed byte, with -U: 93" kc import -U "$T/tampered.kcb" --store "$T/d.db" $P $BI
unchanged "a changed byte with -U"
printf 'not a backup at all' >"$T/junk.kcb"
expect_exit 65 "not a backup file: 65" kc import "$T/junk.kcb" --store "$T/d.db" $P $BI
expect_contains "$ERR" "is not a keychainfs backup" "the message says it is not a backup"
expect_exit 65 "a missing file: 65" kc import "$T/none.kcb" --store "$T/d.db" $P $BI
expect_contains "$ERR" "does not exist" "the message says the file does not exist"
unchanged "files that are not backups"

echo "== passphrases on one descriptor, progress on a terminal"
init_store --store "$T/e.db"
printf '%s\nbackup passphrase\n' "$PASSPHRASE" >"$T/both"
expect_exit 0 "store and backup passphrase from one descriptor, in that order" \
    kc import "$T/a.kcb" --store "$T/e.db" --passphrase-fd 3 --backup-passphrase-fd 3 3<"$T/both"
expect_eq "web" "$(kc find-internet-password --store "$T/e.db" $P -s example.com -P 8443 -w)" "the import took"
init_store --store "$T/f.db"
script -qec "$KEYCHAINFS_BIN import '$T/a.kcb' --store '$T/f.db' $P $BI" /dev/null >"$T/tty.out" 2>&1
expect_contains "$T/tty.out" "importing 7 of 7 items" "a terminal shows progress"
script -qec "$KEYCHAINFS_BIN verify --store '$T/f.db' $P" /dev/null >"$T/tty.out" 2>&1
expect_contains "$T/tty.out" "verifying 7 of 7 items" "verify shows progress at a terminal"
script -qec "$KEYCHAINFS_BIN export '$T/f2.kcb' --store '$T/f.db' $P $BI" /dev/null >"$T/tty.out" 2>&1
expect_contains "$T/tty.out" "exporting 7 items" "export shows progress at a terminal"

echo "== a full backup: the store file and device.key"
mkdir -p "$T/machine2/state/keychainfs"
cp "$A" "$T/machine2/keychain.db"
expect_exit 36 "the store alone does not open this-device-only items" \
    env XDG_STATE_HOME="$T/machine2/state" "$KEYCHAINFS_BIN" find-generic-password --store "$T/machine2/keychain.db" $P -s device -a one -w
install -m 600 "$XDG_STATE_HOME/keychainfs/device.key" "$T/machine2/state/keychainfs/device.key"
expect_exit 0 "with device.key they open" \
    env XDG_STATE_HOME="$T/machine2/state" "$KEYCHAINFS_BIN" find-generic-password --store "$T/machine2/keychain.db" $P -s device -a one -w
expect_eq "d1" "$(cat "$OUT")" "the this-device-only secret is back"

echo "== the backup passphrase at a terminal"
# script(1) gives the command a terminal; the typing waits for each prompt.
typed() { (sleep 1; printf '%s\r' "$1"; sleep 1; printf '%s\r' "$2"; sleep 1) | script -qec "$3" /dev/null >"$OUT" 2>&1; }
typed 'typed pass' 'typed pass' "'$KEYCHAINFS_BIN' export '$T/typed.kcb' --store '$A' $P --scrypt-log-n 10"
expect_contains "$OUT" "Repeat the backup passphrase" "a new backup passphrase is asked twice"
expect_contains "$OUT" "exported 7 items" "and the export is written"
printf 'typed pass\n' >"$T/typed-pass"
init_store --store "$T/h.db"
expect_exit 0 "the typed passphrase opens the backup" kc import "$T/typed.kcb" --store "$T/h.db" $P --backup-passphrase-file "$T/typed-pass"
typed 'one' 'two' "'$KEYCHAINFS_BIN' export '$T/differ.kcb' --store '$A' $P --scrypt-log-n 10"
expect_contains "$OUT" "the two backup passphrases differ" "two different passphrases are refused"
[ ! -e "$T/differ.kcb" ] && pass "and no file is written" || fail "and no file is written"

if [ -c /dev/fuse ] && have fusermount3; then
    . "$(dirname "$0")/mount_lib.sh"
    echo "== through a mount's daemon"
    init_store
    kc add-generic-password $P -s github -a alice -w mounted
    expect_exit 0 "mount" mount_kc "$MP"
    expect_exit 0 "import while mounted, without the store's passphrase" kc import "$T/a.kcb" $BI
    expect_contains "$OUT" "imported 6 items from $T/a.kcb; skipped 1" "the daemon skips the existing item"
    expect_eq "web" "$(cat "$MP/internet/example.com/8443/api/v1/carol")" "imported items show in the mount at once"
    expect_eq "mounted" "$(cat "$MP/github/alice")" "the skipped item keeps its value in the mount"
    expect_exit 0 "import -U while mounted" kc import -U "$T/a.kcb" $BI
    expect_eq "s3cret" "$(cat "$MP/github/alice")" "the overwritten item shows its new value in the mount"
    mkdir -p "$MP/device" && sh -c "printf 'mine' > '$MP/device/local'"
    setfattr -n user.keychain.accessible -v always-this-device-only "$MP/device/local"
    expect_exit 0 "export while mounted" kc export "$T/m.kcb" $B
    expect_contains "$OUT" "exported 7 items" "the daemon's export has every exportable item"
    expect_contains "$OUT" "left out 1 this-device-only item:" "and leaves out the this-device-only one"
    init_store --store "$T/g.db"
    kc import "$T/m.kcb" --store "$T/g.db" $P $BI >/dev/null
    dump "$T/g.db" >"$T/g.dump"
    cmp -s "$T/b.dump" "$T/g.dump" && pass "an export through the daemon imports to the same items" \
        || fail "an export through the daemon imports to the same items" "$(diff "$T/b.dump" "$T/g.dump" | head)"
    if command -v gcc >/dev/null 2>&1 && gcc -O2 -o "$T/mkbackup" "$REPO/scripts/bench-tools/mkbackup.c" -lcrypto 2>"$ERR"; then
        # Several pages and batches each way, from a file that scripts/bench's generator writes.
        "$T/mkbackup" "$T/many.kcb" 5000 "$BACKUP_PASS"
        expect_exit 0 "import 5,000 generated items through the daemon" kc import "$T/many.kcb" $BI
        expect_eq "0123456789abcdef0123456789abcdef" "$(cat "$MP/bench/item0004999")" "the last generated item reads in the mount"
        expect_exit 0 "export them through the daemon" kc export "$T/many-out.kcb" $B
        expect_contains "$OUT" "exported 5007 items" "every page came back"
        init_store --store "$T/many.db"
        kc import "$T/many-out.kcb" --store "$T/many.db" $P $BI >/dev/null
        expect_exit 0 "verify the store they went to" kc verify --store "$T/many.db" $P
        expect_contains "$OUT" "checked 5007 items, 0 failed" "all 5,007 items arrived intact"
        # Without a daemon, into an empty store, the import is one transaction; into a store
        # with items it commits 50,000 items at a time: two transactions here.
        "$T/mkbackup" "$T/60k.kcb" 60000 "$BACKUP_PASS" 3
        init_store --store "$T/60k.db"
        expect_exit 0 "import 60,000 generated items without a daemon" kc import "$T/60k.kcb" --store "$T/60k.db" $P $BI
        expect_contains "$OUT" "imported 60000 items from $T/60k.kcb" "import counts every item"
        expect_eq "0123456789abcdef0123456789abcdef" \
            "$(kc find-generic-password --store "$T/60k.db" $P -s svc2 -a item0059999 -w)" "the last item is found"
        expect_exit 0 "import the same file again" kc import "$T/60k.kcb" --store "$T/60k.db" $P $BI
        expect_contains "$OUT" "imported 0 items from $T/60k.kcb; skipped 60000 that exist already" "every item of both transactions is skipped"
        expect_exit 0 "verify the 60,000" kc verify --store "$T/60k.db" $P
        expect_contains "$OUT" "checked 60000 items, 0 failed" "all 60,000 verify"
        expect_exit 0 "the 60,000 are listed" kc dump-keychain --store "$T/60k.db" $P
        expect_eq "20000" "$(grep -cx 'service: svc1' "$OUT")" "a directory of the imported store lists all its items"
        # Killed part way (its rows already spilling into the WAL), an import into an empty
        # store leaves it empty and usable, and the same import then runs to its end.
        "$T/mkbackup" "$T/200k.kcb" 200000 "$BACKUP_PASS" 3
        init_store --store "$T/killed.db"
        "$KEYCHAINFS_BIN" import "$T/200k.kcb" --store "$T/killed.db" $P $BI >/dev/null 2>&1 &
        importer=$!
        waited=0
        while [ "$(stat -c %s "$T/killed.db-wal" 2>/dev/null || echo 0)" -lt 4000000 ] && [ $waited -lt 1200 ] \
            && kill -0 $importer 2>/dev/null; do
            sleep 0.1; waited=$((waited + 1))
        done
        if kill -9 $importer 2>/dev/null; then pass "the import is killed part way"; else fail "the import is killed part way" "it had ended"; fi
        wait $importer 2>/dev/null
        expect_exit 0 "verify the store after the kill" kc verify --store "$T/killed.db" $P
        expect_contains "$OUT" "checked 0 items, 0 failed" "a killed import into an empty store leaves it empty"
        expect_exit 0 "import the same file again" kc import "$T/200k.kcb" --store "$T/killed.db" $P $BI
        expect_contains "$OUT" "imported 200000 items from $T/200k.kcb" "the import runs to its end"
        expect_exit 0 "verify the 200,000" kc verify --store "$T/killed.db" $P
        expect_contains "$OUT" "checked 200000 items, 0 failed" "all 200,000 verify"
        rm -f "$T/200k.kcb" "$T/killed.db"*
    else
        fail "build scripts/bench-tools/mkbackup.c (gcc and libssl-dev come from scripts/install-deps)"
    fi
    echo "== git's extras go with their items, through the daemon"
    GIT_HELPER=$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs
    git_cred() { printf '%s\n' "$@" | "$GIT_HELPER" "$ACTION"; }
    ACTION=store git_cred protocol=https host=git.example.org username=gituser password=gitpass \
        password_expiry_utc=1900000000 oauth_refresh_token=refresh-tok-5512
    expect_exit 0 "export with a git credential" kc export "$T/git.kcb" $B
    if grep -a -q "refresh-tok-5512" "$T/git.kcb"; then fail "the refresh token is not in the file in the clear"; else pass "the refresh token is not in the file in the clear"; fi
    ACTION=erase git_cred protocol=https host=git.example.org username=gituser
    expect_eq "" "$(ACTION=get git_cred protocol=https host=git.example.org username=gituser)" "the credential is gone"
    expect_exit 0 "import it back through the daemon" kc import "$T/git.kcb" $BI
    got=$(ACTION=get git_cred protocol=https host=git.example.org username=gituser)
    expect_contains "$got" "password=gitpass" "git gets the imported password"
    expect_contains "$got" "password_expiry_utc=1900000000" "and its expiry"
    expect_contains "$got" "oauth_refresh_token=refresh-tok-5512" "and its refresh token"
    init_store --store "$T/git.db"
    expect_exit 0 "import into a store that is not mounted" kc import "$T/git.kcb" --store "$T/git.db" $P $BI
    expect_exit 0 "export it again from there" kc export "$T/git2.kcb" --store "$T/git.db" $P $B
    ACTION=erase git_cred protocol=https host=git.example.org username=gituser
    expect_exit 0 "and import that through the daemon" kc import "$T/git2.kcb" $BI
    expect_contains "$(ACTION=get git_cred protocol=https host=git.example.org username=gituser)" \
        "oauth_refresh_token=refresh-tok-5512" "the extras survive the store opened in-process both ways"

    kc lock
    expect_exit 36 "export while locked: 36" kc export "$T/locked.kcb" $B
    [ ! -e "$T/locked.kcb" ] && pass "a locked export writes no file" || fail "a locked export writes no file"
    kc delete-generic-password -s github -a alice >/dev/null
    expect_exit 36 "import while locked: 36" kc import "$T/a.kcb" $BI
    expect_exit 44 "a locked import writes nothing" kc find-generic-password -s github -a alice
    kc unlock $P
    kc unmount "$MP"
else
    [ -c /dev/fuse ] || skip "the checks through a daemon" "no /dev/fuse"
fi

finish
