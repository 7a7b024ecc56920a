#!/bin/sh
# Coherence: a change made through the CLI or git shows in the mount at once, with no sleep,
# although the kernel keeps names and attributes (the daemon tells it of every change it did
# not make). The five cases of issue 22, then the model test's shrunk regressions, then the
# model test itself (Tests/integration/model_test.py) at a fixed seed. On a private session
# bus, so that changes made through the Secret Service are tested too.
. "$(dirname "$0")/private_bus.sh"
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

GIT_HELPER_BIN=${GIT_HELPER_BIN:-$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs}
git_cred() {
    action=$1
    shift
    printf '%s\n' "$@" | "$GIT_HELPER_BIN" "$action" >"$OUT" 2>"$ERR"
}

init_store
expect_exit 0 "mount --secret-service" mount_kc "$MP" --secret-service

echo "== 1. a name deleted through the CLI can be written again through the mount at once"
echo one >"$MP/s/a" 2>/dev/null || { mkdir "$MP/s" && echo one >"$MP/s/a"; }
expect_eq "one" "$(cat "$MP/s/a")" "written through the mount"
expect_exit 0 "delete-generic-password" kc delete-generic-password -s s -a a
expect_exit 0 "then echo two > M/s/a succeeds" sh -c 'echo two >"$1"' sh "$MP/s/a"
expect_eq "two" "$(cat "$MP/s/a")" "and reads two"
expect_eq "two" "$(kc find-generic-password -s s -a a -w)" "the CLI finds two"

echo "== 2. a name erased through git can be written again through the mount at once"
git_cred store protocol=https host=coh.example username=u password=pw1
G="$MP/internet/coh.example/443/u"
expect_eq "pw1" "$(cat "$G")" "git's item read through the mount"
git_cred erase protocol=https host=coh.example username=u
expect_exit 0 "after git erase, a write of pw2 to the file succeeds" sh -c 'printf pw2 >"$1"' sh "$G"
expect_eq "pw2" "$(cat "$G")" "and reads pw2"
git_cred get protocol=https host=coh.example username=u
expect_contains "$OUT" "password=pw2" "git gets pw2"

echo "== 3. after a CLI delete, stat and test -e fail at once"
kc add-generic-password -s s -a gone -w present >/dev/null
expect_eq "7" "$(stat -c %s "$MP/s/gone")" "stat sees it (and the kernel caches it)"
kc delete-generic-password -s s -a gone >/dev/null 2>&1
expect_exit 1 "test -e fails at once" test -e "$MP/s/gone"
expect_exit 1 "stat fails at once" stat "$MP/s/gone"
expect_not_contains "$(ls "$MP/s")" "gone" "ls does not list it"

echo "== 4. after add -U with a longer value, st_size is the new size at once"
kc add-generic-password -s s -a grow -w short >/dev/null
expect_eq "5" "$(stat -c %s "$MP/s/grow")" "the first size"
kc add-generic-password -U -s s -a grow -w "a much longer secret" >/dev/null
expect_eq "20" "$(stat -c %s "$MP/s/grow")" "the new size at once"
# A reader that trusts st_size reads exactly that many bytes.
expect_eq "a much longer secret" "$(python3 -c 'import os,sys; p=sys.argv[1]; print(open(p,"rb").read(os.stat(p).st_size).decode())' "$MP/s/grow")" \
    "a read of st_size bytes is whole"
python3 - "$MP/s/grow" <<'PY' >"$OUT" 2>&1
import mmap, sys
with open(sys.argv[1], "rb") as f:
    print(mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)[:].decode())
PY
expect_eq "a much longer secret" "$(cat "$OUT")" "a private mapping holds the whole new value"
kc add-generic-password -U -s s -a grow -w tiny >/dev/null
expect_eq "4" "$(stat -c %s "$MP/s/grow")" "and a shorter one at once"
ls -l "$MP/s" >/dev/null
kc add-generic-password -s s -a new -w fresh >/dev/null
expect_contains "$(ls "$MP/s")" "new" "a name the CLI adds is listed at once"
expect_eq "5" "$(stat -c %s "$MP/s/new")" "and its size is right"

echo "== 5. an update through git keeps the attributes it was not asked to change"
git_cred store protocol=https host=label.example username=u password=first
L="$MP/internet/label.example/443/u"
expect_eq "label.example (git)" "$(getfattr --absolute-names --only-values -n user.keychain.label "$L")" "a new git item is labelled <host> (git)"
setfattr -n user.keychain.label -v "My label" "$L"
setfattr -n user.keychain.comment -v "kept" "$L"
git_cred store protocol=https host=label.example username=u password=second
expect_eq "My label" "$(getfattr --absolute-names --only-values -n user.keychain.label "$L")" "git store keeps the label"
expect_eq "kept" "$(getfattr --absolute-names --only-values -n user.keychain.comment "$L")" "and the comment"
expect_eq "second" "$(cat "$L")" "and changes the password"
kc add-internet-password -U -s label.example -a u -w third >/dev/null
expect_eq "My label" "$(getfattr --absolute-names --only-values -n user.keychain.label "$L")" "the CLI's -U keeps it too"
printf 'fourth' >"$TEST_ROOT/f4" && cp "$TEST_ROOT/f4" "$MP/internet/label.example/443/tmp" \
    && mv "$MP/internet/label.example/443/tmp" "$L"
expect_eq "My label" "$(getfattr --absolute-names --only-values -n user.keychain.label "$L")" "and a rename over it"

echo "== 6. a service directory's listing, which the kernel keeps, follows every change at once"
# The listing is cached by the kernel (cache_readdir) once read whole; each change below must
# show in the next listing with no sleep: those the kernel makes, and those the daemon tells it.
mkdir "$MP/lst" && printf a >"$MP/lst/one" && printf b >"$MP/lst/two"
listing() { ls "$MP/lst" | tr '\n' ' '; }
expect_eq "one two " "$(listing)" "listed"
expect_eq "one two " "$(listing)" "listed again (from the kernel's cache)"
kc add-generic-password -s lst -a three -w c >/dev/null
expect_eq "one three two " "$(listing)" "a name the CLI adds"
kc delete-generic-password -s lst -a one >/dev/null 2>&1
expect_eq "three two " "$(listing)" "a name the CLI deletes"
printf 'over-dbus' | secret-tool store --label=x service lst username four >/dev/null 2>&1
expect_eq "four three two " "$(listing)" "a name D-Bus adds"
git_cred store protocol=https host=lst.example username=u password=p
expect_eq "four three two " "$(listing)" "unchanged by a change elsewhere"
mv "$MP/lst/two" "$MP/lst/five"
expect_eq "five four three " "$(listing)" "a rename through the mount"
rm "$MP/lst/three"
expect_eq "five four " "$(listing)" "an unlink through the mount"
printf d >"$MP/lst/six"
expect_eq "five four six " "$(listing)" "a create through the mount"
mkdir "$MP/lst2" && mv "$MP/lst/five" "$MP/lst2/five"
expect_eq "four six " "$(listing)" "a move to another directory"
expect_eq "five" "$(ls "$MP/lst2")" "listed there"
kc add-generic-password -U -s lst -a six -w longer >/dev/null
expect_eq "four six " "$(listing)" "a value changed through the CLI leaves the names"
expect_eq "longer" "$(cat "$MP/lst/six")" "and is read at once"

echo "== 7. a name looked up under another spelling follows every change at once too"
# The kernel is told of a change under the names the tree lists; `%41lias` (any valid escape)
# and `%~SSH` (a protocol in capitals) name the same items and are never cached.
mkdir "$MP/al" && printf v >"$MP/al/Alias"
expect_eq "1" "$(stat -c %s "$MP/al/%41lias")" "an escaped spelling names the item"
expect_eq "1" "$(stat -c %s "$MP/al/%41lias")" "and again"
kc add-generic-password -U -s al -a Alias -w longer-value >/dev/null
expect_eq "12" "$(stat -c %s "$MP/al/%41lias")" "a value the CLI changed: the new size at once"
expect_eq "longer-value" "$(cat "$MP/al/%41lias")" "and the new value"
printf x >"$MP/al/Alias"
expect_eq "1" "$(stat -c %s "$MP/al/%41lias")" "a value changed through the listed name"
kc delete-generic-password -s al -a Alias >/dev/null 2>&1
expect_exit 1 "a name the CLI deleted: test -e fails at once" test -e "$MP/al/%41lias"
printf n >"$MP/al/%41lias"
expect_eq "Alias" "$(ls "$MP/al")" "a file created under an escaped spelling is listed by its name"
rm "$MP/al/Alias"
expect_exit 1 "removed through the listed name: the other spelling is gone at once" test -e "$MP/al/%41lias"
# A directory renamed onto another spelling: what lies below it is held under that spelling too.
mkdir "$MP/rn" && printf v >"$MP/rn/x"
mv "$MP/rn" "$MP/%72n2"
expect_eq "rn2" "$(ls "$MP" | grep '^rn')" "a service renamed to an escaped spelling is listed by its name"
expect_eq "1" "$(stat -c %s "$MP/%72n2/x")" "an item below the directory, by the spelling it was renamed to"
kc add-generic-password -U -s rn2 -a x -w longer-value >/dev/null
expect_eq "12" "$(stat -c %s "$MP/%72n2/x")" "a value the CLI changed below it: the new size at once"
expect_eq "longer-value" "$(cat "$MP/%72n2/x")" "and the new value"
git_cred store protocol=ssh host=al.example username=u password=ssh-one
SSH="$MP/internet/al.example/22/u"
expect_eq "ssh-one" "$(cat "$SSH%~SSH")" "an internet item under its protocol in capitals"
git_cred store protocol=ssh host=al.example username=u password=ssh-two
expect_eq "ssh-two" "$(cat "$SSH%~SSH")" "changed through git: read at once"
git_cred erase protocol=ssh host=al.example username=u
expect_exit 1 "erased through git: test -e fails at once" test -e "$SSH%~SSH"

echo "== 8. a change made through the mount under one name of an item reaches its other names"
# The kernel keeps the listed name's entry for 60 s; it is told of a change made under another
# spelling, a directory so spelled, or an internet item's other listed name right after the
# request is answered (the kernel holds the directory's lock until then), so within a moment.
soon() {
    tries=0
    until "$@"; do
        tries=$((tries + 1))
        [ "$tries" -ge 20 ] && return 1
        sleep 0.05
    done
}
size_is() { [ "$(stat -c %s "$2" 2>/dev/null)" = "$1" ]; }
printf v >"$MP/al/Bob"
expect_eq "1" "$(stat -c %s "$MP/al/Bob")" "the listed name, kept by the kernel"
printf vvv >"$MP/al/%42ob"
expect_exit 0 "a value written under an escaped spelling: the listed name's new size" soon size_is 3 "$MP/al/Bob"
rm "$MP/al/%42ob"
expect_exit 0 "removed under an escaped spelling: the listed name is gone" soon sh -c '! test -e "$1"' sh "$MP/al/Bob"
printf v >"$MP/al/Bob"
expect_eq "1" "$(stat -c %s "$MP/%61l/Bob")" "a listed name below a directory spelled otherwise"
kc add-generic-password -U -s al -a Bob -w longer-value >/dev/null
expect_eq "12" "$(stat -c %s "$MP/%61l/Bob")" "is not kept either: a value the CLI changed shows at once"
kc delete-generic-password -s al -a Bob >/dev/null 2>&1
expect_exit 1 "a name the CLI deleted: gone there at once" test -e "$MP/%61l/Bob"
printf v >"$MP/al/Bob"
expect_eq "1" "$(stat -c %s "$MP/al/Bob")" "the listed name, kept again"
printf vvvv >"$MP/%61l/Bob"
expect_exit 0 "written below the directory spelled otherwise: the listed name's new size" soon size_is 4 "$MP/al/Bob"
kc add-internet-password -s two.example -a u -r htps -P 443 -w one >/dev/null
TWO="$MP/internet/two.example/443"
expect_eq "3" "$(stat -c %s "$TWO/u")" "an internet item's plain name, kept by the kernel"
expect_eq "3" "$(stat -c %s "$TWO/u%~https")" "and its tagged name"
printf 12345 >"$TWO/u%~https"
expect_exit 0 "written under the tagged name: the plain name's new size" soon size_is 5 "$TWO/u"
printf 1234567 >"$TWO/u"
expect_exit 0 "written under the plain name: the tagged name's new size" soon size_is 7 "$TWO/u%~https"
rm "$TWO/u%~https"
expect_exit 0 "removed under the tagged name: the plain name is gone" soon sh -c '! test -e "$1"' sh "$TWO/u"

echo "== model test regressions (the shrunk steps, replayed)"
# seed 1: cli_add(svc/a, 5 bytes); write(svc/a, b'', overwrite). An O_TRUNC with no write is
# committed at the release, which the kernel sends after close(2) returns: a stat between the
# two showed the old size, and the kernel kept it.
mkdir "$MP/my service"
printf 'abcde' | kc add-generic-password -s "my service" -a a
expect_eq "5" "$(stat -c %s "$MP/my service/a")" "regression 1: the CLI's 5 bytes"
: >"$MP/my service/a"
expect_eq "0" "$(stat -c %s "$MP/my service/a")" "regression 1: truncated through the mount, stat says 0 at once"
expect_eq "" "$(kc find-generic-password -s "my service" -a a -w)" "regression 1: and the CLI finds it empty"
printf 'abcde' >"$MP/my service/b"
: >"$MP/my service/b"
expect_eq "0" "$(stat -c %s "$MP/my service/b")" "regression 1: the same for an item made through the mount"

# seed 1, again: cli_add(svc/a, b'\0'); write(svc/a, b'', overwrite); a read right after close(2)
# got the old byte: an O_TRUNC with no write is committed at the release (README, "Documented,
# not silent"); fsync commits it at once.
printf '\0' | kc add-generic-password -s "my service" -a c
python3 - "$MP/my service/c" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
os.fsync(fd)
os.close(fd)
PY
expect_eq "0" "$(stat -c %s "$MP/my service/c")" "regression 2: O_TRUNC and fsync: stat says 0 at once"
expect_eq "0" "$(wc -c <"$MP/my service/c")" "regression 2: a read finds it empty at once"
expect_eq "0" "$(kc find-generic-password -s "my service" -a c -w | wc -c)" "regression 2: and the CLI too"

# seed 1, with D-Bus steps: dbus_create(svc/x*255, replace=False) twice. The second item's
# name, `x...x (2)`, was 259 bytes: CreateItem failed ("already exists") where the mapping rule
# promises a second item; its account is now cut to fit, and it keeps the account given.
/usr/bin/python3 - "$MP" <<'PY' >"$OUT" 2>&1
import os, sys, secretstorage
mp = sys.argv[1]
long = "x" * 255
conn = secretstorage.dbus_init()
coll = secretstorage.get_default_collection(conn)
attrs = {"service": "svc", "account": long, "username": long}
first = coll.create_item("first", attrs, b"one", replace=False)
second = coll.create_item("second", attrs, b"two", replace=False)
print(sorted(n.replace(long, "L").replace("x" * 251, "C") for n in os.listdir(os.path.join(mp, "svc"))))
print(os.stat(os.path.join(mp, "svc", "x" * 251 + " (2)")).st_size, second.get_attributes()["account"] == long)
print(sorted(i.get_secret().decode() for i in coll.search_items({"service": "svc", "account": long})))
second.delete()
print(os.path.exists(os.path.join(mp, "svc", "x" * 251 + " (2)")))
PY
expect_eq "['C (2)', 'L']
3 True
['one', 'two']
False" "$(cat "$OUT")" "regression 3: CreateItem without replace over a 255-byte name: a second item, its name cut to fit, at once"

echo "== pending new files and kept writers (the model test once stepped around these)"
# A writer held open by a process that never forks (a fork's close of its copy is a flush,
# which commits): `held PATH FLAGS STEPS...` runs the steps one by one, each once the file
# $TEST_ROOT/go.N exists, and prints what each gave; `step N` lets step N run and waits for it
# (or for the holder's end).
held() {
    rm -f "$TEST_ROOT"/go.* "$TEST_ROOT"/done.*
    /usr/bin/python3 - "$TEST_ROOT" "$@" <<'PY' >"$OUT" 2>&1 &
import os, sys, time
root, path, flags, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
fd = os.open(path, eval(flags), 0o600)
for n, step in enumerate(steps, 1):
    while not os.path.exists(f"{root}/go.{n}"): time.sleep(0.01)
    try:
        r = eval(step, {"os": os, "fd": fd, "sys": sys})
        print(step, "->", "ok" if r is None else r, flush=True)
    except OSError as e:
        print(step, "->", os.strerror(e.errno), flush=True)
    open(f"{root}/done.{n}", "w").close()
PY
    HELD=$!
}
step() {
    : >"$TEST_ROOT/go.$1"
    # Not forever: a holder that died (its error is in $OUT) writes no more.
    while [ ! -e "$TEST_ROOT/done.$1" ] && kill -0 "$HELD" 2>/dev/null; do sleep 0.01; done
}

# A new file pending when a lock took its class key is dropped at its close: stat found it for
# the entry timeout (60 s) while ls did not list it.
mkdir -p "$MP/pend"
held "$MP/pend/revoked" "os.O_WRONLY|os.O_CREAT|os.O_EXCL" "os.write(fd, b'abc')" "os.close(fd)"
step 1
kc lock "$MP" >/dev/null; kc unlock "$MP" --passphrase-file "$PASSFILE" >/dev/null
expect_exit 0 "the pending file is there until its close (and the kernel caches its attributes)" stat "$MP/pend/revoked"
step 2; wait "$HELD"
expect_contains "$OUT" "os.close(fd) -> Required key not available" "a pending file revoked by a lock: close says ENOKEY"
expect_exit 1 "and stat no longer finds it, at once (not for 60 s)" test -e "$MP/pend/revoked"
# fsync(2) says ENOKEY too, but drops nothing: the kernel holds the file's lock across it, so
# it could not be told before the reply; the close that follows drops the file.
held "$MP/pend/synced" "os.O_WRONLY|os.O_CREAT|os.O_EXCL" "os.write(fd, b'abc')" "os.fsync(fd)" \
    "('after fsync', os.path.exists(sys.argv[2]))" "os.close(fd)" "('after close', os.path.exists(sys.argv[2]))"
step 1
stat "$MP/pend/synced" >/dev/null
kc lock "$MP" >/dev/null; kc unlock "$MP" --passphrase-file "$PASSFILE" >/dev/null
step 2; step 3; step 4; step 5; wait "$HELD"
expect_contains "$OUT" "os.fsync(fd) -> Required key not available" "the same with fsync: ENOKEY"
expect_contains "$OUT" "('after fsync', True)" "the file stays until its close"
expect_contains "$OUT" "os.close(fd) -> Required key not available" "whose close says ENOKEY"
expect_contains "$OUT" "('after close', False)" "and the name is gone when close returns"

# The CLI stores the name of a file still pending through the mount: the stored item takes the
# name at once. An ftruncate through the pending file's descriptor showed its size for the
# stored item, and after a CLI delete of it, ls listed the name again.
held "$MP/pend/taken" "os.O_RDWR|os.O_CREAT|os.O_EXCL" "os.write(fd, b'abc')" "os.ftruncate(fd, 10)" \
    "(os.fstat(fd).st_size, os.fstat(fd).st_nlink)" "os.close(fd)"
step 1
kc add-generic-password -s pend -a taken -w xy
expect_eq "2" "$(stat -c %s "$MP/pend/taken")" "the CLI's item takes the name of the pending file at once"
step 2
expect_eq "2" "$(stat -c %s "$MP/pend/taken")" "an ftruncate through the pending file does not change the stored item's size"
expect_eq "xy" "$(cat "$MP/pend/taken")" "which reads the CLI's value"
kc delete-generic-password -s pend -a taken >/dev/null 2>&1
expect_eq "" "$(ls "$MP/pend")" "after the CLI deletes it, ls lists nothing (the pending file lost its name)"
step 3; step 4; wait "$HELD"
expect_contains "$OUT" "-> (10, 0)" "the pending file's descriptor: its own copy, with no links"
expect_contains "$OUT" "os.close(fd) -> File exists" "its close says EEXIST"
expect_eq "" "$(ls "$MP/pend")" "and stores nothing"

# A writer's uncommitted copy, a value stored elsewhere, then a delete: fstat showed the item's
# last size (2) rather than the copy's (8).
kc add-generic-password -s pend -a copy -w abc
held "$MP/pend/copy" "os.O_RDWR" "os.pwrite(fd, b'12345678', 0)" "(os.fstat(fd).st_size, os.fstat(fd).st_nlink)" "os.close(fd)"
step 1
kc add-generic-password -U -s pend -a copy -w xy
expect_eq "2" "$(stat -c %s "$MP/pend/copy")" "the value stored elsewhere shows at once"
kc delete-generic-password -s pend -a copy >/dev/null 2>&1
step 2; step 3; wait "$HELD"
expect_contains "$OUT" "-> (8, 0)" "after the delete, fstat of the writer shows its own copy's size"

echo "== a descriptor open across a CLI delete"
kc add-generic-password -s s -a held -w "held value" >/dev/null
python3 - "$MP/s/held" "$KEYCHAINFS_BIN" <<'PY' >"$OUT" 2>&1
import os, subprocess, sys
path, kc = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDONLY)
subprocess.run([kc, "delete-generic-password", "-s", "s", "-a", "held"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(os.path.exists(path), os.fstat(fd).st_nlink, os.pread(fd, 100, 0).decode())
os.close(fd)
PY
expect_eq "False 0 held value" "$(cat "$OUT")" "the name is gone, the descriptor reads what it opened, with no links"

echo "== documented, not silent"
kc add-generic-password -s s -a doc -w documented >/dev/null
python3 - "$MP/s/doc" <<'PY' >"$OUT" 2>&1
import errno, mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
for prot in [mmap.PROT_READ | mmap.PROT_WRITE, mmap.PROT_READ]:
    try:
        mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=prot)
        print("mapped")
    except OSError as e:
        print(errno.errorcode[e.errno])
print(mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)[:].decode())
PY
expect_eq "ENODEV
ENODEV
documented" "$(cat "$OUT")" "a shared mmap is ENODEV, writable or read-only; a private one works"
expect_errno "an xattr outside user.keychain.* is ENOTSUP" "Operation not supported" \
    setfattr -n user.other -v x "$MP/s/doc"
python3 - "$MP/s/doc" "$KEYCHAINFS_BIN" "$MP" "$PASSFILE" <<'PY' >"$OUT" 2>&1
import errno, os, subprocess, sys
path, kc, mp, passfile = sys.argv[1:]
fd = os.open(path, os.O_RDWR)
subprocess.run([kc, "lock", mp], check=True, stdout=subprocess.DEVNULL)
subprocess.run([kc, "unlock", mp, "--passphrase-file", passfile], check=True, stdout=subprocess.DEVNULL)
for what, op in [("read", lambda: os.pread(fd, 10, 0)), ("write", lambda: os.pwrite(fd, b"x", 0))]:
    try:
        op()
        print(what, "worked")
    except OSError as e:
        print(what, errno.errorcode[e.errno])
os.close(fd)
print(open(path).read())
PY
expect_eq "read ENOKEY
write ENOKEY
documented" "$(cat "$OUT")" "a descriptor opened before a lock is ENOKEY after the unlock; a new open reads"

kc unmount "$MP" >/dev/null

echo "== the model test"
# scripts/test: 2,000 steps at seed 1; scripts/test --long: 50,000 at a random seed, printed.
steps=${MODEL_TEST_STEPS:-2000}
seed=${MODEL_TEST_SEED:-1}
if [ "$seed" = random ]; then seed_arg=""; else seed_arg="--seed $seed"; fi
# shellcheck disable=SC2086
if KEYCHAINFS_BIN="$KEYCHAINFS_BIN" /usr/bin/python3 "$TESTS_DIR/model_test.py" --steps "$steps" $seed_arg; then
    pass "the model test: $steps steps agree with the model"
else
    fail "the model test: a disagreement (its shrunk steps are printed above)"
fi
finish
