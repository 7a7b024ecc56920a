#!/bin/sh
# Malformed config files (truncated tables, bad keys, random bytes) never abort a command:
# `mount` refuses each with exit 65 and the file and line, and `status` reports it and goes on.
# Python's own TOML parser (tomllib) says which files are not TOML at all; a file that is TOML
# may still be refused (a key or value that is not ours), but never crashes.
. "$(dirname "$0")/lib.sh"

CONFIG="$XDG_CONFIG_HOME/keychainfs/config.toml"
CASES="$TEST_ROOT/cases"
mkdir -p "$(dirname "$CONFIG")"

# Each case is a file, and a line in cases.txt: its name and whether tomllib refuses it.
/usr/bin/python3 - "$CASES" <<'PY' || exit 2
import os, random, sys, tomllib
out = sys.argv[1]
os.makedirs(out)
valid = ('mountpoint = "~/Keychain"\nlock-after = 900 # idle\n"default-accessible" = \'when-unlocked\'\n'
         'allow-root = false\n')
cases = [
    # table headers: what TOMLKit's parser asserted on, and their neighbours
    "[", "[[", "[.]", "[a.]", "[.a]", "[a..b]", "[ ]", "[[]]", "[[a]", "[a]]", "[a", "[[a]]]", "[a b]",
    "[=]", "[#]", '["a]', "['a]", "[\n", "[[\n", "\t[", " [.", "[[.]]", "[a.[b]]", "[{]", '["', "['",
    '[""]', "['']", '[a."]', "[\\]", "[a]\n[a]", "[a.b]\n[a]\nb=1", "a = 1\n[a]", "[[a]]\n[a]",
    "allow-root = true\n[", "mountpoint = \"/x\"\n\n  [[ ",
    # keys
    "a.=1", ".a=1", "a..b=1", ".=1", "=1", " = 1", "a = ", "a", "a =", '"a', "'a", 'a."b = 1',
    "a.'b = 1", "a.b.=1", 'a."".=1', "a=1\na=2", "lock-after = 1\nlock-after = 2", "lock_after = 1",
    "mountpoint.x = 1", '"mountpoint" = 1',
    # values
    "x = {", "x = {.", "x = {a.=1}", "x = {.a=1}", "x = {=1}", "x = {a=1,}", "x = {,}", "x = {a}",
    'x = {"a}', "x = [", "x = [1,", "x = [,]", "x = [1 2]", "x = 1 2", 'x = """', "x = '''",
    'x = "\\u00"', 'x = "\\x"', "x = 0x", "x = 1__0", "x = 1e", "x = 1979-05-27T", "x = +", "x = -",
    "x = tru", "x = {a = {", "x = [{", "x = [[", "x = [[1]", "x=[{a.=1}]", "x = 1.", "x = .1",
    '"\\', "x='\n'", 'x = "\\U0011FFFF"', "lock-after = -1", "lock-after = 1.5", 'allow-root = "yes"',
    'default-accessible = "sometimes"', 'mountpoint = "relative"', "mountpoint = [\n[\n1]]",
    # bytes the parser must not see
    "\x00", "a\x00 = 1", "[\x00]", "allow-root = true\n\x00[", "# \x7f", 'mountpoint = "/a\x01"',
]
files = []
def add(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    try:
        tomllib.loads(data.decode("utf-8"))
        files.append((name, "toml"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        files.append((name, "malformed"))
for i, c in enumerate(cases):
    add(f"case{i:03}", c.encode())
for n in range(1, len(valid), 3):
    add(f"truncated{n:03}", valid[:n].encode())
r = random.Random(16)
for i in range(25):
    add(f"random{i:03}", bytes(r.randrange(256) for _ in range(r.randrange(1, 64))))
for i in range(40):
    add(f"symbols{i:03}", "".join(r.choice("[]{}.=\"'#\n ,a1-_\\") for _ in range(r.randrange(1, 24))).encode())
with open(os.path.join(out, "cases.txt"), "w") as f:
    for name, kind in files:
        f.write(f"{name} {kind}\n")
PY

total=0 malformed=0 crashed="" wrong=""
while read -r name kind; do
    cp "$CASES/$name" "$CONFIG"
    total=$((total + 1))
    [ "$kind" = malformed ] && malformed=$((malformed + 1))
    kc mount --passphrase-file "$PASSFILE" >"$OUT" 2>"$ERR" </dev/null
    rc=$?
    # No store exists: a config that passes ends in "no such store" (50) before anything mounts.
    if [ $rc -ge 128 ]; then
        crashed="$crashed mount:$name($rc)"
    elif [ $rc -eq 65 ]; then
        grep -q "^keychainfs: $CONFIG:[0-9][0-9]*: " "$ERR" || wrong="$wrong mount:$name(no file:line)"
    elif [ "$kind" = malformed ] || [ $rc -ne 50 ]; then
        wrong="$wrong mount:$name($rc)"
    fi
    kc status >"$OUT" 2>"$ERR" </dev/null
    rc=$?
    if [ $rc -ge 128 ]; then
        crashed="$crashed status:$name($rc)"
    elif [ $rc -ne 69 ]; then
        wrong="$wrong status:$name($rc)"
    elif [ "$kind" = malformed ] && ! grep -q "^config error: $CONFIG:[0-9][0-9]*: " "$OUT"; then
        wrong="$wrong status:$name(no config error)"
    fi
done <"$CASES/cases.txt"

expect_eq 1 "$([ "$malformed" -ge 120 ] && echo 1)" "$malformed of $total files are not TOML"
expect_eq "" "$crashed" "no command crashed on any of them"
expect_eq "" "$wrong" "mount refused every malformed file with exit 65 naming its line; status reported it"
for f in "[" "[[" "[.]"; do
    printf '%s\n' "$f" >"$CONFIG"
    expect_exit 65 "mount with a config of '$f': 65" kc mount --passphrase-file "$PASSFILE"
    expect_contains "$ERR" "$CONFIG:1: a table header needs a name" "which says what is wrong, and where"
done
rm -f "$CONFIG"
finish
