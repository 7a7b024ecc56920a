#!/bin/sh
# Living with keychainfs: the config file, status without a mount, the commands the systemd
# unit runs (including a restart after kill -9), unmount of a busy mountpoint and of one that
# another mount namespace has a copy of, adding and removing the passphrase; then, as normal
# users (root only): /dev/fuse diagnostics, --allow-root, unlocking through PAM with
# pamtester, and the unit under a real systemd --user.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

CONFIG="$XDG_CONFIG_HOME/keychainfs/config.toml"
mkdir -p "$XDG_CONFIG_HOME/keychainfs"

# json FILE EXPR: a value from a JSON file, as Python prints it (True, None, ...).
json() { python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# wait_for SECONDS CMD...: runs CMD every 0.2 s until it succeeds.
wait_for() {
    limit=$(($1 * 5))
    shift
    n=0
    while ! "$@" >/dev/null 2>&1; do
        n=$((n + 1))
        [ $n -ge "$limit" ] && return 1
        sleep 0.2
    done
}

is_mounted() { grep -q " $(realpath -m "$1") " /proc/self/mountinfo; }

echo "== status without a store or a mount"
expect_exit 69 "status with no store exits 69 (not mounted)" kc status
expect_contains "$OUT" "state: not mounted" "it says not mounted"
expect_contains "$OUT" "store: $KEYCHAINFS_STORE (does not exist" "it names the missing store"
expect_contains "$OUT" "mountpoint: $HOME/Keychain (configured" "it names the default mountpoint"
init_store
expect_exit 69 "status with a store and no mount" kc status
expect_contains "$OUT" "passphrase: yes" "it says the store has a passphrase"
kc status --json >"$TEST_ROOT/s.json"
expect_eq "True True False not-mounted None" \
    "$(json "$TEST_ROOT/s.json" 'd["storeExists"], d["hasPassphrase"], d["mounted"], d["state"], d.get("daemon")' | tr -d "(),'")" \
    "status --json without a mount"
kc init --store "$TEST_ROOT/device-only.db" --no-passphrase >/dev/null
expect_exit 69 "status of a device-key-only store" kc status --store "$TEST_ROOT/device-only.db"
expect_contains "$OUT" "passphrase: no (device key only)" "it says it has no passphrase"

echo "== mount without a mountpoint, and the config file"
expect_exit 70 "a MOUNTPOINT given on the command line must exist" kc mount "$HOME/Keychain" --passphrase-file "$PASSFILE"
on_exit_unmount "$HOME/Keychain"
expect_exit 0 "keychainfs mount (no argument) mounts at ~/Keychain" kc mount --passphrase-file "$PASSFILE"
on_exit_kill "$(daemon_pid "$HOME/Keychain")"
expect_exit 0 "~/Keychain was created and mounted" is_mounted "$HOME/Keychain"
kc unmount >/dev/null
expect_eq "700" "$(stat -c %a "$HOME/Keychain")" "the created mountpoint is 0700"

cat >"$CONFIG" <<'EOF'
# keychainfs defaults
mountpoint = "~/kc-config"
lock-after = 300
default-accessible = "after-first-unlock"
EOF
on_exit_unmount "$HOME/kc-config"
expect_exit 0 "mount with no argument uses the configured mountpoint" kc mount --passphrase-file "$PASSFILE"
on_exit_kill "$(daemon_pid "$HOME/kc-config")"
expect_exit 0 "the configured mountpoint is mounted" is_mounted "$HOME/kc-config"
expect_eq "300" "$(getfattr --only-values -n user.keychain.lock-after "$HOME/kc-config" 2>/dev/null)" "lock-after comes from the config"
mkdir -p "$HOME/kc-config/cfg" && sh -c "printf v > '$HOME/kc-config/cfg/a'"
expect_eq "after-first-unlock" "$(getfattr --only-values -n user.keychain.accessible "$HOME/kc-config/cfg/a" 2>/dev/null)" \
    "default-accessible comes from the config"
kc status >"$TEST_ROOT/status.txt"
expect_contains "$TEST_ROOT/status.txt" "lock-after: 300 s" "status shows the configured lock-after"
kc unmount >/dev/null
expect_exit 0 "flags override the config" mount_kc "$MP" --lock-after 0 --default-accessible always
expect_eq "off" "$(getfattr --only-values -n user.keychain.lock-after "$MP" 2>/dev/null)" "--lock-after 0 overrides it to never"
mkdir -p "$MP/cfg2" && sh -c "printf v > '$MP/cfg2/b'"
expect_eq "always" "$(getfattr --only-values -n user.keychain.accessible "$MP/cfg2/b" 2>/dev/null)" "--default-accessible overrides it"
expect_exit 1 "a MOUNTPOINT argument overrides the configured one" is_mounted "$HOME/kc-config"
kc unmount >/dev/null

printf 'mountpoint = "~/kc-config"\nlock-after = = 3\n' >"$CONFIG"
expect_exit 65 "a config syntax error: exit 65" kc mount --passphrase-file "$PASSFILE"
expect_contains "$ERR" "$CONFIG:2:" "the error names the file and line 2"
printf '# defaults\n\nlock_after = 3\n' >"$CONFIG"
expect_exit 65 "an unknown key: exit 65" kc mount "$MP" --passphrase-file "$PASSFILE"
expect_contains "$ERR" "$CONFIG:3: unknown key 'lock_after'" "the error names the line and the key"
printf 'default-accessible = "sometimes"\n' >"$CONFIG"
expect_exit 65 "an unknown class: exit 65" kc mount --passphrase-file "$PASSFILE"
expect_contains "$ERR" "$CONFIG:1: default-accessible: unknown accessibility class 'sometimes'" "the error says which value"
printf 'allow-root = "yes"\n' >"$CONFIG"
expect_exit 65 "a value of the wrong type: exit 65" kc mount --passphrase-file "$PASSFILE"
expect_contains "$ERR" "allow-root must be true or false" "the error says the expected type"
expect_exit 69 "status still works with a bad config" kc status
expect_contains "$OUT" "config error: $CONFIG:1:" "and reports the config error"
rm -f "$CONFIG"
expect_exit 65 "--lock-after below 0 is refused" kc mount "$MP" --lock-after=-1 --passphrase-file "$PASSFILE"

echo "== status of a mount, and after kill -9"
expect_exit 0 "mount" mount_kc "$MP"
pid=$(daemon_pid "$MP")
expect_exit 0 "status of a mount exits 0" kc status
expect_contains "$OUT" "daemon: pid $pid, version $(kc --version), memory locked" "status shows the daemon's pid, version, locked memory"
kc status --json >"$TEST_ROOT/s.json"
expect_eq "True unlocked $pid $(kc --version) True" \
    "$(json "$TEST_ROOT/s.json" 'd["mounted"], d["state"], d["daemon"]["pid"], d["daemon"]["version"], d["daemon"]["memoryLocked"]' | tr -d "(),'")" \
    "status --json of a mount"
# A daemon stopped (SIGSTOP) or too busy to answer: 75 naming it, not "another version" (76).
kill -STOP "$pid"
expect_exit 75 "a stopped daemon: status exits 75" kc status
expect_contains "$ERR" "is held by process $pid" "  naming the daemon's process"
expect_contains "$ERR" "which does not answer" "  and that it does not answer"
expect_exit 75 "  find-generic-password too" kc find-generic-password -s none -a none -w
kill -CONT "$pid"
expect_exit 0 "continued, it answers again" kc status
kill -9 "$pid"
wait_gone "$pid"
expect_exit 69 "status after kill -9 exits 69" kc status
expect_contains "$OUT" "stale mount: $(realpath -m "$MP") (its daemon is gone" "status names the stale mount"
kc status --json >"$TEST_ROOT/s.json"
expect_eq "$(realpath -m "$MP")" "$(json "$TEST_ROOT/s.json" 'd["staleMount"]')" "status --json names the stale mount"
expect_errno "status changed nothing: the mount is still stale" "Transport endpoint is not connected" ls "$MP"

echo "== the unit's commands: ExecStart after kill -9, ExecStop, SIGTERM"
# ExecStart: mount --locked --foreground, right after the crash above.
"$KEYCHAINFS_BIN" mount "$MP" --locked --foreground 2>"$TEST_ROOT/fg.log" &
fg=$!
on_exit_kill "$fg"
wait_for 10 test "$(state "$MP")" = before-first-unlock
expect_eq "before-first-unlock" "$(state "$MP")" "mount --locked --foreground recovers the stale mount and serves, locked"
expect_contains "$TEST_ROOT/fg.log" "serving $KEYCHAINFS_STORE" "it logs to stderr (the journal, under systemd)"
# ExecStop: unmount.
expect_exit 0 "unmount (ExecStop) stops the foreground daemon" kc unmount
wait "$fg"
expect_eq "0" "$?" "the foreground daemon exits 0"
expect_exit 1 "nothing is left mounted" is_mounted "$MP"
expect_contains "$TEST_ROOT/fg.log" "unmounted" "it logs the unmount"
# systemd's own stop signal, when ExecStop could not unmount.
"$KEYCHAINFS_BIN" mount "$MP" --locked --foreground 2>/dev/null &
fg=$!
on_exit_kill "$fg"
wait_for 10 test "$(state "$MP")" = before-first-unlock
kill -TERM "$fg"
wait "$fg"
expect_eq "0" "$?" "SIGTERM: the foreground daemon exits 0"
expect_exit 1 "SIGTERM unmounts" is_mounted "$MP"
# Type=notify: READY=1 arrives once the mount serves.
python3 - "$TEST_ROOT/notify" "$MP" >"$TEST_ROOT/notify.out" 2>&1 <<'PY' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(20)
msg = s.recv(4096).decode()
print(msg.replace("\n", "|"), "mounted" if os.path.ismount(sys.argv[2]) else "not-mounted")
PY
py=$!
sleep 0.5
NOTIFY_SOCKET="$TEST_ROOT/notify" "$KEYCHAINFS_BIN" mount "$MP" --locked --foreground 2>/dev/null &
fg=$!
on_exit_kill "$fg"
wait "$py"
expect_contains "$TEST_ROOT/notify.out" "READY=1|STATUS=serving $KEYCHAINFS_STORE" "--foreground tells systemd it is ready"
expect_contains "$TEST_ROOT/notify.out" " mounted" "READY=1 comes after the mount serves"
kill -TERM "$fg"; wait "$fg"

echo "== the unit file"
expect_exit 0 "service show" kc service show
cp "$OUT" "$TEST_ROOT/keychainfs.service"
expect_contains "$OUT" "ExecStart=\"$(realpath "$KEYCHAINFS_BIN")\" mount --locked --foreground" "ExecStart runs this binary's mount --locked --foreground"
expect_contains "$OUT" "ExecStop=-\"$(realpath "$KEYCHAINFS_BIN")\" unmount" "ExecStop unmounts (a failure, as after a stop signal, is not the unit's)"
expect_contains "$OUT" "Restart=on-failure" "it restarts after a crash"
expect_contains "$OUT" "Type=notify" "it is Type=notify"
expect_contains "$OUT" "Environment=\"XDG_DATA_HOME=$XDG_DATA_HOME\"" "it keeps the shell's XDG directories"
expect_not_contains "$OUT" "StandardError=" "stderr goes to systemd's default, the journal"
if command -v systemd-analyze >/dev/null 2>&1; then
    expect_exit 0 "systemd-analyze verify accepts the unit" systemd-analyze verify --user "$TEST_ROOT/keychainfs.service"
else
    fail "systemd-analyze verify accepts the unit" "systemd-analyze is missing (scripts/install-deps installs systemd)"
fi
UNIT="$XDG_CONFIG_HOME/systemd/user/keychainfs.service"
WANTS="$XDG_CONFIG_HOME/systemd/user/default.target.wants/keychainfs.service"
expect_exit 0 "service install without a reachable user manager" kc service install
expect_contains "$OUT" "for your next login" "it says the service starts at the next login"
expect_contains "$OUT" "systemctl --user daemon-reload && systemctl --user start keychainfs" "and what to run then"
expect_exit 0 "the unit file is written" cmp "$UNIT" "$TEST_ROOT/keychainfs.service"
expect_eq "$UNIT" "$(readlink "$WANTS")" "and enabled in default.target.wants"
expect_exit 0 "service uninstall" kc service uninstall
expect_contains "$OUT" "removed $UNIT" "it removes the unit"
expect_exit 1 "the unit and its link are gone" test -e "$UNIT" -o -L "$WANTS"
expect_exit 0 "a second uninstall" kc service uninstall
expect_contains "$OUT" "was not installed" "says there was nothing to remove"

echo "== unmount of a busy mountpoint"
expect_exit 0 "mount" mount_kc "$MP"
sh -c "cd '$MP' && exec sleep 60" &
holder=$!
on_exit_kill "$holder"
sleep 0.3
expect_exit 16 "unmount of a busy mountpoint: exit 16" kc unmount
expect_contains "$ERR" "is busy" "the message says busy"
expect_contains "$ERR" "fuser -vm $(realpath "$MP")" "and how to find the holder"
expect_contains "$(fuser -m "$MP" 2>/dev/null)" "$holder" "fuser -m finds the holder"
expect_exit 0 "the mount still serves" kc status
kill "$holder"; wait "$holder" 2>/dev/null
expect_exit 0 "unmount once it is free" kc unmount

echo "== unmount while another mount namespace has a copy of the mount"
# Any process that makes a mount namespace while the keychain is mounted (unshare -m, a
# container, a service's private mounts) gets a copy of the mount. Detaching ours left the
# kernel's connection up for that copy: the daemon kept serving it with every key, unmount
# waited 300 s for it to exit, and the store stayed held. A process using the copy does not
# make the mount busy here.
# Commands, not functions, in the background: $! is then the process itself (killed at exit).
if [ "$(id -u)" -eq 0 ]; then
    unshare_flags="-m --propagation private" nsenter_flags="-m"
else
    unshare_flags="-Urm" nsenter_flags="-U -m --preserve-credentials"
fi
in_copy() { nsenter -t "$nsholder" $nsenter_flags "$@"; }
expect_exit 0 "mount" mount_kc "$MP"
pid=$(daemon_pid "$MP")
mkdir "$MP/nscopy" && printf 'copied-namespace-secret' >"$MP/nscopy/acct"
unshare $unshare_flags sleep 60 &
nsholder=$!
on_exit_kill "$nsholder"
sleep 0.5
expect_exit 0 "the holder is in another mount namespace" test "$(readlink /proc/$nsholder/ns/mnt)" != "$(readlink /proc/self/ns/mnt)"
expect_eq "copied-namespace-secret" "$(in_copy cat "$MP/nscopy/acct" 2>&1)" "the other namespace's copy serves the secret while mounted"
nsenter -t "$nsholder" $nsenter_flags sh -c "cd '$MP/nscopy' && exec sleep 60" &
nsuser=$!
on_exit_kill "$nsuser"
sleep 0.3
start=$(date +%s%N)
expect_exit 0 "unmount while another namespace has a copy (and uses it)" timeout 20 "$KEYCHAINFS_BIN" unmount "$MP"
took=$((($(date +%s%N) - start) / 1000000))
if [ "$took" -lt 3000 ]; then pass "and it returns at once (${took} ms)"; else fail "and it returns within 3 s" "after ${took} ms"; fi
expect_not_contains "$ERR" "waiting for the daemon" "without waiting for the daemon"
expect_exit 0 "the daemon has exited" wait_gone "$pid"
expect_exit 32 "the mountpoint is no longer mounted here" mountpoint -q "$MP"
expect_errno "the copy no longer serves the secret (ENOTCONN)" "Transport endpoint is not connected" in_copy cat "$MP/nscopy/acct"
expect_not_contains "$OUT" "copied-namespace-secret" "and printed nothing of it"
expect_exit 0 "mount again at the same place" mount_kc "$MP"
pid=$(daemon_pid "$MP")
expect_eq "copied-namespace-secret" "$(cat "$MP/nscopy/acct")" "the new mount serves"
kill "$nsuser" "$nsholder" 2>/dev/null; wait "$nsuser" "$nsholder" 2>/dev/null
# Detached here by hand while a copy lives: the daemon sees its mount leave the mount table
# (DetachWatch) and ends the session, copies and all, with no `keychainfs unmount`.
unshare $unshare_flags sleep 60 &
nsholder=$!
on_exit_kill "$nsholder"
sleep 0.5
expect_eq "copied-namespace-secret" "$(in_copy cat "$MP/nscopy/acct" 2>&1)" "the copy serves the secret"
expect_exit 0 "fusermount3 -u by hand while another namespace has a copy" fusermount3 -u "$MP"
expect_exit 0 "the daemon sees the detach and exits by itself" wait_gone "$pid"
expect_errno "and the copy no longer serves the secret (ENOTCONN)" "Transport endpoint is not connected" in_copy cat "$MP/nscopy/acct"
expect_contains "$XDG_STATE_HOME/keychainfs/daemon.log" "was detached here; ending its FUSE session" "the daemon's log says why it ended"
kill "$nsholder" 2>/dev/null; wait "$nsholder" 2>/dev/null
# Its mountpoint's directory renamed above it, the mount stays: the daemon goes by the mount's id.
mkdir "$TEST_ROOT/above" && mkdir "$TEST_ROOT/above/mp"
expect_exit 0 "a mount below a directory" mount_kc "$TEST_ROOT/above/mp"
pid=$(daemon_pid "$TEST_ROOT/above/mp")
expect_exit 0 "the directory above it renamed" mv "$TEST_ROOT/above" "$TEST_ROOT/above2"
sleep 0.5
expect_eq "copied-namespace-secret" "$(cat "$TEST_ROOT/above2/mp/nscopy/acct" 2>&1)" "the mount still serves, at its new path"
expect_exit 0 "the daemon still runs" kill -0 "$pid"
fusermount3 -u "$TEST_ROOT/above2/mp"
expect_exit 0 "and ends once detached" wait_gone "$pid"

echo "== passwd --remove and --add"
P="--passphrase-file $PASSFILE"
kc add-generic-password -s pw -a passcode -w p1 --accessible when-passcode-set-this-device-only $P >/dev/null
kc add-generic-password -s pw -a normal -w n1 $P >/dev/null
kc add-generic-password -s pw -a device -w d1 --accessible when-unlocked-this-device-only $P >/dev/null
expect_exit 0 "mount" mount_kc "$MP"
expect_exit 75 "passwd --remove while mounted is refused" kc passwd --remove --yes --passphrase-file "$PASSFILE"
expect_contains "$ERR" "unmount it before changing its passphrase" "it says to unmount first"
expect_exit 75 "passwd --add while mounted is refused" kc passwd --add --new-passphrase-file "$PASSFILE"
kc unmount >/dev/null
expect_exit 65 "passwd --remove with passcode items and no terminal needs --yes" setsid -w "$KEYCHAINFS_BIN" passwd --remove --passphrase-file "$PASSFILE"
expect_contains "$ERR" "use --yes" "it says to use --yes"
if have script; then
    printf 'no\n' | script -qec "$KEYCHAINFS_BIN passwd --remove --passphrase-file $PASSFILE" /dev/null >"$TEST_ROOT/confirm.out" 2>&1
    expect_contains "$TEST_ROOT/confirm.out" "deletes 1 'when-passcode-set-this-device-only' item" "at a terminal it asks, naming the count"
    expect_contains "$TEST_ROOT/confirm.out" "not confirmed; nothing was changed" "answering no changes nothing"
fi
expect_eq "p1" "$(kc find-generic-password -s pw -a passcode -w --passphrase-file "$PASSFILE")" "the passcode item is still there"
echo wrong >"$TEST_ROOT/wrong"
expect_exit 51 "passwd --remove with a wrong passphrase" kc passwd --remove --yes --passphrase-file "$TEST_ROOT/wrong"
expect_exit 0 "passwd --remove --yes" kc passwd --remove --yes --passphrase-file "$PASSFILE"
expect_contains "$OUT" "deleted 1 'when-passcode-set-this-device-only' item" "it says what it deleted"
expect_contains "$OUT" "device key only" "it says what protects the store now"
expect_exit 69 "status" kc status
expect_contains "$OUT" "passphrase: no" "the store has no passphrase now"
expect_eq "n1 d1" "$(setsid -w "$KEYCHAINFS_BIN" find-generic-password -s pw -a normal -w </dev/null) $(setsid -w "$KEYCHAINFS_BIN" find-generic-password -s pw -a device -w </dev/null)" \
    "every other item opens with no passphrase"
expect_exit 44 "the passcode item is gone" setsid -w "$KEYCHAINFS_BIN" find-generic-password -s pw -a passcode </dev/null
expect_exit 65 "passwd --remove on a device-key-only store" kc passwd --remove --yes
expect_exit 65 "plain passwd on a device-key-only store says to use --add" kc passwd --passphrase-file "$PASSFILE" --new-passphrase-file "$PASSFILE"
expect_contains "$ERR" "passwd --add" "it names passwd --add"
printf 'second passphrase\n' >"$TEST_ROOT/second"
expect_exit 0 "passwd --add" kc passwd --add --new-passphrase-file "$TEST_ROOT/second" --scrypt-log-n 10
expect_exit 69 "status" kc status
expect_contains "$OUT" "passphrase: yes" "the store has a passphrase again"
expect_exit 65 "without it, the items need the passphrase (no terminal to ask)" setsid -w "$KEYCHAINFS_BIN" find-generic-password -s pw -a normal -w </dev/null
expect_exit 0 "mount with the new passphrase" mount_kc "$MP" --passphrase-file "$TEST_ROOT/second"
expect_eq "n1 d1" "$(cat "$MP/pw/normal") $(cat "$MP/pw/device")" "the items read through the mount"
expect_exit 0 "passcode items can be added again" kc add-generic-password -s pw -a passcode2 -w p2 --accessible when-passcode-set-this-device-only
kc unmount >/dev/null
expect_exit 65 "passwd --add on a store with a passphrase" kc passwd --add --new-passphrase-file "$PASSFILE"
expect_exit 64 "--add and --remove together" kc passwd --add --remove
expect_exit 64 "--yes without --remove" kc passwd --yes
printf '%s\n' "$PASSPHRASE" >"$TEST_ROOT/restore"
kc passwd --passphrase-file "$TEST_ROOT/second" --new-passphrase-file "$TEST_ROOT/restore" >/dev/null

echo "== as normal users: setup"
# Everything below runs as root: it creates two users, and gives them a 0666 /dev/fuse only
# inside a private mount namespace (the host's /dev/fuse is never changed).
if [ "$(id -u)" -ne 0 ]; then
    skip "the normal-user tests (/dev/fuse, --allow-root, PAM, systemd --user)" "they need root"
    finish
fi
for tool in unshare nsenter setpriv useradd userdel; do
    command -v "$tool" >/dev/null 2>&1 || { fail "the tool $tool is installed" "install util-linux and passwd"; finish; }
done
U1=kcfsliving1
U2=kcfsliving2
make_test_users $U1 $U2
U1_HOME="$USERS_ROOT/$U1"
U1_UID=$(id -u $U1)
U1_RUN="/run/user/$U1_UID"
if [ ! -d "$U1_RUN" ]; then
    mkdir -p /run/user && mkdir -m 700 "$U1_RUN" && chown "$U1:" "$U1_RUN"
    on_exit "rm -rf '$U1_RUN'"
fi
BIN="$USERS_ROOT/keychainfs"
# The front and the whole tool it runs, side by side.
cp "$KEYCHAINFS_BIN" "$BIN" && chmod 755 "$BIN"
cp "$(dirname "$KEYCHAINFS_BIN")/keychainfs-full" "$USERS_ROOT/keychainfs-full" && chmod 755 "$USERS_ROOT/keychainfs-full"
U1PASS='kcfs living login 1'
printf '%s\n' "$U1PASS" >"$USERS_ROOT/u1pass"
chown "$U1:" "$USERS_ROOT/u1pass" && chmod 600 "$USERS_ROOT/u1pass"

# The namespace's tmpfs also holds a 0600 node, a node with no driver and the fuse.conf variants.
make_fuse_namespace "mknod -m 600 '$USERS_ROOT/ns/fuse-0600' c 10 229 && mknod -m 666 '$USERS_ROOT/ns/fuse-nodriver' c 10 250 \
    && printf '#user_allow_other\\n' >'$USERS_ROOT/ns/fuse.conf.off' && printf 'user_allow_other\\n' >'$USERS_ROOT/ns/fuse.conf.on' \
    && mount --bind '$USERS_ROOT/ns/fuse.conf.off' /etc/fuse.conf"
expect_eq "crw-rw-rw-" "$(nsenter -t "$NS" -m stat -c %A /dev/fuse)" "inside the namespace /dev/fuse is 0666"
expect_eq "crw-------" "$(stat -c %A /dev/fuse)" "the host's /dev/fuse is unchanged"

in_ns() { nsenter -t "$NS" -m "$@"; }
# rebind FILE TARGET: what TARGET is inside the namespace.
rebind() { in_ns sh -c "umount '$2' && mount --bind '$NSDIR/$1' '$2'"; }
as_user() {
    u=$1 home=$2
    shift 2
    in_ns setpriv --reuid="$u" --regid="$u" --init-groups \
        env -i HOME="$home" USER="$u" LOGNAME="$u" PATH=/usr/bin:/bin XDG_RUNTIME_DIR="$U1_RUN" "$@"
}
as_u1() { as_user "$U1" "$U1_HOME" "$@"; }
as_u2() { in_ns setpriv --reuid="$U2" --regid="$U2" --init-groups env -i HOME="$USERS_ROOT/$U2" PATH=/usr/bin:/bin "$@"; }
u1_state() {
    as_u1 "$BIN" status --json >"$TEST_ROOT/u1.json" 2>/dev/null
    json "$TEST_ROOT/u1.json" 'd["state"]'
}
u1_pid() { json "$TEST_ROOT/u1.json" 'd.get("daemon", {}).get("pid")'; }
U1MP="$U1_HOME/mnt"
as_u1 mkdir "$U1MP"
on_exit "nsenter -t $NS -m fusermount3 -u -z '$U1MP' 2>/dev/null"
expect_exit 0 "$U1 makes a store" as_u1 "$BIN" init --scrypt-log-n 10 --passphrase-file "$USERS_ROOT/u1pass"

echo "== scripts/install-deps as a normal user"
# A dpkg-query that reports pamtester missing, so that nothing is installed for real.
mkdir "$USERS_ROOT/fakebin"
printf '#!/bin/sh\ncase "$*" in *pamtester*) exit 1 ;; esac\nexec /usr/bin/dpkg-query "$@"\n' >"$USERS_ROOT/fakebin/dpkg-query"
chmod 755 "$USERS_ROOT/fakebin/dpkg-query"
cp "$REPO/scripts/install-deps" "$USERS_ROOT/install-deps"
expect_exit 1 "install-deps as a normal user without sudo fails" \
    as_user "$U1" "$U1_HOME" env PATH="$USERS_ROOT/fakebin:/usr/bin:/bin" sh "$USERS_ROOT/install-deps"
expect_contains "$OUT" "missing Debian packages: pamtester" "it names the missing package"
expect_contains "$ERR" "as root, run:" "it says what root must run"
expect_contains "$ERR" "apt-get update && apt-get install -y pamtester" "the one command"
expect_not_contains "$ERR" "sudo: not found" "rather than sudo: not found"

echo "== /dev/fuse problems say what to do"
rebind fuse-0600 /dev/fuse
expect_exit 70 "a 0600 /dev/fuse: mount fails" as_u1 "$BIN" mount "$U1MP" --locked
expect_contains "$ERR" "/dev/fuse is mode 0600, owned by root:root, so $U1 cannot open it" "it names the mode, the owner and the user"
expect_contains "$ERR" "chmod 666 /dev/fuse" "it gives the chmod"
expect_contains "$ERR" "/etc/udev/rules.d/99-fuse.rules" "and the udev rule"
rebind fuse-nodriver /dev/fuse
expect_exit 70 "a /dev/fuse with no driver: mount fails" as_u1 "$BIN" mount "$U1MP" --locked
expect_contains "$ERR" "the fuse kernel module is not loaded; as root: modprobe fuse" "it says to load the module"
expect_exit 70 "no /dev/fuse: mount fails" unshare -m sh -c 'mount -t tmpfs -o mode=755 none /dev && mknod -m 666 /dev/null c 1 3 && exec setpriv --reuid="$0" --regid="$0" --init-groups env -i HOME="$1" PATH=/usr/bin:/bin XDG_RUNTIME_DIR="$2" "$3" mount "$4" --locked' "$U1" "$U1_HOME" "$U1_RUN" "$BIN" "$U1MP"
expect_contains "$ERR" "/dev/fuse does not exist" "it says the device is missing"
expect_contains "$ERR" "mknod -m 666 /dev/fuse c 10 229" "and how to make it"
rebind fuse /dev/fuse
expect_exit 0 "with a 0666 /dev/fuse, $U1 mounts" as_u1 "$BIN" mount "$U1MP" --passphrase-file "$USERS_ROOT/u1pass"
as_u1 sh -c "mkdir -p '$U1MP/db' && printf 'db-secret' >'$U1MP/db/app'"
expect_eq "db-secret" "$(as_u1 cat "$U1MP/db/app")" "$U1 reads its item"
expect_errno "root cannot read it without --allow-root" "Permission denied" in_ns cat "$U1MP/db/app"
expect_errno "another user cannot list it" "Permission denied" as_u2 ls "$U1MP"
expect_exit 0 "unmount" as_u1 "$BIN" unmount "$U1MP"

echo "== --allow-root"
expect_exit 70 "--allow-root without user_allow_other fails" as_u1 "$BIN" mount "$U1MP" --allow-root --passphrase-file "$USERS_ROOT/u1pass"
expect_contains "$ERR" "needs the line 'user_allow_other' in /etc/fuse.conf" "the error names /etc/fuse.conf and the option"
expect_contains "$ERR" "echo user_allow_other >> /etc/fuse.conf" "and the command to run"
as_u1 mkdir -p "$U1_HOME/.config/keychainfs"
as_u1 sh -c "printf 'allow-root = true\nmountpoint = \"~/mnt\"\n' >'$U1_HOME/.config/keychainfs/config.toml'"
expect_exit 70 "allow-root = true in the config: the same error" as_u1 "$BIN" mount --passphrase-file "$USERS_ROOT/u1pass"
expect_contains "$ERR" "user_allow_other" "it names user_allow_other"
expect_exit 0 "--no-allow-root overrides the config" as_u1 "$BIN" mount --no-allow-root --passphrase-file "$USERS_ROOT/u1pass"
expect_errno "and root is refused" "Permission denied" in_ns cat "$U1MP/db/app"
as_u1 "$BIN" unmount >/dev/null
rebind fuse.conf.on /etc/fuse.conf
expect_exit 0 "with user_allow_other, allow-root from the config mounts" as_u1 "$BIN" mount --passphrase-file "$USERS_ROOT/u1pass"
expect_exit 0 "status" as_u1 "$BIN" status
expect_contains "$OUT" "allow-root: yes" "status shows allow-root"
expect_eq "db-secret" "$(in_ns cat "$U1MP/db/app")" "root reads the item"
expect_eq "db-secret" "$(in_ns env DB_PASSWORD_FILE="$U1MP/db/app" sh -c 'cat "$DB_PASSWORD_FILE"')" \
    "the *_FILE pattern: a program run by root reads the file its variable names"
in_ns sh -c "mkdir -m 700 '$USERS_ROOT/creds' && cp '$U1MP/db/app' '$USERS_ROOT/creds/db-password'"
expect_eq "db-secret" "$(cat "$USERS_ROOT/creds/db-password")" "root copies it as LoadCredential= does"
expect_errno "another user still gets EACCES on the item" "Permission denied" as_u2 cat "$U1MP/db/app"
expect_errno "and on the root directory" "Permission denied" as_u2 ls "$U1MP"
expect_exit 0 "unmount" as_u1 "$BIN" unmount
rebind fuse.conf.off /etc/fuse.conf
as_u1 rm "$U1_HOME/.config/keychainfs/config.toml"

echo "== unlock with the login password through PAM"
if command -v pamtester >/dev/null 2>&1; then
    printf '%s:%s\n' "$U1" "$U1PASS" | chpasswd
    LOGIN="kcfs-living-login-$$"
    BARE="kcfs-living-bare-$$"
    on_exit "rm -f /etc/pam.d/$LOGIN /etc/pam.d/$BARE"
    # As a login's PAM file would have it: the password checked first, then handed to keychainfs.
    printf 'auth required pam_unix.so\nauth optional pam_exec.so expose_authtok quiet %s unlock --pam\naccount required pam_permit.so\n' "$BIN" \
        >"/etc/pam.d/$LOGIN"
    # keychainfs alone and required: pamtester's result is then its exit status.
    printf 'auth required pam_exec.so expose_authtok quiet %s unlock --pam\naccount required pam_permit.so\n' "$BIN" \
        >"/etc/pam.d/$BARE"
    expect_exit 0 "$U1 mounts locked" as_u1 "$BIN" mount "$U1MP" --locked
    on_exit "kill $(as_u1 "$BIN" status --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["daemon"]["pid"])')"
    expect_eq "before-first-unlock" "$(u1_state)" "it starts before first unlock"
    printf '%s\n' "$U1PASS" | pamtester "$LOGIN" "$U1" authenticate >"$OUT" 2>&1
    expect_eq "0" "$?" "pamtester authenticates through pam_unix and keychainfs"
    wait_for 10 test "$(u1_state)" = unlocked
    expect_eq "unlocked" "$(u1_state)" "the login password unlocked the keychain"
    as_u1 "$BIN" lock >/dev/null
    start=$(date +%s)
    printf 'not the password\n' | pamtester "$BARE" "$U1" authenticate >"$OUT" 2>&1
    expect_eq "0" "$?" "a wrong password: keychainfs still exits 0 (pam_exec succeeds)"
    expect_exit 0 "and at once" test $(($(date +%s) - start)) -le 3
    sleep 1.5
    expect_eq "locked" "$(u1_state)" "a wrong password unlocks nothing"
    pamtester "$BARE" "$U1" authenticate </dev/null >"$OUT" 2>&1
    expect_eq "0" "$?" "a missing password: keychainfs exits 0"
    pamtester "$BARE" nosuchuser-kcfs authenticate </dev/null >"$OUT" 2>&1
    expect_eq "0" "$?" "an unknown user: keychainfs exits 0"
    expect_exit 0 "unlock --pam by hand with a wrong password" sh -c "printf 'wrong\n' | nsenter -t $NS -m setpriv --reuid=$U1 --regid=$U1 --init-groups env -i HOME='$U1_HOME' XDG_RUNTIME_DIR='$U1_RUN' PATH=/usr/bin:/bin '$BIN' unlock --pam"
    expect_eq "" "$(cat "$OUT" "$ERR")" "unlock --pam prints nothing"
    printf '%s\000' "$U1PASS" | as_u1 "$BIN" unlock --pam
    wait_for 10 test "$(u1_state)" = unlocked
    expect_eq "unlocked" "$(u1_state)" "a password ended by a NUL (as pam_exec sends it) unlocks"
    expect_exit 0 "unmount" as_u1 "$BIN" unmount "$U1MP"
    # At a real login PAM authenticates before the session, and so before the user service mounts.
    start=$(date +%s)
    printf '%s\n' "$U1PASS" | pamtester "$LOGIN" "$U1" authenticate >"$OUT" 2>&1
    expect_eq "0" "$?" "authentication before the mount exists succeeds"
    expect_exit 0 "and does not wait for the mount" test $(($(date +%s) - start)) -le 3
    expect_exit 0 "the mount comes up, locked" as_u1 "$BIN" mount "$U1MP" --locked
    on_exit "kill $(as_u1 "$BIN" status --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["daemon"]["pid"])')"
    wait_for 10 test "$(u1_state)" = unlocked
    expect_eq "unlocked" "$(u1_state)" "the password given at authentication unlocks it once it is mounted"
    expect_exit 0 "unmount" as_u1 "$BIN" unmount "$U1MP"
else
    fail "pamtester is installed" "scripts/install-deps installs it"
fi

echo "== the user service under a real systemd --user"
SYSTEMD=/lib/systemd/systemd
CG="kcfs-living-$$"
if [ ! -x "$SYSTEMD" ] || [ ! -w /sys/fs/cgroup/systemd ] || [ ! -w /sys/fs/cgroup/unified ]; then
    skip "the user service under a real systemd --user" "no systemd binary or no writable systemd cgroup hierarchies to run a user manager in"
    finish
fi
# The user manager thinks the machine booted with systemd once /run/systemd/system exists;
# it and a journald get a private /run/systemd and /run/log in the namespace.
in_ns sh -c 'mount -t tmpfs tmpfs /run/systemd && mkdir /run/systemd/system && mkdir -p /run/log \
    && mount -t tmpfs tmpfs /run/log && { [ ! -d /var/log/journal ] || mount -t tmpfs tmpfs /var/log/journal; }'
nsenter -t "$NS" -m /lib/systemd/systemd-journald >/dev/null 2>&1 &
JOURNALD=$!
on_exit "kill $JOURNALD"
for h in systemd unified; do
    mkdir "/sys/fs/cgroup/$h/$CG" && chown -R "$U1:" "/sys/fs/cgroup/$h/$CG"
    on_exit "find /sys/fs/cgroup/$h/$CG -depth -type d -exec rmdir {} \\;"
done
# start_manager: a user manager for U1 in its own cgroup, as logind would start it at login.
start_manager() {
    nsenter -t "$NS" -m sh -c "echo \$\$ >/sys/fs/cgroup/systemd/$CG/cgroup.procs && echo \$\$ >/sys/fs/cgroup/unified/$CG/cgroup.procs \
        && exec setpriv --reuid=$U1 --regid=$U1 --init-groups env -i HOME='$U1_HOME' USER=$U1 LOGNAME=$U1 \
        XDG_RUNTIME_DIR='$U1_RUN' PATH=/usr/bin:/bin $SYSTEMD --user" >>"$TEST_ROOT/manager.log" 2>&1 &
    MANAGER=$!
    on_exit "kill $MANAGER; sleep 1"
    wait_for 20 as_u1 systemctl --user show-environment
}
sd() { as_u1 systemctl --user "$@"; }
prop() { sd show -p "$1" --value keychainfs.service; }
journal() { in_ns journalctl --no-pager -o cat _UID="$U1_UID" SYSLOG_IDENTIFIER=keychainfs; }
wait_for 10 in_ns test -S /run/systemd/journal/socket
expect_exit 0 "a user manager starts" start_manager

# A binary path with a space and a % tests the unit's quoting.
ODD="$USERS_ROOT/odd dir%1"
mkdir "$ODD" && cp "$BIN" "$ODD/keychainfs" && cp "$USERS_ROOT/keychainfs-full" "$ODD/" && chmod 755 "$ODD"
expect_exit 0 "service install" as_u1 "$ODD/keychainfs" service install
expect_contains "$OUT" "it mounts the keychain at every login" "with a user manager it enables the unit"
expect_contains "$U1_HOME/.config/systemd/user/keychainfs.service" "ExecStart=\"$USERS_ROOT/odd dir%%1/keychainfs\" mount" \
    "the unit quotes the path and escapes %"
expect_eq "enabled" "$(sd is-enabled keychainfs.service)" "systemctl says enabled"
expect_exit 0 "systemctl --user start keychainfs" sd start keychainfs.service
expect_eq "active" "$(prop ActiveState)" "the unit is active"
expect_eq "before-first-unlock" "$(u1_state)" "the keychain is mounted at ~/Keychain, locked"
main=$(prop MainPID)
expect_eq "$main" "$(u1_pid)" "the unit's main process is the daemon"
expect_exit 0 "the mountpoint is ~/Keychain" in_ns grep -q " $U1_HOME/Keychain .* fuse.keychainfs " /proc/self/mountinfo
wait_for 10 sh -c "nsenter -t $NS -m journalctl --no-pager -o cat _UID=$U1_UID SYSLOG_IDENTIFIER=keychainfs | grep -q serving"
expect_contains "$(journal)" "serving $U1_HOME/.local/share/keychainfs/keychain.db at $U1_HOME/Keychain, before-first-unlock" \
    "it logs to the journal"
if have pamtester; then
    printf '%s\n' "$U1PASS" | pamtester "$LOGIN" "$U1" authenticate >/dev/null 2>&1
    wait_for 10 test "$(u1_state)" = unlocked
    expect_eq "unlocked" "$(u1_state)" "the login password unlocks the service's mount"
fi
expect_exit 0 "an 'always' item" as_u1 "$BIN" add-generic-password -s cred -a app -w cred-secret --accessible always
if sd --version >/dev/null && as_u1 systemd-run --user --wait --pipe --quiet -p "LoadCredential=app-password:$U1_HOME/Keychain/cred/app" \
        sh -c 'cat "$CREDENTIALS_DIRECTORY/app-password"' >"$TEST_ROOT/cred.out" 2>&1; then
    expect_eq "cred-secret" "$(cat "$TEST_ROOT/cred.out")" "LoadCredential= reads an item of the mount"
else
    fail "LoadCredential= reads an item of the mount" "$(cat "$TEST_ROOT/cred.out")"
fi

# MainPID is 0 when the unit does not run, and kill -9 0 would end this test's own process group.
[ "${main:-0}" -gt 0 ] 2>/dev/null && kill -9 "$main"
wait_for 15 sh -c "[ \"\$(XDG_RUNTIME_DIR='$U1_RUN' nsenter -t $NS -m setpriv --reuid=$U1 --regid=$U1 --init-groups env XDG_RUNTIME_DIR='$U1_RUN' systemctl --user show -p NRestarts --value keychainfs.service)\" = 1 ]"
wait_for 15 test "$(u1_state)" = before-first-unlock
expect_eq "1" "$(prop NRestarts)" "after kill -9 systemd restarts it"
expect_eq "active" "$(prop ActiveState)" "and it is active again"
expect_eq "before-first-unlock" "$(u1_state)" "the stale mount was recovered and the keychain is mounted again, locked"
expect_exit 0 "with a new daemon" test "$(u1_pid)" != "$main"
expect_eq "cred-secret" "$(as_u1 cat "$U1_HOME/Keychain/cred/app")" "the new mount serves its 'always' items"

expect_exit 0 "systemctl --user stop keychainfs" sd stop keychainfs.service
expect_eq "inactive success" "$(prop ActiveState) $(prop Result)" "it stops cleanly"
expect_exit 1 "nothing is left mounted" in_ns grep -q " $U1_HOME/Keychain " /proc/self/mountinfo
expect_contains "$(journal)" "unmounted $U1_HOME/Keychain" "the unmount is in the journal"
# systemd's SIGTERM itself (as when ExecStop could not unmount): a clean stop, not restarted.
expect_exit 0 "systemctl --user start keychainfs again" sd start keychainfs.service
restarts=$(prop NRestarts)
unit_inactive() { [ "$(prop ActiveState)" = inactive ]; }
expect_exit 0 "systemctl --user kill --signal=SIGTERM keychainfs" sd kill --signal=SIGTERM keychainfs.service
wait_for 10 unit_inactive
sleep 3   # past RestartSec=2
expect_eq "inactive success $restarts" "$(prop ActiveState) $(prop Result) $(prop NRestarts)" "SIGTERM stops it cleanly, and systemd does not restart it"
expect_exit 1 "nothing is left mounted after SIGTERM" in_ns grep -q " $U1_HOME/Keychain " /proc/self/mountinfo
expect_contains "$(journal)" "stop signal: forgetting every key and unmounting $U1_HOME/Keychain" "the journal says the signal stopped it"

# Log out (the manager stops) and log in again (a new manager starts default.target).
kill "$MANAGER"
wait_gone "$MANAGER"
expect_exit 0 "a new login's user manager starts" start_manager
wait_for 15 test "$(u1_state)" = before-first-unlock
expect_eq "before-first-unlock" "$(u1_state)" "at login the enabled unit mounts the keychain, locked"
expect_exit 0 "service uninstall" as_u1 "$ODD/keychainfs" service uninstall
expect_contains "$OUT" "removed $U1_HOME/.config/systemd/user/keychainfs.service" "it removes the unit file"
expect_exit 1 "uninstall stopped the mount" in_ns grep -q " $U1_HOME/Keychain " /proc/self/mountinfo
expect_exit 1 "and the unit is gone" test -e "$U1_HOME/.config/systemd/user/keychainfs.service"
expect_exit 1 "and disabled" sd is-enabled keychainfs.service
kill "$MANAGER"
wait_gone "$MANAGER"

finish
