#!/usr/bin/python3
"""The model test: a stateful property test of coherence (issue 22).

A seeded random sequence of steps is applied to one real mount and its real channels (the
mount itself, the keychainfs CLI, git-credential-keychainfs, lock and unlock, the Secret
Service on a private session bus, and sync with a second device that is not mounted), and to
a plain in-memory model at the same time. After every step, with no sleep, every observation
is compared with the model: existence and st_size of every name, content, sorted directory
listings, the label xattr, descriptors kept open across steps (pread and fstat), and for the
names the step touched the CLI's `find -w` and a D-Bus search (labels and secrets).

Kept descriptors are readers and writers (O_WRONLY or O_RDWR, with or without O_TRUNC and
O_APPEND, on an item or a new one, O_CREAT|O_EXCL), held by a process that never forks. The
model of a writer: its own copy, which its writes and ftruncate change and its pread (O_RDWR)
reads; its close commits that whole copy if it wrote since its last commit, fsync commits it
and a pending O_TRUNC or create, and the release (just after close(2)) commits an O_TRUNC or a
create with no write; so two writers of one item end with the one closed last. A value stored
through another channel (CLI, git, D-Bus, sync) drops the uncommitted writes, a label, class
(xattr) or rename does not; a lock revokes a writer as a reader; a commit to an item deleted or
replaced goes nowhere. While a writer holds uncommitted changes, `stat` shows its copy's size
and a new reader the stored value. A new file is pending until a commit: the mount shows it,
the other channels do not, and one of them storing its name makes its commit fail (EEXIST).
Hypothesis shrinks a failure to its shortest sequence and prints it as steps a person can
replay; the first disagreement is also printed when it happens.

    model_test.py [--steps N] [--seed N]

It mounts once per run; each example starts by emptying the mount. Run it with Debian's
/usr/bin/python3 (python3-hypothesis). scripts/test runs a fixed seed and 2,000 steps;
`scripts/test --long` 50,000 steps with a random seed, which it prints.
"""
import argparse
import errno
import functools
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

# Hypothesis keeps a cache directory; not in the repository.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "kcfs-model-hypothesis"))

from hypothesis import HealthCheck, Verbosity, seed, settings
from hypothesis.errors import Flaky
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test
import secretstorage

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(TESTS))
KC = os.environ.get("KEYCHAINFS_BIN", os.path.join(REPO, ".build/debug/keychainfs"))
GIT_HELPER = os.path.join(os.path.dirname(KC), "git-credential-keychainfs")
PASSPHRASE = "model test passphrase"

SERVICES = ["svc", "my service", ".hidden", "ünï"]
ACCOUNTS = ["a", "b c", ".dot", "ünïcode ✓", "x" * 255]
HOST = "host.example"
INTERNET_ACCOUNTS = ["git", "ïnt user", "y" * 255]
CLASSES = ["when-unlocked", "after-first-unlock", "always"]
# Readable while locked (after the first unlock).
READABLE_LOCKED = {"after-first-unlock", "always"}
LABELS = ["My label", "ünï label", "", "x" * 100]
STEPS_PER_EXAMPLE = 50
# Descriptors kept open across steps, readers and writers together.
MAX_KEPT = 4
# Where the device keeps its sync key, a this-device-only item (README, Sync): left alone.
SYNC_KEY_DIR = "keychainfs-sync"


def escape(name):
    """TreeName.escape."""
    if name == "":
        return "%"
    if name in (".", ".."):
        return "%2E" * len(name)
    return name.replace("%", "%25").replace("/", "%2F").replace("\0", "%00")


# The holder of the descriptors kept across steps: a process of its own that never forks. A
# fork copies every descriptor, and the child's close of the copy (at exec, or close_fds) is a
# close to FUSE too: a flush, which commits what the writer wrote (as NFS's close-to-open). Kept
# in this process, each CLI or git step would commit the kept writers' writes first, and a
# value stored elsewhere would never meet an uncommitted one (which hid the bug 74b7384 fixed).
HOLDER = r"""
import base64, json, os, sys
for line in sys.stdin:
    req = json.loads(line)
    op, fd = req["op"], req.get("fd")
    try:
        if op == "open":
            res = os.open(req["path"], req["flags"], 0o600)
        elif op == "pwrite":
            res = os.pwrite(fd, base64.b64decode(req["data"]), req["offset"])
        elif op == "pread":
            res = base64.b64encode(os.pread(fd, 1 << 16, 0)).decode()
        elif op == "fstat":
            st = os.fstat(fd)
            res = [st.st_size, st.st_nlink]
        elif op == "ftruncate":
            res = os.ftruncate(fd, req["size"])
        elif op == "fsync":
            res = os.fsync(fd)
        elif op == "close":
            res = os.close(fd)
        out = {"ok": res}
    except OSError as e:
        out = {"errno": e.errno}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
"""


class Holder:
    def __init__(self):
        self.proc = subprocess.Popen(["/usr/bin/python3", "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def call(self, op, fd=None, **kw):
        import json
        self.proc.stdin.write(json.dumps({"op": op, "fd": fd, **kw}) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self.proc.stdout.readline())
        if "errno" in out:
            raise OSError(out["errno"], os.strerror(out["errno"]))
        return out["ok"]

    def open(self, path, flags):
        return self.call("open", path=path, flags=flags)

    def pwrite(self, fd, data, offset):
        import base64
        return self.call("pwrite", fd, data=base64.b64encode(data).decode(), offset=offset)

    def pread(self, fd):
        import base64
        return base64.b64decode(self.call("pread", fd))

    def fstat(self, fd):
        return tuple(self.call("fstat", fd))

    def ftruncate(self, fd, size):
        self.call("ftruncate", fd, size=size)

    def fsync(self, fd):
        self.call("fsync", fd)

    def close(self, fd):
        self.call("close", fd)

    def end(self):
        self.proc.stdin.close()
        self.proc.wait()


class Mount:
    """One store, mounted once per run, with its own HOME and XDG directories."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="kcfs-model.")
        env = dict(os.environ)
        for var, sub in [("HOME", "home"), ("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state"),
                         ("XDG_RUNTIME_DIR", "run"), ("XDG_CONFIG_HOME", "config")]:
            env[var] = os.path.join(self.root, sub)
            os.makedirs(env[var], mode=0o700, exist_ok=True)
        env["KEYCHAINFS_STORE"] = os.path.join(self.root, "data/keychainfs/keychain.db")
        env.pop("KEYCHAINFS_PASSPHRASE", None)
        self.env = env
        self.passfile = os.path.join(self.root, "passphrase")
        with open(self.passfile, "w") as f:
            f.write(PASSPHRASE + "\n")
        os.chmod(self.passfile, 0o600)
        self.mp = os.path.join(self.root, "mnt")
        os.mkdir(self.mp)
        self.pid = None
        self.bus = None
        self.holder = None
        # A private session bus (session_bus.conf: no service files, so nothing such as
        # gnome-keyring is activated in keychainfs's place), for this process and the daemon.
        self.bus = subprocess.Popen(["dbus-daemon", f"--config-file={os.path.join(TESTS, 'session_bus.conf')}",
                                     "--nofork", "--print-address=1"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        address = self.bus.stdout.readline().decode().strip()
        if not address:
            raise RuntimeError("dbus-daemon gave no address")
        env["DBUS_SESSION_BUS_ADDRESS"] = os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
        # Every new item is synchronizable (none of the classes used is this-device-only), so
        # that device B can change any of them.
        os.makedirs(os.path.join(env["XDG_CONFIG_HOME"], "keychainfs"))
        with open(os.path.join(env["XDG_CONFIG_HOME"], "keychainfs", "config.toml"), "w") as f:
            f.write("default-synchronizable = true\n")
        self.syncpass = os.path.join(self.root, "sync-passphrase")
        with open(self.syncpass, "w") as f:
            f.write("model test sync passphrase\n")
        self.folder = os.path.join(self.root, "sync-folder")
        self.kc("init", "--scrypt-log-n", "10", "--passphrase-file", self.passfile, check=True)
        self.kc("sync", "init", self.folder, "--passphrase-file", self.passfile, "--sync-passphrase-file", self.syncpass,
                "--scrypt-log-n", "10", check=True)
        # Device B: its own HOME, XDG directories and store, never mounted, joined to the folder.
        self.env_b = dict(env)
        for var, sub in [("HOME", "b/home"), ("XDG_DATA_HOME", "b/data"), ("XDG_STATE_HOME", "b/state"),
                         ("XDG_RUNTIME_DIR", "b/run"), ("XDG_CONFIG_HOME", "b/config")]:
            self.env_b[var] = os.path.join(self.root, sub)
            os.makedirs(self.env_b[var], mode=0o700, exist_ok=True)
        self.env_b["KEYCHAINFS_STORE"] = os.path.join(self.root, "b/data/keychainfs/keychain.db")
        self.kc_b("init", "--scrypt-log-n", "10", check=True)
        self.kc_b("sync", "join", self.folder, "--sync-passphrase-file", self.syncpass, check=True)
        self.kc("mount", self.mp, "--secret-service", "--passphrase-file", self.passfile, check=True)
        with open(env["KEYCHAINFS_STORE"] + ".daemon") as f:
            import json
            self.pid = json.load(f)["pid"]
        self.dbus = secretstorage.dbus_init()
        self.collection = secretstorage.get_default_collection(self.dbus)
        # One session for the run: each client may hold 64.
        self.collection.session = secretstorage.util.open_session(self.dbus)
        self.holder = Holder()

    def kc(self, *args, stdin=b"", check=False):
        r = subprocess.run([KC, *args], input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        if check and r.returncode != 0:
            raise RuntimeError(f"keychainfs {' '.join(args)}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
        return r

    def kc_b(self, *args, stdin=b"", check=False):
        """Device B's CLI (not mounted: the command's own owner, with the passphrase file)."""
        r = subprocess.run([KC, *args, "--passphrase-file", self.passfile], input=stdin, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=self.env_b)
        if check and r.returncode != 0:
            raise RuntimeError(f"B: keychainfs {' '.join(args)}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
        return r

    def git(self, action, lines):
        text = "".join(f"{line}\n" for line in lines).encode()
        return subprocess.run([GIT_HELPER, action], input=text, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)

    def close(self):
        if self.holder is not None:
            self.holder.end()
        if getattr(self, "dbus", None) is not None:
            self.dbus.close()
        # Each step on its own: one that cannot even start (the binary being rebuilt:
        # ETXTBSY) must not leave the mount and its daemon behind.
        for argv, env in [([KC, "unmount", self.mp], self.env), (["fusermount3", "-u", "-z", self.mp], None)]:
            try:
                subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            except OSError:
                pass
        if self.pid:
            try:
                os.kill(self.pid, 15)
            except ProcessLookupError:
                pass
        if self.bus is not None:
            self.bus.terminate()
            self.bus.wait()
        shutil.rmtree(self.root, ignore_errors=True)


MOUNT = None
STARTED = time.monotonic()
STEPS_RUN = 0
# How many times each step ran, printed at the end: what the run covered.
COUNTS = {}
TARGET = 0
# Set at the first disagreement: from then on Hypothesis replays and shrinks, so the run must
# not be declared finished under it.
FAILED = False


def tracked(fn):
    """Marks the run as failing at any exception of a step or an observation, so that the
    replays Hypothesis makes to shrink it are not cut short by `running`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if running():
            COUNTS[fn.__name__] = COUNTS.get(fn.__name__, 0) + 1
            if fn.__name__ != "observations_agree":
                EXAMPLE.append(f"{fn.__name__}({', '.join(f'{k}={v!r}' for k, v in sorted(kwargs.items()))})")
        try:
            return fn(*args, **kwargs)
        except BaseException as e:
            first_failure(e)
            raise
    return wrapper


# The steps of the example running: printed with the first disagreement, since shrinking on a
# real mount may take many minutes.
EXAMPLE = []


def first_failure(e):
    """Prints the first disagreement as it happens: should its replay not fail again (Hypothesis
    then reports the run as flaky, not the disagreement), it is still known."""
    global FAILED
    if not FAILED:
        FAILED = True
        import traceback
        print(f"model test: the first disagreement, at step {STEPS_RUN}: {e!r}, after these steps of its example:",
              flush=True)
        for step in EXAMPLE:
            print(f"    {step[:300]}", flush=True)
        traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()


def running(_machine=None):
    """Until enough steps ran (or once a disagreement was seen, while it is shrunk)."""
    return FAILED or STEPS_RUN < TARGET


def generic(service, account):
    return ("g", service, account)


def internet(account):
    return ("i", HOST, account)


KEYS = [generic(s, a) for s in SERVICES for a in ACCOUNTS] + [internet(a) for a in INTERNET_ACCOUNTS]
keys = st.sampled_from(KEYS)
generic_keys = st.sampled_from([k for k in KEYS if k[0] == "g"])
internet_accounts = st.sampled_from(INTERNET_ACCOUNTS)
secrets = st.one_of(st.just(b""), st.just(b"\0"), st.just(b"nul\0inside\0"), st.binary(max_size=48),
                    st.text(max_size=24).map(str.encode))
# Which of the likely names a step takes (Coherence.picked).
picks = st.integers(min_value=0, max_value=63)
# What a kept writer writes (None: nothing); an empty write would not reach the daemon.
kept_data = st.one_of(st.just(b"\0"), st.binary(min_size=1, max_size=24))
kept_writes = st.one_of(st.none(), kept_data)
# git passwords are lines of text.
git_passwords = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=24)


class Item:
    """`base`: for an item a D-Bus CreateItem made distinct (`a (2)`), the key whose natural
    attributes it was given (it keeps them over D-Bus); `dbus_path` is known for those."""

    def __init__(self, secret, ident, label=None, cls="when-unlocked", base=None, dbus_path=None, pending=False):
        self.secret, self.ident, self.label, self.cls = secret, ident, label, cls
        self.base, self.dbus_path = base, dbus_path
        # Created through the mount and not yet committed: in the daemon's index only, a 0-byte
        # file (or its writer's size) that the CLI, git, D-Bus and sync do not see (README, The tree).
        self.pending = pending
        # The kernel may still hold a size the daemon gave while two writers were pending
        # (it shows the first it finds): one of those or the stored one, until a write.
        self.loose = False


def distinct(key, n):
    """The key a CreateItem whose attributes name `key`, taken, gets: its account with ` (n)`,
    cut short (by characters) so that the file name still fits in 255 bytes."""
    suffix = f" ({n})"
    account = key[2]
    while len(escape(account + suffix).encode()) > 255:
        account = account[:-1]
    return (key[0], key[1], account + suffix)


def attributes(key):
    """The attributes a search names the item at `key` by (its natural ones)."""
    if key[0] == "g":
        return {"service": key[1], "account": key[2]}
    return {"server": key[1], "user": key[2]}


class Kept:
    """A descriptor kept open across steps. A reader (O_RDONLY) reads what was there when it
    opened; a writer (O_WRONLY, O_RDWR) holds its own copy, `buffer`, which its writes change
    and which a commit (its close, fsync) stores whole over the item it is open on, wherever
    that item's name went meanwhile (README, The tree). `truncated` and `written` are the
    daemon's truncatedAtOpen and hasWrites: what a commit would still store."""

    def __init__(self, fd, key, buffer, ident, cls, writable=False, readable=True, append=False, truncated=False,
                 creator=False):
        self.fd, self.key, self.buffer, self.ident, self.cls, self.revoked = fd, key, buffer, ident, cls, False
        self.writable, self.readable, self.append, self.creator = writable, readable, append, creator
        self.truncated, self.written = truncated, False

    @property
    def dirty(self):
        """Changes a commit still stores; while so (and not revoked by a lock), `stat` of the
        item shows this copy's size, which the kernel would otherwise cache stale."""
        return (self.truncated or self.written) and not self.revoked

    def describe(self):
        mode = "O_RDWR" if self.readable and self.writable else "O_WRONLY" if self.writable else "O_RDONLY"
        return f"kept {mode} {self.key} (item {self.ident})"


class Disagreement(AssertionError):
    pass


def expect(cond, what):
    if not cond:
        raise Disagreement(what)


class Coherence(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.items = {}
        self.services = set()
        self.internet_dir = False
        self.kept = []
        self.next_ident = 1
        self.touched = []
        # Pending items whose name another channel stored meanwhile: they left the mount (their
        # descriptors are as of an unlinked file), and the first commit of one fails (EEXIST).
        self.doomed = set()
        # Those whose commit failed so: later ones store nothing, as for an unlinked file.
        self.lost = set()

    # -- paths and the model's helpers

    def path(self, key):
        if key[0] == "g":
            return os.path.join(MOUNT.mp, escape(key[1]), escape(key[2]))
        return os.path.join(self.port_dir(), escape(key[2]))

    def port_dir(self):
        return os.path.join(MOUNT.mp, "internet", escape(HOST), "443")

    def parent_exists(self, key):
        return key[1] in self.services if key[0] == "g" else self.internet_dir

    def new_item(self, secret, **kw):
        item = Item(secret, self.next_ident, **kw)
        self.next_ident += 1
        return item

    def added(self, key):
        if key[0] == "g":
            self.services.add(key[1])
        else:
            self.internet_dir = True

    def stored(self, key):
        """The item at `key` as the store has it (not a pending one): what the CLI, git, D-Bus
        and sync see."""
        item = self.items.get(key)
        return None if item is None or item.pending else item

    def stored_elsewhere(self, ident):
        """A value of the item stored through another channel than its open files: their
        uncommitted writes are older and dropped (README, The tree; OpenFile.dropUncommitted).
        Their copies stay, and a later write through one is a change of its own."""
        for k in self.kept:
            if k.ident == ident:
                k.truncated = k.written = False
        self.sizes_changed(ident)

    def taken_by_other_channel(self, key):
        """Another channel stores an item at `key`, where the model may hold a pending one:
        that one's name goes to the stored item, and its own first commit will fail."""
        item = self.items.get(key)
        if item is not None and item.pending:
            self.doomed.add(item.ident)
            del self.items[key]

    def sizes(self, item):
        """What `stat` of an item may show: the size of a copy being written (the daemon shows
        the first such it finds; several: one of them), else the stored value's."""
        writing = {len(k.buffer) for k in self.kept if k.ident == item.ident and k.writable and k.dirty}
        if item.loose and writing:
            return writing | {len(item.secret)}
        return writing or {len(item.secret)}

    def sizes_changed(self, ident):
        """A write through the mount drops the kernel's cached size: the daemon's is shown again."""
        item = self.item_by_ident(ident)
        if item is not None:
            item.loose = False

    def key_of(self, ident):
        for key, item in self.items.items():
            if item.ident == ident:
                return key
        return None

    def mount_call(self, want_errno, fn):
        """Runs fn; it must fail with want_errno (None: succeed)."""
        try:
            result = fn()
        except OSError as e:
            expect(want_errno == e.errno, f"expected {errno.errorcode.get(want_errno, 'success')}, got {e!r}")
            return None
        expect(want_errno is None, f"expected {errno.errorcode.get(want_errno)}, got success")
        return result

    # -- start of every example: an empty mount

    @initialize()
    @tracked
    def empty_the_mount(self):
        if not running():
            return
        EXAMPLE[:] = ["empty_the_mount()"]
        r = MOUNT.kc("unlock", MOUNT.mp, "--passphrase-file", MOUNT.passfile)
        for name in os.listdir(MOUNT.mp):
            if name in ("internet", SYNC_KEY_DIR):
                continue
            d = os.path.join(MOUNT.mp, name)
            for f in os.listdir(d):
                os.unlink(os.path.join(d, f))
            os.rmdir(d)
        inet = os.path.join(MOUNT.mp, "internet")
        for server in os.listdir(inet):
            for port in os.listdir(os.path.join(inet, server)):
                pd = os.path.join(inet, server, port)
                for f in os.listdir(pd):
                    os.unlink(os.path.join(pd, f))
                os.rmdir(pd)
            os.rmdir(os.path.join(inet, server))
        del r

    def teardown(self):
        for k in self.kept:
            if k.writable:
                # What the release would commit a moment after close(2) (an O_TRUNC, a new
                # file) is committed now, so that it cannot land in the next example's empty mount.
                try:
                    MOUNT.holder.fsync(k.fd)
                except OSError:
                    pass
            try:
                MOUNT.holder.close(k.fd)
            except OSError:
                pass
        self.kept = []

    # -- steps through the mount

    @precondition(running)
    @rule(key=keys, data=secrets, how=st.sampled_from(["create", "overwrite", "append"]))
    @tracked
    def write(self, key, data, how):
        self.touched = [key]
        p = self.path(key)
        exists = key in self.items
        if not self.parent_exists(key):
            want = errno.ENOENT
        elif how == "create" and exists:
            want = errno.EEXIST
        elif how == "append" and not exists:
            want = errno.ENOENT
        else:
            want = None
        flags = {"create": os.O_CREAT | os.O_EXCL, "overwrite": os.O_CREAT | os.O_TRUNC, "append": os.O_APPEND}[how]

        def act():
            fd = os.open(p, os.O_WRONLY | flags, 0o600)
            try:
                os.write(fd, data)
                if not data:
                    # Intended (README, "Documented, not silent"): an O_TRUNC or a new file with
                    # no write is committed at the release, which the kernel sends just after
                    # close(2) returns, so that a shell's dup-and-close before a write that then
                    # fails (EFBIG) loses nothing; fsync commits it at once.
                    os.fsync(fd)
            finally:
                os.close(fd)
        self.mount_call(want, act)
        if want is None:
            if exists:
                item = self.items[key]
                item.secret = item.secret + data if how == "append" else data
                # A pending item is stored by any commit through the mount, not only its
                # creator's; an O_APPEND with nothing written has nothing to commit.
                if how != "append" or data:
                    item.pending = False
            else:
                self.items[key] = self.new_item(data)

    @precondition(running)
    @rule(key=keys, size=st.integers(min_value=0, max_value=60))
    @tracked
    def truncate(self, key, size):
        self.touched = [key]
        exists = key in self.items
        self.mount_call(None if exists else errno.ENOENT, lambda: os.truncate(self.path(key), size))
        if exists:
            s = self.items[key].secret
            self.items[key].secret = s[:size] + b"\0" * max(0, size - len(s))
            self.items[key].pending = False

    @precondition(running)
    @rule(src=keys, dst=keys)
    @tracked
    def rename(self, src, dst):
        self.touched = [src, dst]
        if src not in self.items or not self.parent_exists(dst):
            want = errno.ENOENT
        elif src[0] != dst[0]:
            want = errno.EXDEV
        else:
            want = None
        self.mount_call(want, lambda: os.rename(self.path(src), self.path(dst)))
        if want is None and src != dst:
            moved = self.items.pop(src)
            replaced = self.items.get(dst)
            if replaced is not None:
                # Onto an existing item: the secret moves, the target keeps its attributes and class.
                # Pending ones are stored (empty) first, so that the store can replace one.
                moved.label, moved.cls = replaced.label, replaced.cls
                moved.pending = False
            self.items[dst] = moved

    @precondition(running)
    @rule(key=keys)
    @tracked
    def unlink(self, key):
        self.touched = [key]
        exists = key in self.items
        self.mount_call(None if exists else errno.ENOENT, lambda: os.unlink(self.path(key)))
        self.items.pop(key, None)

    @precondition(running)
    @rule(service=st.sampled_from(SERVICES))
    @tracked
    def mkdir(self, service):
        want = errno.EEXIST if service in self.services else None
        self.mount_call(want, lambda: os.mkdir(os.path.join(MOUNT.mp, escape(service)), 0o700))
        self.services.add(service)

    @precondition(running)
    @rule(service=st.sampled_from(SERVICES))
    @tracked
    def rmdir(self, service):
        if service not in self.services:
            want = errno.ENOENT
        elif any(k[0] == "g" and k[1] == service for k in self.items):
            want = errno.ENOTEMPTY
        else:
            want = None
        self.mount_call(want, lambda: os.rmdir(os.path.join(MOUNT.mp, escape(service))))
        if want is None:
            self.services.discard(service)

    @precondition(running)
    @rule(key=keys, label=st.sampled_from(LABELS))
    @tracked
    def set_label(self, key, label):
        self.touched = [key]
        exists = key in self.items
        self.mount_call(None if exists else errno.ENOENT,
                        lambda: os.setxattr(self.path(key), "user.keychain.label", label.encode()))
        if exists:
            self.items[key].label = label

    @precondition(lambda self: len(self.kept) < MAX_KEPT)
    @precondition(running)
    @rule(key=keys)
    @tracked
    def keep_open(self, key):
        self.touched = [key]
        exists = key in self.items
        fd = self.mount_call(None if exists else errno.ENOENT, lambda: MOUNT.holder.open(self.path(key), os.O_RDONLY))
        if fd is not None:
            item = self.items[key]
            self.kept.append(Kept(fd, key, item.secret, item.ident, item.cls))

    @precondition(lambda self: len(self.kept) < MAX_KEPT)
    @precondition(running)
    @rule(key=keys, pick=picks, rdwr=st.booleans(), trunc=st.booleans(), append=st.booleans(), data=kept_writes,
          offset=st.integers(min_value=0, max_value=8))
    @tracked
    def keep_writer(self, key, pick, rdwr, trunc, append, data, offset):
        """Opens an existing item for writing (O_TRUNC: its copy starts empty, and is committed
        empty at the release even with no write), writes (or not), and keeps it open: other steps
        run while its writes are not committed."""
        key = self.picked(key, pick, sorted(self.items))
        self.touched = [key]
        item = self.items.get(key)
        flags = (os.O_RDWR if rdwr else os.O_WRONLY) | (os.O_TRUNC if trunc else 0) | (os.O_APPEND if append else 0)
        fd = self.mount_call(None if item else errno.ENOENT, lambda: MOUNT.holder.open(self.path(key), flags))
        if fd is None:
            return
        k = Kept(fd, key, b"" if trunc else item.secret, item.ident, item.cls, writable=True, readable=rdwr,
                 append=append, truncated=trunc)
        self.kept.append(k)
        if data is not None:
            self.kept_pwrite(k, data, offset)

    @precondition(lambda self: len(self.kept) < MAX_KEPT)
    @precondition(running)
    @rule(key=keys, pick=picks, rdwr=st.booleans(), data=kept_writes, offset=st.integers(min_value=0, max_value=8))
    @tracked
    def keep_creator(self, key, pick, rdwr, data, offset):
        """O_CREAT|O_EXCL, kept open: the new item is pending, seen only through the mount, until
        a commit of a descriptor on it (or this one's release) stores it."""
        key = self.picked(key, pick, [k for k in KEYS if k not in self.items and self.parent_exists(k)])
        self.touched = [key]
        if not self.parent_exists(key):
            want = errno.ENOENT
        elif key in self.items:
            want = errno.EEXIST
        else:
            want = None
        flags = (os.O_RDWR if rdwr else os.O_WRONLY) | os.O_CREAT | os.O_EXCL
        fd = self.mount_call(want, lambda: MOUNT.holder.open(self.path(key), flags))
        if fd is None:
            return
        item = self.items[key] = self.new_item(b"", pending=True)
        k = Kept(fd, key, b"", item.ident, item.cls, writable=True, readable=rdwr, creator=True)
        self.kept.append(k)
        if data is not None:
            self.kept_pwrite(k, data, offset)

    def picked(self, key, pick, likely):
        """Mostly one of `likely` (`pick` says which), else `key`: a writer kept on a name that
        is not there meets nothing."""
        key = likely[pick % len(likely)] if likely and pick < 48 else key
        EXAMPLE.append(f"  (on {key!r})")
        return key

    @precondition(lambda self: any(k.writable for k in self.kept))
    @precondition(running)
    @rule(which=st.integers(min_value=0, max_value=3), channel=st.sampled_from(["cli", "dbus", "git", "sync"]),
          data=secrets)
    @tracked
    def store_elsewhere_while_kept(self, which, channel, data):
        """A value stored through another channel on the item a kept writer is open on: what
        that writer has not committed is older and must not come back at its close or fsync
        (the bug 74b7384 fixed). Other steps meet a kept writer's name only by chance."""
        ws = self.writers()
        key = self.key_of(ws[which % len(ws)].ident)
        if key is None:
            return
        if channel == "dbus" and key in KEYS and key[0] == "g":
            self.dbus_create(key=key, data=data, replace=True, label=self.items[key].label or "")
        elif channel == "git" and key[0] == "i":
            self.git_store(account=key[2], password="".join(c for c in data.decode(errors="ignore") if c.isprintable()))
        elif channel == "sync":
            self.sync_from_b(key=key, data=data)
        else:
            self.cli_add(key=key, data=data, update=True)

    def kept_pwrite(self, k, data, offset):
        def act():
            n = MOUNT.holder.pwrite(k.fd, data, offset)
            expect(n == len(data), f"{k.describe()}: pwrite wrote {n} of {len(data)}")
        self.mount_call(errno.ENOKEY if k.revoked else None, act)
        if k.revoked:
            return
        if k.append:
            # O_APPEND: at the end of the descriptor's copy, whatever the offset.
            k.buffer += data
        else:
            b = k.buffer + b"\0" * max(0, offset - len(k.buffer))
            k.buffer = b[:offset] + data + b[offset + len(data):]
        k.written = True
        self.sizes_changed(k.ident)

    def writers(self):
        return [k for k in self.kept if k.writable]

    @precondition(lambda self: any(k.writable for k in self.kept))
    @precondition(running)
    @rule(which=st.integers(min_value=0, max_value=3), data=kept_data,
          offset=st.integers(min_value=0, max_value=8))
    @tracked
    def kept_write(self, which, data, offset):
        ws = self.writers()
        k = ws[which % len(ws)]
        self.touched = [self.key_of(k.ident) or k.key]
        self.kept_pwrite(k, data, offset)

    @precondition(lambda self: any(k.writable for k in self.kept))
    @precondition(running)
    @rule(which=st.integers(min_value=0, max_value=3), size=st.integers(min_value=0, max_value=40))
    @tracked
    def kept_truncate(self, which, size):
        ws = self.writers()
        k = ws[which % len(ws)]
        self.touched = [self.key_of(k.ident) or k.key]
        self.mount_call(errno.ENOKEY if k.revoked else None, lambda: MOUNT.holder.ftruncate(k.fd, size))
        if not k.revoked:
            k.buffer = k.buffer[:size] + b"\0" * max(0, size - len(k.buffer))
            k.written = True
            self.sizes_changed(k.ident)

    def commit(self, k, final, closing=True):
        """What the daemon's commit of `k` does (KeychainTree.commit): at close(2)'s flush
        (`final` False: only written changes) or at fsync and the release (`final`: an O_TRUNC
        and a pending create too); a pending create revoked by a lock is dropped when
        `closing` (the flush and the release), not at fsync. Returns the errno the caller gets
        (None: success) and what changed: "stored", "inserted", "discarded" or None."""
        item = self.item_by_ident(k.ident)
        needed = (k.truncated or k.written) if final else k.written
        if final and k.creator and ((item is not None and item.pending) or k.ident in self.doomed):
            # A create still pending is stored at fsync or the release, written or not.
            needed = True
        if not needed:
            return None, None
        if k.revoked:
            # The copy went with the key at the lock: nothing is stored, and a pending item
            # whose writer lost its key is never stored either.
            if k.ident in self.doomed:
                self.doomed.discard(k.ident)
                self.lost.add(k.ident)
            elif item is not None and item.pending and closing:
                del self.items[self.key_of(k.ident)]
                return errno.ENOKEY, "discarded"
            return errno.ENOKEY, None
        k.truncated = k.written = False
        if k.ident in self.doomed:
            # A pending item whose name the CLI (git, sync) took meanwhile: its insert fails.
            self.doomed.discard(k.ident)
            self.lost.add(k.ident)
            return errno.EEXIST, None
        if item is None:
            # Deleted or replaced while open: as a write to an unlinked file, it goes nowhere.
            return None, None
        effect = "inserted" if item.pending else "stored"
        item.secret, item.pending = k.buffer, False
        if any(o is not k and o.ident == k.ident and o.writable and o.dirty for o in self.kept):
            item.loose = True
        return None, effect

    @precondition(lambda self: any(k.writable for k in self.kept))
    @precondition(running)
    @rule(which=st.integers(min_value=0, max_value=3))
    @tracked
    def kept_fsync(self, which):
        ws = self.writers()
        k = ws[which % len(ws)]
        self.touched = [self.key_of(k.ident) or k.key]
        want, _ = self.commit(k, final=True, closing=False)
        self.mount_call(want, lambda: MOUNT.holder.fsync(k.fd))

    @precondition(lambda self: len(self.kept) > 0)
    @precondition(running)
    @rule(which=st.integers(min_value=0, max_value=3), fsync_first=st.booleans())
    @tracked
    def close_kept(self, which, fsync_first):
        """A writer's close(2) commits what it wrote (and says if that failed); what only its
        release commits (an O_TRUNC with no write, a new file with none) is committed just after
        close(2) returned, so that is waited for, a moment at most, before the observations."""
        k = self.kept.pop(which % len(self.kept))
        key = self.key_of(k.ident)
        self.touched = [key or k.key]
        if not k.writable:
            MOUNT.holder.close(k.fd)
            return
        if fsync_first:
            want, _ = self.commit(k, final=True, closing=False)
            self.mount_call(want, lambda: MOUNT.holder.fsync(k.fd))
        want, _ = self.commit(k, final=False)
        self.mount_call(want, lambda: MOUNT.holder.close(k.fd))
        _, effect = self.commit(k, final=True)
        if effect is None:
            return
        p = self.path(key)
        item = self.items.get(key)
        if effect == "stored":
            done = lambda: read_file(p) == item.secret
        elif effect == "inserted":
            done = lambda: (lambda r: r.returncode == 0 and r.stdout == item.secret)(self.cli("find", key, "-w"))
        else:
            done = lambda: not os.path.exists(p)
        deadline = time.monotonic() + 3
        while not done():
            expect(time.monotonic() < deadline, f"{k.describe()}: its release did not commit ({effect}) within 3 s")
            time.sleep(0.01)

    @precondition(running)
    @rule(key=keys, cls=st.sampled_from(CLASSES))
    @tracked
    def set_class(self, key, cls):
        """setxattr user.keychain.accessible: a class change that keeps the secret, so it drops
        no open file's uncommitted writes (README, The tree)."""
        self.touched = [key]
        item = self.items.get(key)
        if item is not None and item.pending:
            # Its class is decided again, against its neighbours', when it is stored.
            return
        self.mount_call(None if item else errno.ENOENT,
                        lambda: os.setxattr(self.path(key), "user.keychain.accessible", cls.encode()))
        if item:
            item.cls = cls

    # -- steps through the CLI

    def cli_key_args(self, key):
        if key[0] == "g":
            return ["-s", key[1], "-a", key[2]]
        return ["-s", key[1], "-a", key[2]]

    def cli(self, verb, key, *extra, stdin=b""):
        kind = "generic" if key[0] == "g" else "internet"
        return MOUNT.kc(f"{verb}-{kind}-password", *self.cli_key_args(key), *extra, stdin=stdin)

    @precondition(running)
    @rule(key=keys, data=secrets, update=st.booleans())
    @tracked
    def cli_add(self, key, data, update):
        self.touched = [key]
        r = self.cli("add", key, *(["-U"] if update else []), stdin=data)
        exists = self.stored(key) is not None
        if exists and not update:
            expect(r.returncode == 45, f"add of an existing item: exit {r.returncode}, want 45: {r.stderr!r}")
            return
        expect(r.returncode == 0, f"add: exit {r.returncode}: {r.stderr!r}")
        if exists:
            self.items[key].secret = data
            self.stored_elsewhere(self.items[key].ident)
        else:
            self.taken_by_other_channel(key)
            self.items[key] = self.new_item(data)
            self.added(key)

    @precondition(running)
    @rule(key=keys)
    @tracked
    def cli_delete(self, key):
        self.touched = [key]
        r = self.cli("delete", key)
        want = 0 if self.stored(key) else 44
        expect(r.returncode == want, f"delete: exit {r.returncode}, want {want}: {r.stderr!r}")
        if want == 0:
            del self.items[key]

    @precondition(running)
    @rule(key=keys, cls=st.sampled_from(CLASSES))
    @tracked
    def cli_class_change(self, key, cls):
        """`add -U --accessible`: the class changes (and the same secret is stored again)."""
        self.touched = [key]
        item = self.stored(key)
        data = item.secret if item else b"new"
        r = self.cli("add", key, "-U", "--accessible", cls, stdin=data)
        expect(r.returncode == 0, f"class change: exit {r.returncode}: {r.stderr!r}")
        if item:
            item.cls = cls
            # The CLI stores the secret it was given: a value stored elsewhere, the same or not.
            self.stored_elsewhere(item.ident)
        else:
            self.taken_by_other_channel(key)
            self.items[key] = self.new_item(data, cls=cls)
            self.added(key)

    @precondition(running)
    @rule(key=keys)
    @tracked
    def cli_find(self, key):
        self.touched = [key]

    # -- steps through git

    @precondition(running)
    @rule(account=internet_accounts, password=git_passwords)
    @tracked
    def git_store(self, account, password):
        key = internet(account)
        self.touched = [key]
        r = MOUNT.git("store", ["protocol=https", f"host={HOST}", f"username={account}", f"password={password}"])
        expect(r.returncode == 0 and not r.stderr, f"git store: {r.returncode} {r.stderr!r}")
        if self.stored(key):
            self.items[key].secret = password.encode()
            self.stored_elsewhere(self.items[key].ident)
        else:
            self.taken_by_other_channel(key)
            self.items[key] = self.new_item(password.encode(), label=f"{HOST} (git)")
            self.added(key)

    @precondition(running)
    @rule(account=internet_accounts)
    @tracked
    def git_get(self, account):
        key = internet(account)
        self.touched = [key]
        r = MOUNT.git("get", ["protocol=https", f"host={HOST}", f"username={account}"])
        item = self.stored(key)
        if item is None:
            want = b""
        else:
            try:
                text = item.secret.decode()
            except UnicodeDecodeError:
                return  # not a password git can be given: the helper's answer is its own choice
            if any(ord(c) < 32 or ord(c) == 127 for c in text):
                return
            want = f"username={account}\npassword={text}\n".encode()
        expect(r.stdout == want, f"git get: {r.stdout!r}, want {want!r}")

    @precondition(running)
    @rule(account=internet_accounts)
    @tracked
    def git_erase(self, account):
        key = internet(account)
        self.touched = [key]
        r = MOUNT.git("erase", ["protocol=https", f"host={HOST}", f"username={account}"])
        expect(r.returncode == 0, f"git erase: {r.returncode}")
        if self.stored(key):
            del self.items[key]

    # -- lock and unlock

    @precondition(running)
    @rule()
    @tracked
    def lock_then_unlock(self):
        """While locked, when-unlocked items read ENOKEY (names and sizes stay); a descriptor
        opened before the lock reads ENOKEY from then on, even after the unlock."""
        self.touched = []
        r = MOUNT.kc("lock", MOUNT.mp)
        expect(r.returncode == 0, f"lock: exit {r.returncode}")
        for k in self.kept:
            current = self.item_by_ident(k.ident)
            if k.cls not in READABLE_LOCKED or (current is not None and current.cls not in READABLE_LOCKED):
                # The lock wiped its copy: a writer's uncommitted writes are gone with it.
                k.revoked = True
                k.buffer = b""
        for key, item in sorted(self.items.items()):
            p = self.path(key)
            size = os.stat(p).st_size
            expect(size in self.sizes(item), f"{p}: size {size} while locked, want one of {sorted(self.sizes(item))}")
            if item.cls in READABLE_LOCKED:
                expect(read_file(p) == item.secret, f"{p}: a {item.cls} item reads while locked")
            else:
                try:
                    read_file(p)
                    raise Disagreement(f"{p}: read while locked")
                except OSError as e:
                    expect(e.errno == errno.ENOKEY, f"{p}: {e!r} while locked, want ENOKEY")
        r = MOUNT.kc("unlock", MOUNT.mp, "--passphrase-file", MOUNT.passfile)
        expect(r.returncode == 0, f"unlock: exit {r.returncode}")

    def item_by_ident(self, ident):
        for item in self.items.values():
            if item.ident == ident:
                return item
        return None

    # -- steps through D-Bus (the Secret Service, libsecret's mapping: service/account)

    def matching(self, base):
        """The model's items a search for `base`'s attributes finds: the item at `base` and
        those made distinct from it."""
        return {k: i for k, i in self.items.items() if (k == base or i.base == base) and not i.pending}

    def dbus_target(self, base, extra):
        """The key and D-Bus path of the item at `base` (or, with `extra`, of the first one
        made distinct from it), or None. The item at `base` is the search's one result whose
        path is none of the distinct ones' (which the model learnt when it made them)."""
        found = {k: i for k, i in self.matching(base).items() if (k != base) == extra}
        if not found:
            return None
        key = sorted(found)[0]
        if extra:
            return key, found[key].dbus_path
        known = {i.dbus_path for k, i in self.matching(base).items() if k != base}
        paths = [it.item_path for it in MOUNT.collection.search_items(attributes(base))]
        left = [p for p in paths if p not in known]
        expect(len(left) == 1, f"search {attributes(base)}: {paths}, the distinct ones {sorted(known)}")
        return key, left[0]

    @precondition(running)
    @rule(key=generic_keys, data=secrets, replace=st.booleans(), label=st.sampled_from(LABELS))
    @tracked
    def dbus_create(self, key, data, replace, label):
        """CreateItem with the key's natural attributes: with `replace` it overwrites the item
        at the key (secret and label; class kept), else the first free of `a`, `a (2)`, ... is
        a new item, which keeps the attributes it was given over D-Bus."""
        self.touched = [key]
        attrs = {"service": key[1], "account": key[2], "username": key[2]}
        item = MOUNT.collection.create_item(label, attrs, data, replace=replace)
        # The first of `a`, `a (2)`, ... that is free, or (with `replace`) holds an item of these
        # attributes; a pending name is taken, and CreateItem goes on to the next.
        for target in [key] + [distinct(key, n) for n in range(2, 1000)]:
            found = self.items.get(target)
            if found is None or (replace and not found.pending and (target == key or found.base == key)):
                break
        if target in self.items:
            self.items[target].secret, self.items[target].label = data, label
            self.stored_elsewhere(self.items[target].ident)
        else:
            self.items[target] = self.new_item(data, label=label, base=None if target == key else key,
                                               dbus_path=None if target == key else item.item_path)
            self.added(key)
        if target != key:
            expect(item.item_path == self.items[target].dbus_path, "the path CreateItem gave")

    @precondition(running)
    @rule(key=generic_keys, extra=st.booleans(), data=secrets)
    @tracked
    def dbus_set_secret(self, key, extra, data):
        self.touched = [key]
        found = self.dbus_target(key, extra)
        if found is None:
            return
        target, path = found
        secretstorage.Item(MOUNT.dbus, path, MOUNT.collection.session).set_secret(data)
        self.items[target].secret = data
        self.stored_elsewhere(self.items[target].ident)

    @precondition(running)
    @rule(key=generic_keys, extra=st.booleans())
    @tracked
    def dbus_delete(self, key, extra):
        self.touched = [key]
        found = self.dbus_target(key, extra)
        if found is None:
            return
        target, path = found
        secretstorage.Item(MOUNT.dbus, path, MOUNT.collection.session).delete()
        del self.items[target]

    # -- sync: device B (not mounted, its own store) changes an item, then both exchange

    @precondition(running)
    @rule(key=keys, data=st.one_of(st.none(), secrets))
    @tracked
    def sync_from_b(self, key, data):
        """B adds or updates (`-U --synchronizable`) or, with no data, deletes the item at `key`,
        and both devices exchange (`sync now`; A's through its daemon). A publishes and B merges
        first, so that B's change is never concurrent with one of A's (which would make a
        conflict copy): B's change then applies on A as made, and the mount shows it at once."""
        self.touched = [key]
        for who in ("A", "B"):
            r = MOUNT.kc("sync", "now") if who == "A" else MOUNT.kc_b("sync", "now")
            expect(r.returncode == 0, f"sync now on {who} before: exit {r.returncode}: {r.stderr!r}")
        kind = "generic" if key[0] == "g" else "internet"
        if data is None:
            r = MOUNT.kc_b(f"delete-{kind}-password", "-s", key[1], "-a", key[2])
            want = 0 if self.stored(key) else 44
            expect(r.returncode == want, f"delete on B: exit {r.returncode}, want {want}: {r.stderr!r}")
        else:
            r = MOUNT.kc_b(f"add-{kind}-password", "-U", "--synchronizable", "-s", key[1], "-a", key[2], stdin=data)
            expect(r.returncode == 0, f"add -U on B: exit {r.returncode}: {r.stderr!r}")
        for who in ("B", "A"):
            r = MOUNT.kc("sync", "now") if who == "A" else MOUNT.kc_b("sync", "now")
            expect(r.returncode == 0, f"sync now on {who} after: exit {r.returncode}: {r.stderr!r}")
        if data is None:
            if self.stored(key):
                del self.items[key]
        elif self.stored(key):
            self.items[key].secret = data
            self.stored_elsewhere(self.items[key].ident)
        else:
            self.taken_by_other_channel(key)
            self.items[key] = self.new_item(data)
            self.added(key)

    @precondition(lambda self: not running())
    @rule()
    @tracked
    def finished(self):
        """Enough steps ran: Hypothesis's remaining examples cost nothing."""

    # -- observations, after every step, with no sleep

    @invariant()
    @tracked
    def observations_agree(self):
        global STEPS_RUN
        if not running():
            return
        STEPS_RUN += 1
        if STEPS_RUN % 1000 == 0:
            print(f"model test: {STEPS_RUN} steps agreed, {time.monotonic() - STARTED:.0f} s", flush=True)
        for key in KEYS + sorted(k for k in self.items if k not in KEYS):
            p = self.path(key)
            item = self.items.get(key)
            try:
                st_ = os.stat(p)
            except FileNotFoundError:
                expect(item is None, f"{p}: missing, the model has it")
                continue
            expect(item is not None, f"{p}: exists, the model has no such item")
            expect(st_.st_size in self.sizes(item), f"{p}: st_size {st_.st_size}, want one of {sorted(self.sizes(item))}")
            got = read_file(p)
            expect(got == item.secret, f"{p}: content {got!r}, want {item.secret!r}")
            try:
                label = os.getxattr(p, "user.keychain.label").decode()
            except OSError as e:
                expect(e.errno == errno.ENODATA, f"{p}: getxattr label: {e!r}")
                label = None
            expect(label == item.label, f"{p}: label {label!r}, want {item.label!r}")
        root = sorted(os.listdir(MOUNT.mp))
        expect(root == sorted(["internet", SYNC_KEY_DIR] + [escape(s) for s in self.services]), f"root lists {root}")
        for s in SERVICES:
            d = os.path.join(MOUNT.mp, escape(s))
            if s in self.services:
                names = sorted(os.listdir(d))
                want = sorted(escape(k[2]) for k in self.items if k[0] == "g" and k[1] == s)
                expect(names == want, f"{d} lists {names}, want {want}")
            else:
                expect(not os.path.exists(d), f"{d} exists")
        if self.internet_dir:
            names = sorted(os.listdir(self.port_dir()))
            want = sorted(escape(k[2]) for k in self.items if k[0] == "i")
            expect(names == want, f"{self.port_dir()} lists {names}, want {want}")
        else:
            expect(not os.path.exists(self.port_dir()), f"{self.port_dir()} exists")
        for k in self.kept:
            current = self.item_by_ident(k.ident)
            if k.readable:
                # A reader's copy is what it opened; a writer's (O_RDWR) its own, with its writes,
                # also once another channel's value dropped them from what it will commit.
                try:
                    got = MOUNT.holder.pread(k.fd)
                    expect(not k.revoked, f"{k.describe()}: read {got!r} after a lock, want ENOKEY")
                    expect(got == k.buffer, f"{k.describe()}: read {got!r}, want {k.buffer!r}")
                except OSError as e:
                    expect(k.revoked and e.errno == errno.ENOKEY, f"{k.describe()}: {e!r}")
            fst = MOUNT.holder.fstat(k.fd)
            if current is not None:
                wants = {(n, 1) for n in self.sizes(current)}
            else:
                # The kernel keeps one size per inode: with several descriptors open on an item
                # that is gone, each holding its own copy, fstat shows one of those copies (README,
                # The tree). The seed that found it: 457122346 at 50,000 steps.
                wants = {(len(o.buffer), 0) for o in self.kept if o.ident == k.ident}
                if any(o.revoked for o in self.kept if o.ident == k.ident):
                    # A lock wiped the copy; which size the kernel kept of it is not defined.
                    wants |= {(fst[0], 0)}
            expect(fst in wants, f"{k.describe()}: fstat size, nlink {fst}, want one of {sorted(wants)}")
        for key in self.touched:
            # Over D-Bus: a search by its natural attributes finds it and those made distinct
            # from it, with their labels and secrets. One made distinct (a kept writer's, which
            # may be one) is searched for by the attributes it kept.
            base = key if key in KEYS else getattr(self.items.get(key), "base", None)
            if base is not None:
                found = sorted((it.get_label(), it.get_secret()) for it in MOUNT.collection.search_items(attributes(base)))
                want = sorted((i.label or "", i.secret) for i in self.matching(base).values())
                expect(found == want, f"search {attributes(base)}: {found!r}, want {want!r}")
            r = self.cli("find", key, "-w")
            item = self.stored(key)
            if item is None:
                expect(r.returncode == 44, f"find -w {key}: exit {r.returncode}, want 44")
            else:
                expect(r.returncode == 0 and r.stdout == item.secret,
                       f"find -w {key}: exit {r.returncode} {r.stdout!r}, want {item.secret!r}")
        self.touched = []


def read_file(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        out = b""
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return out
            out += chunk
    finally:
        os.close(fd)


def main():
    global MOUNT
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=None, help="random if left out (and printed)")
    args = ap.parse_args()
    run_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    print(f"model test: seed {run_seed}, {args.steps} steps in examples of up to {STEPS_PER_EXAMPLE} "
          f"(replay: {sys.argv[0]} --steps {args.steps} --seed {run_seed})", flush=True)
    MOUNT = Mount()
    try:
        # Hypothesis makes its first examples short: enough examples are asked for that the steps
        # run reach the target, after which the rest cost nothing (`running`, `finished`).
        global TARGET
        TARGET = args.steps
        try:
            run_state_machine_as_test(seed(run_seed)(Coherence), settings=settings(
                max_examples=60 + args.steps * 2 // STEPS_PER_EXAMPLE, stateful_step_count=STEPS_PER_EXAMPLE,
                deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=False,
                verbosity=Verbosity.debug if os.environ.get("MODEL_TEST_TRACE") else Verbosity.normal))
        except Flaky:
            # Once the target is reached every step's precondition turns false (`running`), state
            # outside Hypothesis's data: a later example that repeats an earlier one's first choices
            # then draws differently, and Hypothesis calls that inconsistent generation. Past the
            # target with no disagreement (a step or observation that failed sets FAILED), every
            # step ran and agreed; anything else is a real failure. (A 50,000-step run, seed
            # 2301664997, ended so.)
            if FAILED or STEPS_RUN < TARGET:
                raise
        if STEPS_RUN < TARGET:
            print(f"model test: only {STEPS_RUN} of {TARGET} steps ran", flush=True)
            sys.exit(1)
    except BaseException:
        print(f"model test: FAILED at seed {run_seed}, after {STEPS_RUN} steps "
              f"(replay: {sys.argv[0]} --steps {args.steps} --seed {run_seed})", flush=True)
        raise
    finally:
        MOUNT.close()
    print(f"model test: {STEPS_RUN} steps and observations agreed with the model (seed {run_seed}); ran "
          + ", ".join(f"{name} {n}" for name, n in sorted(COUNTS.items()) if name != "observations_agree"))


if __name__ == "__main__":
    main()
