#!/bin/sh
# The control socket and the way commands find the daemon: from the store path alone whatever
# the environment, or a refusal (75) when it cannot be reached; a daemon of another version
# (76); requests validated by the daemon; a server bounded against idle, slow and oversize
# clients; another user's runtime directory; stale mounts after kill -9; and a git helper
# and a keychainfs front that link neither GRDB nor SQLite.
. "$(dirname "$0")/lib.sh"
. "$TESTS_DIR/mount_lib.sh"

GIT_HELPER=${GIT_HELPER_BIN:-$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs}
WIRE="$TESTS_DIR/control_wire.py"
P="--passphrase-file $PASSFILE"
S=$KEYCHAINFS_STORE

echo "== layering: the git helper and the keychainfs front link neither GRDB nor SQLite"
# SQLite is a system library, so ldd sees it whether the Swift runtime is linked in or not;
# GRDB is Swift, linked in either way, so nm sees its symbols. Both are static executables,
# which ldd cannot read: nm sees SQLite's symbols there, defined or not.
KEYCHAINFS_FULL=$(dirname "$KEYCHAINFS_BIN")/keychainfs-full
for helper in "$GIT_HELPER" "$KEYCHAINFS_BIN"; do
    expect_eq "0" "$(ldd "$helper" 2>/dev/null | grep -c sqlite)" "ldd: $(basename "$helper") loads no SQLite"
    expect_eq "0" "$(nm "$helper" | grep -c ' sqlite3_')" "nm: $(basename "$helper") holds no SQLite symbol"
    expect_eq "0" "$(nm "$helper" | grep -c GRDB)" "nm: $(basename "$helper") holds no GRDB symbol"
done
# The same checks find them in the whole tool, so they can fail.
[ "$(ldd "$KEYCHAINFS_FULL" | grep -c sqlite)" -ge 1 ] && pass "ldd finds SQLite in keychainfs-full" || fail "ldd finds SQLite in keychainfs-full"
[ "$(nm "$KEYCHAINFS_FULL" | grep -c ' sqlite3_')" -ge 1 ] && pass "nm finds SQLite in keychainfs-full" || fail "nm finds SQLite in keychainfs-full"
[ "$(nm "$KEYCHAINFS_FULL" | grep -c GRDB)" -ge 1 ] && pass "nm finds GRDB in keychainfs-full" || fail "nm finds GRDB in keychainfs-full"

init_store
expect_exit 0 "mount" mount_kc "$MP"
pid=$(daemon_pid "$MP")
PROTO=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["protocol"])' "$S.daemon")
mkdir "$MP/github"
printf 'v1' >"$MP/github/alice"

echo "== discovery from the store path alone"
# No passphrase is given and there is no terminal: only the daemon can answer these.
OTHER_RUN="$TEST_ROOT/other-run"
mkdir -m 0700 "$OTHER_RUN"
expect_exit 0 "env -i with --store" env -i "$KEYCHAINFS_BIN" find-generic-password --store "$S" -s github -a alice -w </dev/null
expect_eq "v1" "$(cat "$OUT")" "env -i reads through the daemon"
expect_exit 0 "env -i with KEYCHAINFS_STORE" env -i KEYCHAINFS_STORE="$S" "$KEYCHAINFS_BIN" find-generic-password -s github -a alice -w </dev/null
expect_eq "v1" "$(cat "$OUT")" "env -i with KEYCHAINFS_STORE reads through the daemon"
expect_exit 0 "env -u XDG_RUNTIME_DIR" env -u XDG_RUNTIME_DIR "$KEYCHAINFS_BIN" find-generic-password -s github -a alice -w </dev/null
expect_exit 0 "another XDG_RUNTIME_DIR" env XDG_RUNTIME_DIR="$OTHER_RUN" "$KEYCHAINFS_BIN" find-generic-password -s github -a alice -w </dev/null
expect_exit 0 "no HOME at all" env -i KEYCHAINFS_STORE="$S" HOME=/nonexistent "$KEYCHAINFS_BIN" status </dev/null
expect_contains "$OUT" "mountpoint: $(realpath "$MP")" "status from env -i names the mount"
expect_exit 0 "lock from another XDG_RUNTIME_DIR" env XDG_RUNTIME_DIR="$OTHER_RUN" "$KEYCHAINFS_BIN" lock
expect_eq "locked" "$(state "$MP")" "the mount is locked"
expect_exit 0 "unlock from env -i" env -i KEYCHAINFS_STORE="$S" "$KEYCHAINFS_BIN" unlock $P
expect_eq "unlocked" "$(state "$MP")" "the mount is unlocked"
printf 'protocol=https\nhost=example.com\nusername=git\npassword=gitpw\n' |
    env -i KEYCHAINFS_STORE="$S" "$GIT_HELPER" store
expect_eq "gitpw" "$(cat "$MP/internet/example.com/443/git" 2>&1)" "the git helper from env -i stores through the daemon"
expect_eq "username=git
password=gitpw" "$(printf 'protocol=https\nhost=example.com\n' | env -u XDG_RUNTIME_DIR "$GIT_HELPER" get)" \
    "the git helper without XDG_RUNTIME_DIR gets through the daemon"
[ -z "$(ls -A "$OTHER_RUN")" ] && pass "nothing was written in another runtime directory" || fail "nothing was written in another runtime directory"

echo "== the split brain from the issue goes through the daemon"
expect_exit 0 "add -U from a shell without XDG_RUNTIME_DIR" \
    env -u XDG_RUNTIME_DIR "$KEYCHAINFS_BIN" add-generic-password -U -s github -a alice -w fromcron $P </dev/null
expect_eq "fromcron" "$(cat "$MP/github/alice")" "the mount serves the new value at once"
expect_exit 0 "a new item from a shell without XDG_RUNTIME_DIR" \
    env -u XDG_RUNTIME_DIR "$KEYCHAINFS_BIN" add-generic-password -s github -a newitem -w n $P </dev/null
expect_contains "$(ls "$MP/github")" "newitem" "the mount lists the new item"
expect_exit 0 "and a shell write to it succeeds" sh -c "printf x > '$MP/github/newitem'"
expect_exit 0 "find it" env -u XDG_RUNTIME_DIR "$KEYCHAINFS_BIN" find-generic-password -s github -a newitem -w </dev/null
expect_eq "x" "$(cat "$OUT")" "the write through the mount was kept"

echo "== a daemon that cannot be reached: every command refuses with 75"
mv "$S.sock" "$S.sock.away"
# Every store file, hashed (lib.sh), once the daemon's own work after the creates is done: a
# refused command must leave them as they were.
before=$(store_settled "$S")
expect_exit 75 "find refuses" kc find-generic-password -s github -a alice -w $P
expect_contains "$ERR" "process $pid" "the refusal names the process that holds the store"
expect_eq "1" "$(wc -l <"$ERR")" "in one line"
expect_exit 75 "add -U refuses" env -u XDG_RUNTIME_DIR "$KEYCHAINFS_BIN" add-generic-password -U -s github -a alice -w behind $P
expect_exit 75 "add refuses" kc add-generic-password -s github -a other -w behind $P
expect_exit 75 "delete refuses" kc delete-generic-password -s github -a alice $P
expect_exit 75 "dump refuses" kc dump-keychain -d $P
expect_exit 75 "verify refuses" kc verify $P
expect_exit 75 "passwd refuses" kc passwd $P --new-passphrase-file "$PASSFILE"
expect_exit 75 "lock refuses" kc lock
expect_exit 75 "status refuses" kc status
mkdir -p "$TEST_ROOT/mnt2"
on_exit_unmount "$TEST_ROOT/mnt2"
expect_exit 75 "a second mount refuses" kc mount "$TEST_ROOT/mnt2" $P
printf 'protocol=https\nhost=example.com\nusername=git\npassword=behind\n' | "$GIT_HELPER" store >"$OUT" 2>"$ERR"
expect_eq "0:" "$?:$(cat "$ERR")" "the git helper changes nothing and says nothing"
expect_eq "" "$(printf 'protocol=https\nhost=example.com\n' | "$GIT_HELPER" get 2>&1)" "the git helper answers nothing"
expect_eq "$before" "$(store_sum "$S")" "the store files are unchanged"
mv "$S.sock.away" "$S.sock"
expect_exit 0 "with its socket back the daemon answers again" kc find-generic-password -s github -a alice -w
expect_eq "fromcron" "$(cat "$OUT")" "and nothing was written behind it"
expect_eq "gitpw" "$(cat "$MP/internet/example.com/443/git")" "not by the git helper either"
mv "$S.sock" "$S.sock.away"
expect_exit 0 "unmount detaches the mount of a daemon that does not answer" kc unmount
expect_exit 0 "which ends it" wait_gone "$pid"
expect_exit 32 "nothing is left mounted" mountpoint -q "$MP"
rm -f "$S.sock.away"
expect_exit 0 "mount again" mount_kc "$MP"
pid=$(daemon_pid "$MP")

echo "== a daemon of another version: 76, in one line"
V="$TEST_ROOT/versioned.db"
init_store --store "$V"
python3 "$WIRE" fake-daemon "$V" 99 9.9.9 99 "$TEST_ROOT/fake-ready" &
FAKE=$!
on_exit_kill $FAKE
i=0; while [ ! -f "$TEST_ROOT/fake-ready" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
expect_exit 76 "a record of another protocol" kc find-generic-password --store "$V" -s a $P
expect_eq "keychainfs: the running daemon is version 9.9.9; unmount and mount again" "$(cat "$ERR")" "says so in one line"
expect_exit 76 "status too" kc status --store "$V"
kill $FAKE; wait $FAKE 2>/dev/null
rm -f "$TEST_ROOT/fake-ready"
python3 "$WIRE" fake-daemon "$V" "$PROTO" 0.1.0 99 "$TEST_ROOT/fake-ready" &
FAKE=$!
on_exit_kill $FAKE
i=0; while [ ! -f "$TEST_ROOT/fake-ready" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
expect_exit 76 "frames of another version" kc find-generic-password --store "$V" -s a $P
expect_eq "keychainfs: the running daemon is version 9.9.9 (control protocol 99); unmount and mount again" "$(cat "$ERR")" \
    "the daemon's answer names its version"
expect_eq "" "$(printf 'protocol=https\nhost=x\n' | KEYCHAINFS_STORE="$V" "$GIT_HELPER" get 2>&1)" "the git helper stays silent"
kill $FAKE; wait $FAKE 2>/dev/null
rm -f "$V.daemon" "$V.sock"

echo "== every request is validated by the daemon, as by the CLI and the tree"
save() { python3 "$WIRE" save "$S.sock" "$PROTO" "$1" secret; }
expect_eq "error 7 the service must not be empty" "$(save '{"kind": 1, "service": "", "account": "a"}')" "an empty service: invalid input (65)"
long=$(printf '%0256d' 0)
expect_contains "$(save "{\"kind\": 1, \"service\": \"s\", \"account\": \"$long\"}")" "error 8 " "a name over 255 bytes: too long (66)"
expect_contains "$(save '{"kind": 2, "server": "h", "account": "a", "port": 0, "protocol": "zzzz"}')" "error 7 protocol 'zzzz' has no well-known port" "port 0 without a well-known port: invalid (65)"
expect_contains "$(save '{"kind": 2, "server": "h", "account": "a", "port": 443, "protocol": "h/ps"}')" "error 7 'h/ps' is not a four-character code" "a protocol that is no four-char code: invalid (65)"
expect_contains "$(save '{"kind": 2, "server": "", "account": "a", "port": 443, "protocol": "htps"}')" "error 7 the server must not be empty" "an empty server: invalid (65)"
expect_exit 44 "nothing refused was stored" kc find-generic-password -s s
# NUL is a valid name character (the tree spells it %00), so the daemon takes it like the tree.
expect_eq "kind 0x8001" "$(save '{"kind": 1, "service": "nulsvc", "account": "n\u0000l"}')" "a NUL in a name is saved"
expect_eq "secret" "$(cat "$MP/nulsvc/n%00l")" "and the mount reaches it"

echo "== bounded: idle connections, a slow client, an oversize frame"
python3 "$WIRE" idle "$S.sock" 1500 "$TEST_ROOT/idle-ready" &
IDLE=$!
on_exit_kill $IDLE
i=0; while [ ! -f "$TEST_ROOT/idle-ready" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
[ -f "$TEST_ROOT/idle-ready" ] && pass "1,500 idle connections are open" || fail "1,500 idle connections are open"
start=$(date +%s.%N)
expect_exit 0 "lock gets through past 1,500 idle connections" timeout 10 "$KEYCHAINFS_BIN" lock
took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
awk -v t="$took" 'BEGIN { exit !(t < 5) }' && pass "within a few seconds ($took s)" || fail "within a few seconds ($took s)"
expect_eq "locked" "$(state "$MP")" "locked"
expect_exit 0 "unlock too" timeout 10 "$KEYCHAINFS_BIN" unlock $P
threads=$(awk '/^Threads:/ {print $2}' /proc/"$pid"/status)
[ "$threads" -lt 64 ] && pass "the daemon runs $threads threads, not one per connection" || fail "the daemon runs $threads threads"
kill $IDLE; wait $IDLE 2>/dev/null
kept=$(python3 "$WIRE" slow "$S.sock" "$PROTO")
case $kept in
    open) fail "a client trickling one byte a second is dropped" "still open after 30 s" ;;
    *) awk -v t="$kept" 'BEGIN { exit !(t >= 4 && t <= 8) }' && pass "a client trickling one byte a second is dropped at the 5 s deadline ($kept s)" \
        || fail "a client trickling one byte a second is dropped at the 5 s deadline" "after $kept s" ;;
esac
expect_contains "$(python3 "$WIRE" oversize "$S.sock" "$PROTO")" "over the limit" "an oversize frame is refused from its header"
expect_exit 0 "the daemon still serves" kc find-generic-password -s github -a alice -w

echo "== a socket that cannot sit beside the store is in the runtime directory, and still found"
LONG="$TEST_ROOT/$(printf '%0100d' 0)"
SHARED="$TEST_ROOT/shared"
mkdir -p "$LONG" "$SHARED"
for store in "$LONG/k.db" "$SHARED/k.db"; do
    init_store --store "$store"
    chmod 1777 "$SHARED"
    mkdir -p "$TEST_ROOT/mnt3"
    expect_exit 0 "mount ${store#$TEST_ROOT/}" mount_kc "$TEST_ROOT/mnt3" --store "$store"
    [ ! -e "$store.sock" ] && pass "no socket beside it" || fail "no socket beside it"
    sock=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["socketPath"])' "$store.daemon")
    expect_eq "$XDG_RUNTIME_DIR/keychainfs" "$(dirname "$sock")" "the record names the socket in the runtime directory"
    expect_exit 0 "found from another environment" env -i "$KEYCHAINFS_BIN" add-generic-password --store "$store" -s far -a a -w far </dev/null
    expect_eq "far" "$(cat "$TEST_ROOT/mnt3/far/a")" "through the daemon"
    expect_exit 0 "unmount it" kc unmount --store "$store"
done
expect_eq "700" "$(stat -c %a "$XDG_RUNTIME_DIR/keychainfs")" "the runtime directory is 0700"

echo "== stale mounts: kill -9, then mount again at once"
for i in 1 2 3 4 5; do
    pid=$(daemon_pid "$MP")
    # Fresh attributes of the mountpoint in the kernel's cache: stat() answers from them for a
    # while after the kill, which is what made a re-mount say "already mounted".
    ls "$MP" >/dev/null
    stat "$MP" >/dev/null
    kill -9 "$pid"
    expect_exit 0 "mount at once after kill -9 ($i)" mount_kc "$MP"
    expect_eq "fromcron" "$(cat "$MP/github/alice" 2>&1)" "and it serves ($i)"
done
pid=$(daemon_pid "$MP")
kill -9 "$pid"
wait_gone "$pid"
expect_exit 69 "status of a stale mount: 69" kc status
expect_contains "$ERR" "$(realpath "$MP") is a stale mount" "status names the stale mount"
expect_contains "$ERR" "keychainfs unmount $(realpath "$MP")" "and says what to run"
expect_exit 69 "status by its mountpoint" kc status "$MP"
expect_contains "$ERR" "stale mount" "names it too"
expect_exit 0 "unmount detaches it" kc unmount "$MP"
expect_exit 32 "nothing is left mounted" mountpoint -q "$MP"
expect_exit 0 "mount again" mount_kc "$MP"
pid=$(daemon_pid "$MP")
expect_exit 0 "unmount" kc unmount "$MP"
expect_exit 0 "the daemon ends" wait_gone "$pid"
[ ! -e "$S.daemon" ] && [ ! -e "$S.sock" ] && pass "the daemon removed its record and socket" || fail "the daemon removed its record and socket"

echo "== another user's runtime directory is never trusted"
ATTACKER=kcfscontrol1
VICTIM=kcfscontrol2
for u in $ATTACKER $VICTIM; do
    userdel -r "$u" >/dev/null 2>&1
    useradd -M -s /bin/sh "$u" || { fail "useradd $u"; finish; }
    on_exit "userdel '$u'"
done
VUID=$(id -u $VICTIM)
VHOME="/tmp/kcfs-victim.$$.$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"
mkdir -m 0755 "$VHOME" || { fail "mkdir $VHOME"; finish; }
chown $VICTIM "$VHOME"
on_exit "rm -rf '$VHOME'"
victim() {
    runuser -u $VICTIM -- env -u XDG_RUNTIME_DIR HOME="$VHOME" XDG_STATE_HOME="$VHOME/state" \
        KEYCHAINFS_STORE="$VHOME/k.db" "$@"
}
victim "$KEYCHAINFS_BIN" init --no-passphrase >/dev/null
victim sh -c "echo precious > '$VHOME/precious'"
SPOOF="/tmp/keychainfs-$VUID"
rm -rf "$SPOOF"
on_exit "rm -rf '$SPOOF'"
ID=$(printf '%s' "$VHOME/k.db" | sha256sum | cut -c1-16)
record="{\"pid\":999999,\"storePath\":\"$VHOME/k.db\",\"mountpoint\":\"$VHOME\",\"socketPath\":\"$VHOME/precious\",\"version\":\"0.1.0\",\"protocol\":$PROTO}"
runuser -u $ATTACKER -- sh -c "mkdir -m 0777 '$SPOOF' && printf '%s' '$record' > '$SPOOF/$ID.json' && ln -s '$VHOME/precious' '$SPOOF/$ID.sock'"
[ -f "$SPOOF/$ID.json" ] && pass "the attacker planted a record in /tmp/keychainfs-$VUID" || fail "the attacker planted a record"
victim "$KEYCHAINFS_BIN" find-generic-password -s x >/dev/null 2>&1
victim "$KEYCHAINFS_BIN" add-generic-password -s x -a y -w z >/dev/null 2>&1
victim "$KEYCHAINFS_BIN" lock >/dev/null 2>&1
victim "$KEYCHAINFS_BIN" status >/dev/null 2>&1
victim "$KEYCHAINFS_BIN" unmount >/dev/null 2>&1
victim "$KEYCHAINFS_BIN" unmount "$VHOME" >/dev/null 2>&1
printf 'protocol=https\nhost=example.com\n' | victim "$GIT_HELPER" get >/dev/null 2>&1
printf 'protocol=https\nhost=example.com\nusername=u\npassword=p\n' | victim "$GIT_HELPER" store >/dev/null 2>&1
printf 'protocol=https\nhost=example.com\n' | victim "$GIT_HELPER" erase >/dev/null 2>&1
expect_eq "precious" "$(cat "$VHOME/precious" 2>&1)" "the victim's file named by the record is still there"
[ -f "$SPOOF/$ID.json" ] && [ -L "$SPOOF/$ID.sock" ] && pass "and nothing in the other user's directory was touched" \
    || fail "and nothing in the other user's directory was touched"
expect_exit 0 "the victim's commands still work" victim "$KEYCHAINFS_BIN" find-generic-password -s x -a y -w
expect_eq "z" "$(cat "$OUT")" "from its own store"

finish
