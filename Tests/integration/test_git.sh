#!/bin/sh
# git-credential-keychainfs, fed directly (every behaviour of git's own helper test suite, plus
# the keychain's: no mount, locked, port rule, extras, the tree), then driven by the real git.
# It is silent except when the keychain is not mounted or locked, or a credential to store
# cannot be kept: then one line on stderr.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

GIT_HELPER_BIN=${GIT_HELPER_BIN:-$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs}
if [ ! -x "$GIT_HELPER_BIN" ]; then
    echo "test_git.sh: no helper at $GIT_HELPER_BIN (build first, or set GIT_HELPER_BIN)" >&2
    exit 2
fi

# cred ACTION [LINE...]: runs the helper with ACTION, its stdin the LINEs each ending in a
# newline (none at all for no LINE), stdout to $OUT. Every call must exit 0 and write nothing
# to stderr: each one that does not is a failure of its own, and the rest are counted and
# checked once at the end.
CALLS=0
NOISY=0
cred() {
    action=$1
    shift
    CALLS=$((CALLS + 1))
    if [ $# -gt 0 ]; then printf '%s\n' "$@"; fi | "$GIT_HELPER_BIN" "$action" >"$OUT" 2>"$ERR"
    rc=$?
    if [ $rc -ne 0 ] || [ -s "$ERR" ]; then
        NOISY=$((NOISY + 1))
        fail "helper $action exited $rc (want 0) or wrote to stderr" "input: $*"
        show_output
    fi
    return 0
}

# cred_file ACTION FILE: as cred, with stdin from FILE (for inputs too long for arguments).
cred_file() {
    CALLS=$((CALLS + 1))
    "$GIT_HELPER_BIN" "$1" <"$2" >"$OUT" 2>"$ERR"
    rc=$?
    if [ $rc -ne 0 ] || [ -s "$ERR" ]; then
        NOISY=$((NOISY + 1))
        fail "helper $1 exited $rc (want 0) or wrote to stderr" "input: $2"
        show_output
    fi
    return 0
}

# expect_noted NAME ACTION NEEDLE [LINE...]: the helper, run as cred does, exits 0, prints nothing
# on stdout, and writes exactly one line to stderr, containing NEEDLE (the keychain is locked or
# not mounted, and git shows that line to the user).
expect_noted() {
    name=$1 action=$2 needle=$3
    shift 3
    if [ $# -gt 0 ]; then printf '%s\n' "$@"; fi | "$GIT_HELPER_BIN" "$action" >"$OUT" 2>"$ERR"
    rc=$?
    if [ $rc -eq 0 ] && [ ! -s "$OUT" ] && [ "$(wc -l <"$ERR")" -eq 1 ] && grep -q "$needle" "$ERR"; then
        pass "$name"
    else
        fail "$name" "expected exit 0, no output and one line on stderr with '$needle'; got exit $rc"
        show_output
    fi
}

# expect_get NAME WANT [LINE...]: `get` with LINEs prints exactly WANT (without its final newline).
expect_get() {
    name=$1 want=$2
    shift 2
    cred get "$@"
    expect_eq "$want" "$(cat "$OUT")" "$name"
}

# expect_miss NAME [LINE...]: `get` with LINEs prints nothing at all.
expect_miss() {
    name=$1
    shift
    cred get "$@"
    if [ -s "$OUT" ]; then fail "$name" "expected no output"; show_output; else pass "$name"; fi
}

items() { getfattr --only-values -n user.keychain.items "$MP" 2>/dev/null; }

# A credential for ACCOUNT (and PASSWORD) as git prints it.
creds() { printf 'username=%s\npassword=%s' "$1" "$2"; }

echo "== no mount running"
expect_noted "no store: get prints nothing and says it is not mounted" get "the keychain is not mounted, so git has to ask" \
    protocol=https host=example.com username=alice
expect_contains "$ERR" "run 'keychainfs mount" "the line says what to run"
expect_noted "no store: store says nothing was saved" store "not mounted, so the credential was not saved" \
    protocol=https host=example.com username=alice password=pw-nostore
expect_noted "no store: erase says nothing was erased" erase "not mounted, so the credential was not erased" \
    protocol=https host=example.com
expect_exit 1 "no store: store created no store file" test -e "$KEYCHAINFS_STORE"
cred get protocol=gopher host=example.com
cred store protocol=https host=example.com username=alice
cred erase host=example.com
cred frobnicate protocol=https host=example.com
expect_eq "" "$(cat "$OUT")" "not mounted, but requests it would not serve anyway: silent"
init_store
kc add-internet-password -s keep.example -a kept -w kept-pw --passphrase-file "$PASSFILE" >/dev/null
expect_noted "store not mounted: get prints nothing" get "not mounted" protocol=https host=keep.example username=kept
expect_noted "store not mounted: store" store "not mounted" protocol=https host=example.com username=bob password=pw-unmounted
expect_noted "store not mounted: erase" erase "not mounted" protocol=https host=keep.example
expect_noted "store not mounted: erase with a password" erase "not mounted" \
    protocol=https host=keep.example username=kept password=kept-pw
expect_exit 0 "mount" mount_kc "$MP"
expect_eq "1" "$(items)" "nothing was stored without a mount"
expect_get "nothing was erased without a mount" "$(creds kept kept-pw)" protocol=https host=keep.example
expect_miss "get with no match prints nothing" protocol=https host=example.com
cred erase protocol=https host=keep.example

echo "== store and get"
cred store protocol=https host=example.com username=store-user password=store-pass
expect_eq "" "$(cat "$OUT")" "store prints nothing"
expect_get "store then get returns username and password" "$(creds store-user store-pass)" \
    protocol=https host=example.com username=store-user
expect_get "get without a username returns the stored one" "$(creds store-user store-pass)" \
    protocol=https host=example.com
expect_get "an empty path matches a credential stored without one" "$(creds store-user store-pass)" \
    protocol=https host=example.com path=
expect_miss "a different protocol misses" protocol=http host=example.com
expect_miss "a different host misses" protocol=https host=other.tld
expect_miss "a host that only shares a suffix misses" protocol=https host=ample.com
expect_miss "a different username misses" protocol=https host=example.com username=other
expect_miss "a username differing in case misses" protocol=https host=example.com username=Store-User
cred store protocol=http host=path.tld path=foo.git username=user password=pass
expect_get "get with the stored path returns it" "$(creds user pass)" protocol=http host=path.tld path=foo.git
expect_get "get without a path returns it" "$(creds user pass)" protocol=http host=path.tld
expect_miss "a different path misses" protocol=http host=path.tld path=bar.git
expect_miss "a longer path misses" protocol=http host=path.tld path=foo.git/more
expect_miss "the empty path misses a stored path" protocol=http host=path.tld path=
expect_eq "pass" "$(cat "$MP/internet/path.tld/80/foo.git/user")" "the path is a directory in the tree"

echo "== overwrite"
n=$(items)
cred store protocol=https host=example.com username=store-user password=new-pass
expect_get "the same key overwrites on store" "$(creds store-user new-pass)" protocol=https host=example.com
expect_eq "$n" "$(items)" "the overwrite made no second item"

echo "== erase"
cred store protocol=https host=example.com username=user1 password=pass1
cred store protocol=https host=example.com username=user2 password=pass2
cred store protocol=https host=example.com:8443 username=user1 password=pass-port
cred store protocol=https host=example.org username=user1 password=pass-org
cred store protocol=http host=example.com username=user1 password=pass-http
expect_get "two users on one host: the first" "$(creds user1 pass1)" protocol=https host=example.com username=user1
expect_get "two users on one host: the second" "$(creds user2 pass2)" protocol=https host=example.com username=user2
cred erase protocol=https host=example.com username=user1
expect_eq "" "$(cat "$OUT")" "erase prints nothing"
expect_miss "erase with a username forgets that user" protocol=https host=example.com username=user1
expect_get "and keeps the other user" "$(creds user2 pass2)" protocol=https host=example.com username=user2
expect_get "and keeps the same user on another port" "$(creds user1 pass-port)" \
    protocol=https host=example.com:8443 username=user1
cred erase protocol=https host=example.com username=user2 password=wrong
expect_get "erase with a different password removes nothing" "$(creds user2 pass2)" \
    protocol=https host=example.com username=user2
cred erase protocol=https host=example.com password=wrong
expect_get "erase with a different password and no username removes nothing" "$(creds user2 pass2)" \
    protocol=https host=example.com username=user2
cred store protocol=https host=example.com username=user3 password=pass3
cred erase protocol=https host=example.com password=pass2
expect_miss "erase with a password removes the credential holding it" protocol=https host=example.com username=user2
expect_get "and only that one" "$(creds user3 pass3)" protocol=https host=example.com username=user3
cred store protocol=https host=example.com username=user1 password=pass1
cred erase protocol=https host=example.com
expect_miss "erase with protocol and host removes every credential on that host" protocol=https host=example.com
expect_get "it keeps the same host on another port" "$(creds user1 pass-port)" protocol=https host=example.com:8443
expect_get "it keeps another host" "$(creds user1 pass-org)" protocol=https host=example.org
expect_get "it keeps another protocol" "$(creds user1 pass-http)" protocol=http host=example.com
cred erase protocol=https host=nothing.example
expect_eq "" "$(cat "$OUT")" "erasing what is not there is silent"
n=$(items)
cred erase host=example.org
cred erase protocol=https
cred erase
expect_eq "$n" "$(items)" "erase without protocol or host removes nothing"

echo "== empty username and password"
cred store protocol=https host=sso.tld username= password=
expect_get "an empty username and password come back as username= / password=" "$(creds '' '')" \
    protocol=https host=sso.tld
expect_get "and with an explicit empty username" "$(creds '' '')" protocol=https host=sso.tld username=
expect_miss "an empty username does not match another" protocol=https host=sso.tld username=someone
cred store protocol=https host=sso.tld username= password=sso-pass
expect_get "an empty username with a password" "$(creds '' sso-pass)" protocol=https host=sso.tld
expect_eq "sso-pass" "$(cat "$MP/internet/sso.tld/443/%")" "the empty account is a lone % in the tree"
cred erase protocol=https host=sso.tld username=
expect_miss "erase with an empty username" protocol=https host=sso.tld
n=$(items)
cred store protocol=https host=nouser.tld password=p
cred store protocol=https host=nopass.tld username=u
expect_eq "$n" "$(items)" "store without a username or without a password stores nothing"

echo "== long lines"
cred store protocol=https host=victim.example.com username=user password=to-be-stolen
# As git's t/lib-credential.sh: "host=" starts right at a buffer boundary (23 bytes are
# "wwwauth[]=basic realm=" plus git's NUL), for git's 1024 and a few other common sizes.
for buf in 1024 4096 8192 65536; do
    long=$(printf "%0$((buf - 23))d" 0 | tr 0 a)
    expect_miss "a $buf-byte wwwauth[] line cannot smuggle a host=" \
        protocol=https host=badguy.example.com "wwwauth[]=basic realm=${long}host=victim.example.com"
done
long=$(printf '%01001d' 0 | tr 0 a)
expect_get "a host= line after a 1,000+ byte line is read" "$(creds user to-be-stolen)" \
    "wwwauth[]=basic realm=${long}" protocol=https host=victim.example.com
{
    printf 'protocol=https\nhost=badguy.example.com\nwwwauth[]=basic realm='
    head -c 100000 /dev/zero | tr '\0' a
    printf 'host=victim.example.com\n'
} >"$TEST_ROOT/long100k"
cred_file get "$TEST_ROOT/long100k"
expect_eq "" "$(cat "$OUT")" "a 100,000-byte wwwauth[] line cannot smuggle a host="
{
    printf 'wwwauth[]=basic realm='
    head -c 100000 /dev/zero | tr '\0' a
    printf '\nprotocol=https\nhost=victim.example.com\n'
} >"$TEST_ROOT/long100k-then-host"
cred_file get "$TEST_ROOT/long100k-then-host"
expect_eq "$(creds user to-be-stolen)" "$(cat "$OUT")" "lines after a 100,000-byte line are read"
{
    printf 'protocol=https\nhost=long.example\nusername=u\npassword='
    head -c 100000 /dev/zero | tr '\0' p
    printf '\n'
} >"$TEST_ROOT/longpass"
cred_file store "$TEST_ROOT/longpass"
expect_eq "100000" "$(stat -c %s "$MP/internet/long.example/443/u")" "a 100,000-byte password is stored whole"
cred get protocol=https host=long.example
expect_eq "100021" "$(wc -c <"$OUT" | tr -d ' ')" "and comes back whole"
{
    printf 'protocol=https\nhost=huge.example\nusername=u\npassword='
    head -c $((17 * 1024 * 1024)) /dev/zero | tr '\0' p
    printf '\n'
} >"$TEST_ROOT/hugepass"
"$GIT_HELPER_BIN" store <"$TEST_ROOT/hugepass" >"$OUT" 2>"$ERR"
expect_eq "0" "$?" "a request over the size of a secret: exit 0"
expect_contains "$ERR" "the request was not read: it is 17825846 bytes" "and one line saying why"
expect_exit 1 "nothing was stored" test -e "$MP/internet/huge.example"
{
    printf 'protocol=https\nhost=huge.example\nusername=u\npassword='
    head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' p
    printf '\n'
} >"$TEST_ROOT/hugepass"
"$GIT_HELPER_BIN" store <"$TEST_ROOT/hugepass" >"$OUT" 2>"$ERR"
expect_contains "$ERR" "the credential was not saved: the password is 16777217 bytes" \
    "a password one byte over 16 MiB, in a request the helper reads: one line saying why"
expect_exit 1 "and nothing was stored" test -e "$MP/internet/huge.example"
for bad in "protocol=https host=badport.example:99999|port '99999' is not a number from 1 to 65535" \
           "protocol=gopher host=badport.example|protocol 'gopher' is not supported"; do
    printf '%s\nusername=u\npassword=p\n\n' "$(printf '%s' "${bad%%|*}" | tr ' ' '\n')" | "$GIT_HELPER_BIN" store >"$OUT" 2>"$ERR"
    expect_contains "$ERR" "the credential was not saved: ${bad#*|}" "store of a credential it cannot keep (${bad%%|*}): one line saying why"
done
expect_exit 1 "and nothing was stored" test -e "$MP/internet/badport.example"

echo "== unknown keys and actions"
cred store protocol=https host=unknown.example username=u password=p
n=$(items)
expect_get "unknown keys are ignored on get" "$(creds u p)" \
    protocol=https host=unknown.example frob=nicate "capability[]=authtype" "state[]=x" ephemeral=1
cred store protocol=https host=unknown.example username=u password=p2 frob=nicate "wwwauth[]=basic"
expect_get "unknown keys are ignored on store" "$(creds u p2)" protocol=https host=unknown.example
cred frobnicate protocol=https host=unknown.example username=u password=p3
expect_eq "" "$(cat "$OUT")" "an unknown action prints nothing"
cred frobnicate protocol=https host=unknown.example
expect_get "an unknown action changes nothing" "$(creds u p2)" protocol=https host=unknown.example
expect_eq "$n" "$(items)" "an unknown action adds nothing"
CALLS=$((CALLS + 1))
"$GIT_HELPER_BIN" </dev/null >"$OUT" 2>"$ERR"
rc=$?
[ $rc -eq 0 ] && [ ! -s "$OUT" ] && [ ! -s "$ERR" ] && pass "no action at all: silent, exit 0" ||
    { NOISY=$((NOISY + 1)); fail "no action at all: silent, exit 0" "exit $rc"; show_output; }
expect_miss "a malformed line (no =) answers nothing" protocol=https host=unknown.example garbage
expect_miss "an unsupported protocol answers nothing" protocol=gopher host=unknown.example
expect_miss "a bad port answers nothing" protocol=https host=unknown.example:99999
expect_miss "nothing after an empty line is read" protocol=https "" host=unknown.example
expect_get "CRLF line ends are accepted" "$(creds u p2)" "protocol=https$(printf '\r')" "host=unknown.example$(printf '\r')"

echo "== port rule"
cred store protocol=https host=port.example:8443 username=u password=on-8443
expect_get "a credential stored for host:8443 is returned for host:8443" "$(creds u on-8443)" \
    protocol=https host=port.example:8443
expect_miss "and not for the default port" protocol=https host=port.example
expect_miss "nor for another port" protocol=https host=port.example:8444
expect_eq "on-8443" "$(cat "$MP/internet/port.example/8443/u")" "it sits in the 8443 directory"
cred store protocol=https host=default.example username=u password=on-default
expect_miss "a credential stored for the default port is not returned for host:8443" \
    protocol=https host=default.example:8443
expect_get "but for the host alone" "$(creds u on-default)" protocol=https host=default.example
cred erase protocol=https host=port.example
expect_get "erase on the default port keeps host:8443" "$(creds u on-8443)" protocol=https host=port.example:8443
cred store protocol=https "host=[::1]:8443" username=v6 password=pw-v6
expect_get "bracketed IPv6 with a port" "$(creds v6 pw-v6)" protocol=https "host=[::1]:8443"
expect_miss "bracketed IPv6 without the port misses" protocol=https "host=[::1]"
expect_eq "pw-v6" "$(kc find-internet-password -s ::1 -P 8443 -a v6 -w)" "the server is the bare address"
cred store protocol=https "host=[fe80::1]" username=v6 password=pw-v6-default
expect_get "bracketed IPv6 without a port" "$(creds v6 pw-v6-default)" protocol=https "host=[fe80::1]"
expect_eq "pw-v6-default" "$(cat "$MP/internet/fe80::1/443/v6")" "it sits in the well-known port's directory"
cred erase protocol=https "host=[::1]:8443" username=v6
expect_miss "erase with bracketed IPv6" protocol=https "host=[::1]:8443"

echo "== password_expiry_utc and oauth_refresh_token"
cred store protocol=https host=example.com username=user-expiry password=pass password_expiry_utc=9999999999
expect_get "password_expiry_utc is kept and returned" "$(creds user-expiry pass)
password_expiry_utc=9999999999" protocol=https host=example.com username=user-expiry
cred store protocol=https host=example.com username=user-oauth password=pass oauth_refresh_token=xyzzy
expect_get "oauth_refresh_token is kept and returned" "$(creds user-oauth pass)
oauth_refresh_token=xyzzy" protocol=https host=example.com username=user-oauth
cred store protocol=https host=example.com username=user-both password=pass \
    oauth_refresh_token=tok password_expiry_utc=1700000000
expect_get "both are kept and returned" "$(creds user-both pass)
password_expiry_utc=1700000000
oauth_refresh_token=tok" protocol=https host=example.com username=user-both
cred store protocol=https host=example.com username=user-both password=pass2
expect_get "a store without them drops them" "$(creds user-both pass2)" \
    protocol=https host=example.com username=user-both
cred store protocol=https host=example.com username=user-tok password=pass \
    oauth_refresh_token=sekret-refresh password_expiry_utc=1900000000
TOK="$MP/internet/example.com/443/user-tok"
expect_not_contains "$(getfattr -d -m - "$TOK" 2>/dev/null)" "sekret-refresh" "the refresh token is no attribute getfattr shows"
expect_not_contains "$(kc find-internet-password -s example.com -a user-tok 2>&1)" "1900000000" \
    "find-internet-password's attributes do not show the extras"
kc lock "$MP" >/dev/null
expect_not_contains "$(getfattr -d -m - "$TOK" 2>/dev/null; kc find-internet-password -s example.com -a user-tok 2>&1)" \
    "sekret-refresh" "nor does anything while locked"
kc unlock "$MP" --passphrase-file "$PASSFILE" >/dev/null
expect_exit 1 "the store's files do not hold them in the clear" grep -a -q "sekret-refresh" "$KEYCHAINFS_STORE"
sed -i 's/pass/pass3/' "$TOK"
expect_get "a save through a temporary file keeps them" "$(creds user-tok pass3)
password_expiry_utc=1900000000
oauth_refresh_token=sekret-refresh" protocol=https host=example.com username=user-tok
cred erase protocol=https host=example.com

echo "== the helper's memory"
# No loader: one binding a symbol lazily saved the vector registers, a password's bytes among
# them, on the stack.
readelf -lW "$GIT_HELPER_BIN" | grep -q "Requesting program interpreter" \
    && fail "the git helper is a static executable" || pass "the git helper is a static executable"
# With no HOME, a static program finds its home in /etc/passwd itself: glibc's getpwuid loaded
# the NSS module that nsswitch.conf names after files (systemd's here, and with it a second
# libc) and crashed, for a user only that module knows (a DynamicUser service, uid 4321 here).
if [ "$(id -u)" -eq 0 ] && ! getent passwd 4321 >/dev/null; then
    printf 'protocol=https\nhost=nss.example\n\n' |
        setpriv --reuid 4321 --regid 4321 --clear-groups env -i PATH=/usr/bin:/bin "$GIT_HELPER_BIN" get >"$OUT" 2>"$ERR"
    expect_eq 0 $? "the helper as a user with no passwd entry and no HOME (it crashed)"
    expect_contains "$ERR" "not mounted" "and says the keychain is not mounted"
else
    skip "the helper as a user with no passwd entry" "needs root and a free uid 4321"
fi
# The password and the refresh token, caught in the helper while it waits (client_memory.py):
# never in memory that is not locked, as they were when read into an ordinary array and a String.
if [ "$(id -u)" -eq 0 ]; then
    printf 'protocol=https\nhost=mem.example\nusername=m\npassword=%s\noauth_refresh_token=%s\n' \
        "pw-MEMSCAN-7f3a" "tok-MEMSCAN-c91e" >"$TEST_ROOT/memreq"
    python3 "$TESTS_DIR/client_memory.py" "store" "$(daemon_pid "$MP")" "$TESTS_DIR/memscan.py" \
        --feed "$TEST_ROOT/memreq" "pw=pw-MEMSCAN-7f3a" "tok=tok-MEMSCAN-c91e" -- "$GIT_HELPER_BIN" store >"$OUT" 2>"$ERR"
    report_checks "$OUT" "store: the helper's memory" $?
    # And after it sent the store request, the password in it, waiting for the answer.
    python3 "$TESTS_DIR/client_memory.py" "store, its request sent" "$(daemon_pid "$MP")" "$TESTS_DIR/memscan.py" \
        --feed-sent "$TEST_ROOT/memreq" "pw=pw-MEMSCAN-7f3a" "tok=tok-MEMSCAN-c91e" -- "$GIT_HELPER_BIN" store >"$OUT" 2>"$ERR"
    report_checks "$OUT" "store, its request sent: the helper's memory" $?
    printf 'protocol=https\nhost=mem.example\nusername=m\n' >"$TEST_ROOT/memget"
    python3 "$TESTS_DIR/client_memory.py" "get" "$(daemon_pid "$MP")" "$TESTS_DIR/memscan.py" \
        --block 1 "pw=pw-MEMSCAN-7f3a" "tok=tok-MEMSCAN-c91e" -- sh -c 'exec "$0" get <"$1"' "$GIT_HELPER_BIN" "$TEST_ROOT/memget" \
        >"$OUT" 2>"$ERR"
    report_checks "$OUT" "get: the helper's memory" $?
    cred erase protocol=https host=mem.example
else
    skip "the helper's memory" "scanning a non-dumpable process needs root"
fi

echo "== visible in the tree"
cred store protocol=https host=github.com username=alice password=gh-s3cret
expect_eq "gh-s3cret|" "$(cat "$MP/internet/github.com/443/alice"; printf '|')" \
    "cat internet/github.com/443/alice prints the password exactly, no newline"
expect_eq "gh-s3cret|" "$(kc find-internet-password -s github.com -a alice -w; printf '|')" \
    "find-internet-password -s github.com -a alice -w prints it"
expect_eq "https" "$(getfattr --only-values -n user.keychain.protocol "$MP/internet/github.com/443/alice" 2>/dev/null)" \
    "its protocol attribute is https"
mkdir -p "$MP/internet/tree.example/443"
sh -c "printf 'from-tree' > '$MP/internet/tree.example/443/carol'"
expect_get "an item written in the tree is served to git" "$(creds carol from-tree)" protocol=https host=tree.example
sh -c "printf 'edited' > '$MP/internet/github.com/443/alice'"
expect_get "an edit in the tree shows in the helper at once" "$(creds alice edited)" protocol=https host=github.com
rm "$MP/internet/tree.example/443/carol"
expect_miss "an rm in the tree shows too" protocol=https host=tree.example
cred store protocol=https host=git.example path=org/repo.git username=dave password=with-path
expect_eq "with-path" "$(cat "$MP/internet/git.example/443/org/repo.git/dave")" "a path becomes directories"
cred erase protocol=https host=github.com username=alice
expect_exit 1 "an erase removes the file" test -e "$MP/internet/github.com/443/alice"
expect_exit 0 "KEYCHAINFS_STORE unset: the default store (the same one here) is used" \
    env -u KEYCHAINFS_STORE sh -c 'printf "protocol=https\nhost=git.example\n" | "$0" get | grep -qx password=with-path' \
    "$GIT_HELPER_BIN"
kc init --store "$TEST_ROOT/other.db" --scrypt-log-n 10 --passphrase-file "$PASSFILE" >/dev/null
KEYCHAINFS_STORE="$TEST_ROOT/other.db" expect_noted "KEYCHAINFS_STORE naming an unmounted store: get answers nothing" \
    get "not mounted" protocol=https host=git.example
# A store path that is not UTF-8 would be decoded to another path, another store's.
KEYCHAINFS_STORE="$(printf '%s/other\377.db' "$TEST_ROOT")" expect_noted "KEYCHAINFS_STORE that is not UTF-8: get answers nothing, and says why" \
    get "KEYCHAINFS_STORE is not UTF-8" protocol=https host=git.example

echo "== locked"
cred store protocol=https host=lock.example username=u password=before-lock
kc add-internet-password -s lock.example -a always -w always-pw --accessible always >/dev/null
n=$(items)
expect_exit 0 "keychainfs lock" kc lock "$MP"
expect_noted "locked: get answers nothing and says the keychain is locked" get \
    "the keychain is locked, so git has to ask for the credential; run 'keychainfs unlock'" \
    protocol=https host=lock.example username=u
expect_noted "locked: not even an always item" get "locked" protocol=https host=lock.example username=always
expect_noted "locked: store" store "locked, so the credential was not saved" \
    protocol=https host=lock.example username=u password=while-locked
expect_noted "locked: store of a new one" store "locked" protocol=https host=lock.example username=new password=while-locked
expect_noted "locked: store of an always item" store "locked" \
    protocol=https host=lock.example username=always password=while-locked
expect_noted "locked: erase with a password" erase "locked, so the credential was not erased" \
    protocol=https host=lock.example username=u password=before-lock
expect_noted "locked: erase of a host" erase "locked" protocol=https host=lock.example
expect_noted "locked: erase of an always item" erase "locked" protocol=https host=lock.example username=always
cred get protocol=https host=lock.example garbage
expect_eq "" "$(cat "$OUT")" "locked, but a malformed request: silent"
expect_eq "locked" "$(state "$MP")" "still locked"
expect_exit 0 "keychainfs unlock" kc unlock "$MP" --passphrase-file "$PASSFILE"
expect_eq "$n" "$(items)" "locked: store and erase added and removed nothing"
expect_get "locked: store changed nothing" "$(creds u before-lock)" protocol=https host=lock.example username=u
expect_get "locked: erase removed nothing" "$(creds always always-pw)" \
    protocol=https host=lock.example username=always

echo "== the real git"
GITBIN_DIR=$(dirname "$GIT_HELPER_BIN")
gitc() {
    env -u XDG_CONFIG_HOME -u GIT_CONFIG_GLOBAL -u GIT_CONFIG_PARAMETERS -u GIT_CONFIG_COUNT \
        -u GIT_ASKPASS -u SSH_ASKPASS -u GIT_DIR \
        PATH="$GITBIN_DIR:$PATH" GIT_TERMINAL_PROMPT=0 GIT_CONFIG_NOSYSTEM=1 git "$@"
}
printf 'protocol=https\nhost=git-e2e.example\nusername=erin\npassword=e2e-pass\n' |
    expect_exit 0 "git credential approve" gitc -c credential.helper=keychainfs credential approve
expect_eq "e2e-pass" "$(kc find-internet-password -s git-e2e.example -a erin -w)" "approve stored it"
printf 'protocol=https\nhost=git-e2e.example\n' |
    expect_exit 0 "git credential fill" gitc -c credential.helper=keychainfs credential fill
expect_eq "protocol=https
host=git-e2e.example
username=erin
password=e2e-pass" "$(cat "$OUT")" "fill returns the stored credential"
expect_eq "" "$(cat "$ERR")" "fill wrote nothing to stderr"
printf 'url=https://erin@git-e2e.example/some/repo.git\n' |
    expect_exit 0 "git credential fill with a url" gitc -c credential.helper=keychainfs credential fill
expect_contains "$OUT" "password=e2e-pass" "a url with the username finds it"
printf 'url=https://git-e2e.example:8443/\n' |
    expect_exit 128 "git credential fill on another port fails (no prompting)" \
    gitc -c credential.helper=keychainfs credential fill
expect_contains "$ERR" "terminal prompts disabled" "git reports it could not prompt"
printf 'protocol=https\nhost=git-e2e.example\nusername=erin\npassword=e2e-pass\n' |
    expect_exit 0 "git credential reject" gitc -c credential.helper=keychainfs credential reject
expect_exit 44 "reject removed it" kc find-internet-password -s git-e2e.example -a erin
printf 'protocol=https\nhost=git-e2e.example\n' |
    expect_exit 128 "fill then fails, since prompting is disabled" gitc -c credential.helper=keychainfs credential fill
expect_not_contains "$OUT" "password=" "and prints no password"
expect_exit 0 "git config --global credential.helper keychainfs" gitc config --global credential.helper keychainfs
expect_contains "$HOME/.gitconfig" "helper = keychainfs" "it went to the test HOME"
printf 'protocol=https\nhost=github.com\nusername=frank\npassword=readme-pass\n' |
    expect_exit 0 "the README set-up: git credential approve" gitc credential approve
printf 'url=https://github.com\n' | expect_exit 0 "the README set-up: git credential fill" gitc credential fill
expect_eq "protocol=https
host=github.com
username=frank
password=readme-pass" "$(cat "$OUT")" "the README set-up returns the stored credential"
expect_eq "readme-pass" "$(cat "$MP/internet/github.com/443/frank")" "and git's credential is in the tree"
printf 'protocol=https\nhost=github.com\nusername=frank\npassword=readme-pass\n' |
    expect_exit 0 "git credential reject, configured globally" gitc credential reject
expect_exit 1 "and it is gone from the tree" test -e "$MP/internet/github.com/443/frank"
printf 'protocol=https\nhost=github.com\nusername=frank\npassword=readme-pass\n' | gitc credential approve >/dev/null 2>&1
expect_exit 0 "lock, for git" kc lock "$MP"
printf 'url=https://github.com\n' |
    expect_exit 128 "locked: git credential fill fails (no prompting)" gitc credential fill
expect_contains "$ERR" "git-credential-keychainfs: the keychain is locked" "git shows the helper's line"
expect_contains "$ERR" "keychainfs unlock" "which says what to run"
expect_exit 0 "unlock again" kc unlock "$MP" --passphrase-file "$PASSFILE"
printf 'url=https://github.com\n' | expect_exit 0 "unlocked: fill works again" gitc credential fill
expect_eq "" "$(cat "$ERR")" "and the helper is silent again"

echo "== a killed daemon"
pid=$(daemon_pid "$MP")
kill -9 "$pid"
wait_gone "$pid"
expect_noted "a killed daemon: get answers nothing, says not mounted" get "not mounted" protocol=https host=git.example
expect_noted "a killed daemon: store" store "not mounted" protocol=https host=git.example username=z password=z
expect_noted "a killed daemon: erase" erase "not mounted" protocol=https host=git.example

echo "== options"
expect_exit 0 "--help" "$GIT_HELPER_BIN" --help
expect_contains "$OUT" "usage: git-credential-keychainfs get|store|erase" "--help shows the usage"
expect_contains "$OUT" "git config --global credential.helper keychainfs" "--help shows the set-up"
expect_exit 0 "--version" "$GIT_HELPER_BIN" --version
expect_eq "git-credential-keychainfs $("$KEYCHAINFS_BIN" --version)" "$(cat "$OUT")" "--version matches keychainfs's"

echo "== stderr"
if [ "$NOISY" -eq 0 ]; then
    pass "every one of the $CALLS helper calls exited 0 and wrote nothing to stderr"
else
    fail "$NOISY of the $CALLS helper calls failed or wrote to stderr"
fi

finish
