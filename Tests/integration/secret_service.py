"""Real Secret Service clients against a keychainfs mount (test_secret_service.sh runs it on a
private bus): python secretstorage's public API, python keyring's SecretService backend, raw
D-Bus calls through jeepney for malformed input, and signals for changes made elsewhere.

Usage: secret_service.py STEP MOUNTPOINT KEYCHAINFS
Prints one `ok NAME` or `FAIL NAME: detail` line per check; exits 1 if any failed."""
import os
import subprocess
import sys
import threading
import time

import jeepney
from jeepney import DBusAddress, new_method_call, MatchRule
from jeepney.io.blocking import open_dbus_connection
import secretstorage
from secretstorage.exceptions import LockedException, PromptDismissedException

STEP, MNT, KC = sys.argv[1], sys.argv[2], sys.argv[3]
failed = 0


def check(name, cond, detail=""):
    global failed
    if cond:
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")
    sys.stdout.flush()


def raises(name, fn, error_name):
    """fn() must fail with the D-Bus error `error_name`."""
    try:
        fn()
    except jeepney.wrappers.DBusErrorResponse as e:
        check(name, e.name == error_name, f"got {e.name}: {e.data}")
        return
    except Exception as e:  # secretstorage wraps some errors
        check(name, error_name in repr(e), f"got {e!r}")
        return
    check(name, False, "no error")


SERVICE = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                      interface="org.freedesktop.Secret.Service")
COLLECTION = "/org/freedesktop/secrets/collection/login"


def call(conn, addr, method, sig=None, body=()):
    reply = conn.send_and_get_reply(new_method_call(addr, method, sig, body), timeout=10)
    if reply.header.message_type == jeepney.MessageType.error:
        raise jeepney.wrappers.DBusErrorResponse(reply)
    return reply.body


def kc(*args):
    return subprocess.run([KC, *args], capture_output=True)


def secretstorage_api():
    conn = secretstorage.dbus_init()
    # secretstorage opens the dh session whenever `cryptography` is there, as Debian's is.
    from secretstorage.dhcrypto import Session
    coll = secretstorage.get_default_collection(conn)
    # secretstorage names the default collection by its alias path, which is the same object.
    check("get_default_collection", coll.collection_path in (COLLECTION, "/org/freedesktop/secrets/aliases/default"),
          coll.collection_path)
    check("get_all_collections", [c.collection_path for c in secretstorage.get_all_collections(conn)] == [COLLECTION])
    check("get_collection_by_alias login", secretstorage.get_collection_by_alias(conn, "login").collection_path == COLLECTION)
    try:
        secretstorage.get_collection_by_alias(conn, "no-such-alias")
        check("unknown alias is ItemNotFound", False, "found")
    except secretstorage.ItemNotFoundException:
        check("unknown alias is ItemNotFound", True)
    check("collection label", coll.get_label() == "Login", coll.get_label())
    check("collection unlocked", not coll.is_locked())

    secret = b"line one\nline two\n\x00\xff\xfe not utf-8"
    item = coll.create_item("App token", {"application": "myapp", "service": "myapp", "username": "ann"}, secret)
    check("dh session in use", isinstance(item.session, Session) and item.session.encrypted and item.session.aes_key,
          repr(item.session))
    check("create_item: secret round-trips byte for byte", item.get_secret() == secret, repr(item.get_secret()))
    with open(os.path.join(MNT, "myapp", "ann"), "rb") as f:
        check("the item is a file at service/account in the tree", f.read() == secret)
    r = kc("find-generic-password", "-s", "myapp", "-a", "ann", "-w")
    check("the CLI finds it", r.returncode == 0 and r.stdout.startswith(b"line one\nline two"), repr(r))
    check("attributes kept", item.get_attributes() == {"application": "myapp", "service": "myapp", "username": "ann"},
          item.get_attributes())
    check("label", item.get_label() == "App token")
    check("content type", item.get_secret_content_type() == "text/plain", item.get_secret_content_type())
    check("created/modified", item.get_created() > 1_600_000_000 and item.get_modified() >= item.get_created())

    found = list(coll.search_items({"application": "myapp"}))
    check("search by an attribute that names no directory", [i.item_path for i in found] == [item.item_path],
          [i.item_path for i in found])
    found = list(secretstorage.search_items(conn, {"service": "myapp", "username": "ann"}))
    check("service search", [i.item_path for i in found] == [item.item_path])
    check("search with a wrong value finds nothing", list(coll.search_items({"application": "other"})) == [])

    # replace: the same attributes replace; others make a second item, never overwrite.
    again = coll.create_item("App token 2", {"application": "myapp", "service": "myapp", "username": "ann"}, b"v2", replace=True)
    check("create_item replace=True keeps the path", again.item_path == item.item_path, again.item_path)
    check("replaced secret", item.get_secret() == b"v2")
    other = coll.create_item("Other", {"service": "myapp", "username": "ann", "application": "other"}, b"v3", replace=True)
    check("a different map never overwrites", other.item_path != item.item_path and item.get_secret() == b"v2")
    dup = coll.create_item("Dup", {"application": "myapp", "service": "myapp", "username": "ann"}, b"v4", replace=False)
    check("replace=False makes a second item", dup.item_path != item.item_path and item.get_secret() == b"v2")
    dup.delete()
    other.delete()

    item.set_label("Renamed")
    check("set_label", item.get_label() == "Renamed")
    r = kc("find-generic-password", "-s", "myapp", "-a", "ann")
    check("the label is the item's label for the CLI", b"Renamed" in r.stdout, r.stdout)
    item.set_secret(b"new\nsecret")
    check("set_secret", item.get_secret() == b"new\nsecret")
    with open(os.path.join(MNT, "myapp", "ann"), "rb") as f:
        check("set_secret shows in the tree", f.read() == b"new\nsecret")
    # An editor's save through the tree (a temporary file renamed over the item) puts the
    # temporary file's item in its place: a new object path (open descriptors of the old one keep
    # their copy, as POSIX wants), with the item's label, attributes and class.
    subprocess.run(["sed", "-i", "s/new/edited/", os.path.join(MNT, "myapp", "ann")], check=True)
    saved = list(coll.search_items({"application": "myapp", "service": "myapp", "username": "ann"}))
    check("sed -i through the tree: one item, the saved secret", len(saved) == 1 and saved[0].get_secret() == b"edited\nsecret",
          [i.item_path for i in saved])
    if saved:
        check("  with the item's label and attributes", saved[0].get_label() == "Renamed"
              and saved[0].get_attributes() == {"application": "myapp", "service": "myapp", "username": "ann"},
              saved[0].get_attributes())
        item = saved[0]
        item.set_secret(b"new\nsecret")
    item.set_attributes({"application": "myapp", "service": "myapp", "username": "bea"})
    check("set_attributes renames it in the tree", os.path.exists(os.path.join(MNT, "myapp", "bea"))
          and not os.path.exists(os.path.join(MNT, "myapp", "ann")), os.listdir(os.path.join(MNT, "myapp")))
    check("set_attributes keeps the secret", item.get_secret() == b"new\nsecret")

    # Another schema: one directory named after it.
    odd = coll.create_item("Odd", {"xdg:schema": "org.example.Odd", "foo": "bar"}, b"odd")
    entries = os.listdir(os.path.join(MNT, "org.example.Odd"))
    check("another schema goes under its own directory", len(entries) == 1 and entries[0].startswith("item-"), entries)
    check("found by its attributes", [i.item_path for i in coll.search_items({"foo": "bar"})] == [odd.item_path])
    os.stat(os.path.join(MNT, "org.example.Odd", entries[0]))  # the kernel now holds the name
    odd.delete()
    check("delete", not os.path.exists(os.path.join(MNT, "org.example.Odd", entries[0]))
          and entries[0] not in os.listdir(os.path.join(MNT, "org.example.Odd"))
          and list(coll.search_items({"foo": "bar"})) == [])

    # Items made through the tree and the CLI, with their natural attributes.
    kc("add-generic-password", "-s", "clisvc", "-a", "carl", "-w", "cli-secret")
    found = list(coll.search_items({"service": "clisvc", "account": "carl"}))
    check("a CLI item is visible with natural attributes", len(found) == 1 and found[0].get_secret() == b"cli-secret",
          [f.get_attributes() for f in found])
    if found:
        check("natural attributes", found[0].get_attributes() == {"service": "clisvc", "account": "carl", "username": "carl"},
              found[0].get_attributes())
    item.delete()
    conn.close()


def aliases():
    conn = open_dbus_connection("SESSION")
    check("ReadAlias default", call(conn, SERVICE, "ReadAlias", "s", ("default",)) == (COLLECTION,))
    check("ReadAlias unknown is /", call(conn, SERVICE, "ReadAlias", "s", ("nope",)) == ("/",))
    call(conn, SERVICE, "SetAlias", "so", ("work", COLLECTION))
    check("SetAlias then ReadAlias", call(conn, SERVICE, "ReadAlias", "s", ("work",)) == (COLLECTION,))
    call(conn, SERVICE, "SetAlias", "so", ("work", "/"))
    check("SetAlias to / removes it", call(conn, SERVICE, "ReadAlias", "s", ("work",)) == ("/",))
    raises("SetAlias to an unknown collection", lambda: call(conn, SERVICE, "SetAlias", "so",
           ("work", "/org/freedesktop/secrets/collection/nope")), "org.freedesktop.Secret.Error.NoSuchObject")
    out = call(conn, SERVICE, "CreateCollection", "a{sv}s", ({}, "default"))
    check("CreateCollection with alias default gives the collection", out == (COLLECTION, "/"), out)
    raises("the login collection cannot be deleted", lambda: call(conn, DBusAddress(
        COLLECTION, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Collection"), "Delete"),
        "org.freedesktop.DBus.Error.NotSupported")
    alias_addr = DBusAddress("/org/freedesktop/secrets/aliases/default", bus_name="org.freedesktop.secrets",
                             interface="org.freedesktop.DBus.Properties")
    out = call(conn, alias_addr, "Get", "ss", ("org.freedesktop.Secret.Collection", "Label"))
    check("the alias path is the collection", out == (("s", "Login"),), out)
    conn.close()


STATE = os.path.join(os.path.dirname(MNT), "collections.state")


def tree_secret(*parts):
    with open(os.path.join(MNT, *parts), "rb") as f:
        return f.read()


def collections():
    """A second collection: its own label, alias and items; the same attributes in two
    collections are two items, two files."""
    conn = secretstorage.dbus_init()
    work = secretstorage.create_collection(conn, "Work Stuff", alias="worktest")
    check("CreateCollection makes a collection named after its label",
          work.collection_path == "/org/freedesktop/secrets/collection/work_stuff", work.collection_path)
    check("with its label", work.get_label() == "Work Stuff", work.get_label())
    check("and its alias", secretstorage.get_collection_by_alias(conn, "worktest").collection_path == work.collection_path)
    check("it is listed", work.collection_path in [c.collection_path for c in secretstorage.get_all_collections(conn)])
    again = secretstorage.create_collection(conn, "Another label", alias="worktest")
    check("CreateCollection with a taken alias gives that collection", again.collection_path == work.collection_path)
    attrs = {"service": "colsvc", "username": "wu", "app": "collections-test-value"}
    w = work.create_item("In work", attrs, b"work secret")
    login = secretstorage.get_default_collection(conn)
    l = login.create_item("In login", attrs, b"login secret", replace=True)
    check("an item's path is under its collection", w.item_path.startswith(work.collection_path + "/"), w.item_path)
    check("the same attributes in another collection are another item", w.item_path != l.item_path)
    check("Collection.SearchItems looks in that collection only",
          [i.item_path for i in work.search_items({"service": "colsvc"})] == [w.item_path])
    check("and in login only", [i.item_path for i in login.search_items({"service": "colsvc"})] == [l.item_path])
    check("Service.SearchItems looks in every collection",
          sorted(i.item_path for i in secretstorage.search_items(conn, {"app": "collections-test-value"}))
          == sorted([w.item_path, l.item_path]))
    check("Collection.Items", [i.item_path for i in work.get_all_items()] == [w.item_path])
    files = {n: tree_secret("colsvc", n) for n in os.listdir(os.path.join(MNT, "colsvc"))}
    check("both are files in the tree (the later one disambiguated)",
          sorted(files.values()) == [b"login secret", b"work secret"] and "wu" in files and "wu (2)" in files, files)
    work.set_label("Renamed")
    check("Label set", work.get_label() == "Renamed")
    raw = open_dbus_connection("SESSION")
    call(raw, SERVICE, "SetAlias", "so", ("default", work.collection_path))
    check("SetAlias default", call(raw, SERVICE, "ReadAlias", "s", ("default",)) == (work.collection_path,))
    check("the default alias path is that collection",
          secretstorage.get_default_collection(conn).get_label() == "Renamed")
    r = subprocess.run(["secret-tool", "lookup", "service", "colsvc", "username", "wu"], capture_output=True)
    check("the same attributes in two collections: secret-tool finds one", r.stdout in (b"work secret", b"login secret"), r)
    raw.close()
    with open(STATE, "w") as f:
        f.write(f"{work.collection_path}\n{w.item_path}\n{l.item_path}\n")
    conn.close()


def collections_after():
    """After a remount (the keychain locked, before its first unlock): collections, labels and
    aliases persist; items are listed, locked, at the same paths; Delete removes a collection."""
    work_path, w_path, l_path = open(STATE).read().split()
    conn = secretstorage.dbus_init()
    work = secretstorage.Collection(conn, work_path)
    check("the collection is still there", work_path in [c.collection_path for c in secretstorage.get_all_collections(conn)])
    check("with its label", work.get_label() == "Renamed", work.get_label())
    check("its alias persists", secretstorage.get_collection_by_alias(conn, "worktest").collection_path == work_path)
    raw = open_dbus_connection("SESSION")
    check("and the default alias", call(raw, SERVICE, "ReadAlias", "s", ("default",)) == (work_path,))
    check("the collection is locked", work.is_locked())
    items = [i.item_path for i in work.get_all_items()]
    # (and what was stored through the default alias meanwhile)
    check("Collection.Items lists its locked item, at the same path", w_path in items, items)
    out = call(raw, SERVICE, "SearchItems", "a{ss}", ({"app": "collections-test-value"},))
    check("SearchItems returns them in the locked list", out[0] == [] and sorted(out[1]) == sorted([w_path, l_path]), out)
    out = call(raw, SERVICE, "SearchItems", "a{ss}", ({"username": "wu"},))
    check("a search by a name field alone finds them too", sorted(out[1]) == sorted([w_path, l_path]), out)
    check("the item says it is locked", secretstorage.Item(conn, w_path).is_locked())
    kc("unlock", "--passphrase-file", os.environ["PASSFILE"])
    out = call(raw, SERVICE, "SearchItems", "a{ss}", ({"app": "collections-test-value"},))
    check("unlocked, the same paths in the unlocked list", sorted(out[0]) == sorted([w_path, l_path]) and out[1] == [], out)
    check("and readable", secretstorage.Item(conn, w_path).get_secret() == b"work secret")
    call(raw, SERVICE, "SetAlias", "so", ("default", COLLECTION))
    rule = MatchRule(type="signal", interface="org.freedesktop.Secret.Service", member="CollectionDeleted")
    call(raw, DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus"),
         "AddMatch", "s", (rule.serialise(),))
    work.delete()
    deleted = None
    deadline = time.time() + 5
    while time.time() < deadline and deleted is None:
        try:
            msg = raw.receive(timeout=1)
        except TimeoutError:
            continue
        if msg.header.fields.get(jeepney.HeaderFields.member) == "CollectionDeleted":
            deleted = msg.body[0]
    check("Collection.Delete signals CollectionDeleted", deleted == work_path, deleted)
    check("the collection is gone", work_path not in [c.collection_path for c in secretstorage.get_all_collections(conn)])
    check("its alias with it", call(raw, SERVICE, "ReadAlias", "s", ("worktest",)) == ("/",))
    # The work item was made first: it had the name wu, the login item wu (2).
    check("its items are gone from the tree", os.listdir(os.path.join(MNT, "colsvc")) == ["wu (2)"], os.listdir(os.path.join(MNT, "colsvc")))
    check("and from the CLI", kc("find-generic-password", "-s", "colsvc", "-a", "wu").returncode == 44)
    check("the login item stays", secretstorage.Item(conn, l_path).get_secret() == b"login secret")
    raw.close()
    conn.close()


def busy():
    """A slow write (a 16 MiB secret: its seal and durable commit) does not hold up another
    client: the bus thread serves it while the write runs."""
    writer = open_dbus_connection("SESSION")
    _, session = call(writer, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))
    coll = DBusAddress(COLLECTION, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Collection")
    props = {"org.freedesktop.Secret.Item.Label": ("s", "big"),
             "org.freedesktop.Secret.Item.Attributes": ("a{ss}", {"service": "busy", "username": "big"})}
    big = os.urandom(16 * 1024 * 1024 - 64)
    took = []

    def write():
        start = time.perf_counter()
        call(writer, coll, "CreateItem", "a{sv}(oayays)b", (props, (session, b"", big, "application/octet-stream"), True))
        took.append(time.perf_counter() - start)
    t = threading.Thread(target=write)
    other = open_dbus_connection("SESSION")
    props_addr = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                             interface="org.freedesktop.DBus.Properties")
    waits = []
    t.start()
    # Another client asks every 10 ms while the write goes on: blocked behind the write's seal
    # and commit, one of its calls would wait about as long as they take.
    while t.is_alive():
        start = time.perf_counter()
        call(other, props_addr, "Get", "ss", ("org.freedesktop.Secret.Service", "Collections"))
        waits.append(time.perf_counter() - start)
        time.sleep(0.01)
    t.join()
    check("another client is answered while a 16 MiB write commits", took and max(waits) < took[0] / 3,
          f"longest wait {max(waits):.3f} s, the write {took[0] if took else None} s")
    check("and the write is stored", tree_secret("busy", "big") == big)
    other.close()
    writer.close()


def plain_session():
    conn = open_dbus_connection("SESSION")
    _, session = call(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))
    coll = DBusAddress(COLLECTION, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Collection")
    props = {"org.freedesktop.Secret.Item.Label": ("s", "plain"),
             "org.freedesktop.Secret.Item.Attributes": ("a{ss}", {"service": "plain", "username": "p"})}
    item, prompt = call(conn, coll, "CreateItem", "a{sv}(oayays)b", (props, (session, b"", b"\x00\x01\n\xff", "application/octet-stream"), True))
    check("CreateItem over a plain session", prompt == "/" and item.startswith(COLLECTION + "/"), item)
    item_addr = DBusAddress(item, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Item")
    (s,) = call(conn, item_addr, "GetSecret", "o", (session,))
    check("GetSecret over a plain session, content type kept", s == (session, b"", b"\x00\x01\n\xff", "application/octet-stream"), s)
    (secrets,) = call(conn, SERVICE, "GetSecrets", "aoo", ([item], session))
    check("GetSecrets", secrets == {item: (session, b"", b"\x00\x01\n\xff", "application/octet-stream")}, secrets)

    # Malformed and hostile calls: each gets its error, and the service keeps serving.
    raises("unknown algorithm", lambda: call(conn, SERVICE, "OpenSession", "sv", ("rot13", ("s", ""))),
           "org.freedesktop.DBus.Error.NotSupported")
    raises("dh with a string for a key", lambda: call(conn, SERVICE, "OpenSession", "sv",
           ("dh-ietf1024-sha256-aes128-cbc-pkcs7", ("s", "x"))), "org.freedesktop.DBus.Error.InvalidArgs")
    raises("dh with an out-of-range key", lambda: call(conn, SERVICE, "OpenSession", "sv",
           ("dh-ietf1024-sha256-aes128-cbc-pkcs7", ("ay", b"\x01"))), "org.freedesktop.DBus.Error.InvalidArgs")
    raises("wrong signature", lambda: call(conn, SERVICE, "SearchItems", "s", ("x",)),
           "org.freedesktop.DBus.Error.InvalidArgs")
    raises("GetSecret of an unknown item", lambda: call(conn, SERVICE, "GetSecrets", "aoo",
           ([COLLECTION + "/999999"], session)), "org.freedesktop.Secret.Error.NoSuchObject")
    raises("GetSecret with no such session", lambda: call(conn, item_addr, "GetSecret", "o",
           ("/org/freedesktop/secrets/session/s999999",)), "org.freedesktop.Secret.Error.NoSession")
    raises("unknown object path", lambda: call(conn, DBusAddress(COLLECTION + "/999999", bus_name="org.freedesktop.secrets",
           interface="org.freedesktop.Secret.Item"), "GetSecret", "o", (session,)), "org.freedesktop.Secret.Error.NoSuchObject")
    huge = {f"k{i}": "v" for i in range(1000)}
    raises("a huge attribute map", lambda: call(conn, SERVICE, "SearchItems", "a{ss}", (huge,)),
           "org.freedesktop.DBus.Error.LimitsExceeded")
    raises("a secret over 16 MiB", lambda: call(conn, coll, "CreateItem", "a{sv}(oayays)b",
           (props, (session, b"", b"x" * (16 * 1024 * 1024 + 100), "text/plain"), True)), "org.freedesktop.DBus.Error.LimitsExceeded")
    other = open_dbus_connection("SESSION")
    raises("another client's session is refused", lambda: call(other, item_addr, "GetSecret", "o", (session,)),
           "org.freedesktop.Secret.Error.NoSession")
    other.close()
    errors = 0
    for _ in range(70):
        try:
            call(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))
        except jeepney.wrappers.DBusErrorResponse as e:
            errors += 1
            last = e.name
    check("many sessions from one client are bounded", errors > 0 and last == "org.freedesktop.DBus.Error.LimitsExceeded",
          errors)
    (s,) = call(conn, item_addr, "GetSecret", "o", (session,))
    check("still serving after all that", s[2] == b"\x00\x01\n\xff")
    session_addr = DBusAddress(session, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Session")
    call(conn, session_addr, "Close")
    raises("a closed session is gone", lambda: call(conn, item_addr, "GetSecret", "o", (session,)),
           "org.freedesktop.Secret.Error.NoSession")
    (prompt,) = call(conn, item_addr, "Delete")
    check("Item.Delete", prompt == "/" and not os.path.exists(os.path.join(MNT, "plain", "p")))
    conn.close()


def signals():
    """Changes made through the CLI and the tree arrive as signals."""
    conn = open_dbus_connection("SESSION")
    rule = MatchRule(type="signal", interface="org.freedesktop.Secret.Collection", path=COLLECTION)
    call(conn, DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus"),
         "AddMatch", "s", (rule.serialise(),))
    got = []

    def wait_for(member, seconds=5):
        end = time.time() + seconds
        while time.time() < end:
            try:
                msg = conn.receive(timeout=max(0.1, end - time.time()))
            except TimeoutError:
                break
            if msg.header.fields.get(jeepney.HeaderFields.member) == member:
                got.append((member, msg.body[0]))
                return msg.body[0]
        return None

    kc("add-generic-password", "-s", "sigsvc", "-a", "sam", "-w", "one")
    created = wait_for("ItemCreated")
    check("ItemCreated for an item the CLI added", created is not None and created.startswith(COLLECTION + "/"), got)
    with open(os.path.join(MNT, "sigsvc", "sam"), "w") as f:
        f.write("two")
    changed = wait_for("ItemChanged")
    check("ItemChanged for a write through the tree", changed == created, (changed, created))
    os.unlink(os.path.join(MNT, "sigsvc", "sam"))
    deleted = wait_for("ItemDeleted")
    check("ItemDeleted for an unlink in the tree", deleted == created, (deleted, created))
    conn.close()


def keyring_backend():
    from keyring.backends import SecretService
    k = SecretService.Keyring()
    k.set_password("kr-service", "kr-user", "kr pass\nword")
    check("keyring set/get", k.get_password("kr-service", "kr-user") == "kr pass\nword")
    with open(os.path.join(MNT, "kr-service", "kr-user"), "rb") as f:
        check("keyring's password is a file", f.read() == b"kr pass\nword")
    r = kc("find-generic-password", "-s", "kr-service", "-a", "kr-user", "-w")
    check("keyring's password through the CLI", r.stdout.startswith(b"kr pass"), r)
    k.set_password("kr-service", "kr-user", "second")
    check("keyring set again replaces", k.get_password("kr-service", "kr-user") == "second")
    k.delete_password("kr-service", "kr-user")
    check("keyring delete", k.get_password("kr-service", "kr-user") is None
          and not os.path.exists(os.path.join(MNT, "kr-service", "kr-user")))


def lock_unlock():
    conn = secretstorage.dbus_init()
    coll = secretstorage.get_default_collection(conn)
    item = coll.create_item("L", {"service": "locksvc", "username": "lu"}, b"lock me")
    coll.lock()
    check("Lock locks the keychain", coll.is_locked())
    found = secretstorage.search_items(conn, {"service": "locksvc", "username": "lu"})
    check("a locked item is found by a search", [i.item_path for i in found] == [item.item_path])
    check("and is locked", item.is_locked())
    check("Collection.Items lists it", item.item_path in [i.item_path for i in coll.get_all_items()])
    out = call(open_dbus_connection("SESSION"), SERVICE, "SearchItems", "a{ss}", ({"service": "locksvc"},))
    check("SearchItems returns it in the locked list", out == ([], [item.item_path]), out)
    r = subprocess.run(["secret-tool", "search", "--all", "service", "locksvc"], capture_output=True)
    listed = f"[{item.item_path[item.item_path.rindex('/'):]}]\nlabel = L\n".encode()
    check("secret-tool search lists it while locked", listed in r.stdout, r.stdout + r.stderr)
    r = kc("status")
    check("the CLI sees it locked", b"locked" in r.stdout, r.stdout)
    try:
        open(os.path.join(MNT, "locksvc", "lu")).read()
        check("the tree refuses the locked item", False, "read")
    except OSError:
        check("the tree refuses the locked item", True)
    try:
        item.get_secret()
        check("GetSecret of a locked item is IsLocked", False, "got a secret")
    except LockedException:
        check("GetSecret of a locked item is IsLocked", True)
    except Exception as e:
        check("GetSecret of a locked item is IsLocked", "IsLocked" in repr(e), repr(e))
    raw = open_dbus_connection("SESSION")
    refused = None
    for n in range(20):
        try:
            call(raw, SERVICE, "Unlock", "ao", ([COLLECTION],))
        except jeepney.wrappers.DBusErrorResponse as e:
            refused = (n, e.name)
            break
    check("many open prompts from one client are bounded", refused == (16, "org.freedesktop.DBus.Error.LimitsExceeded"), refused)
    raw.close()
    # No prompt program is configured: the prompt completes dismissed.
    dismissed = coll.unlock()
    check("Unlock of a keychain with a passphrase, no prompt configured: dismissed", dismissed is True and coll.is_locked())
    kc("unlock", "--passphrase-file", os.environ["PASSFILE"])
    check("unlocked by the CLI, the collection is unlocked", not coll.is_locked())
    check("and the item's secret is back", item.get_secret() == b"lock me")
    item.delete()
    conn.close()


def concurrent_search():
    """A search while the tree changes: every answer is whole, and the service keeps serving."""
    conn = secretstorage.dbus_init()
    coll = secretstorage.get_default_collection(conn)
    for i in range(20):
        coll.create_item(f"c{i}", {"service": "concsvc", "username": f"u{i}"}, b"s%d" % i)
    stop = threading.Event()
    errors = []

    def churn():
        n = 0
        while not stop.is_set():
            p = os.path.join(MNT, "concsvc", f"t{n % 5}")
            try:
                with open(p, "w") as f:
                    f.write("x")
                os.unlink(p)
            except OSError as e:
                errors.append(e)
            n += 1

    want = {i.item_path for i in coll.search_items({"service": "concsvc"})}
    raw = open_dbus_connection("SESSION")
    t = threading.Thread(target=churn, daemon=True)
    t.start()
    bad = 0
    try:
        for _ in range(30):
            unlocked, locked = call(raw, SERVICE, "SearchItems", "a{ss}", ({"service": "concsvc"},))
            if not want <= set(unlocked):
                bad += 1
    finally:
        stop.set()
        t.join()
    raw.close()
    check("the search found the 20 stored items", len(want) == 20, len(want))
    check("searches during tree changes see every stored item", bad == 0 and not errors, (bad, errors[:3]))
    for i in coll.search_items({"service": "concsvc"}):
        i.delete()
    conn.close()


def no_passphrase():
    """A keychain with no passphrase unlocks at once; an item's Locked follows its class."""
    conn = secretstorage.dbus_init()
    coll = secretstorage.get_default_collection(conn)
    kc("add-generic-password", "-s", "cls", "-a", "always", "-w", "always-secret", "--accessible", "always")
    kc("add-generic-password", "-s", "cls", "-a", "normal", "-w", "normal-secret", "--accessible", "when-unlocked")
    raw = open_dbus_connection("SESSION")
    unlocked, _ = call(raw, SERVICE, "SearchItems", "a{ss}", ({"service": "cls"},))
    check("both items unlocked while the keychain is", len(unlocked) == 2, unlocked)
    coll.lock()
    check("Lock locks it", coll.is_locked())
    unlocked, locked = call(raw, SERVICE, "SearchItems", "a{ss}", ({"service": "cls"},))
    always = [p for p in unlocked if "always" in str(secretstorage.Item(conn, p).get_attributes())]
    check("an 'always' item stays unlocked while the keychain is locked", len(always) == 1 and len(unlocked) == 1,
          (unlocked, locked))
    if always:
        check("and its secret is readable", secretstorage.Item(conn, always[0]).get_secret() == b"always-secret")
    dismissed = coll.unlock()
    check("Unlock of a keychain with no passphrase unlocks at once, no prompt", dismissed is False and not coll.is_locked())
    found = list(coll.search_items({"service": "cls", "account": "normal"}))
    check("the when-unlocked item is back", len(found) == 1 and found[0].get_secret() == b"normal-secret")
    raw.close()
    conn.close()


def prompt():
    """Unlock through the configured pinentry (a scripted one, its mode in PINENTRY_DIR)."""
    pdir = os.environ["PINENTRY_DIR"]

    def mode(m):
        with open(os.path.join(pdir, "mode"), "w") as f:
            f.write(m)
    conn = secretstorage.dbus_init()
    coll = secretstorage.get_default_collection(conn)
    item = coll.create_item("P", {"service": "promptsvc", "username": "pu"}, b"behind a prompt")
    coll.lock()
    mode("cancel")
    check("a cancelled pinentry dismisses the prompt", coll.unlock() is True and coll.is_locked())
    mode("slow")
    waiting = threading.Thread(target=coll.unlock)
    waiting.start()
    time.sleep(0.5)
    other = open_dbus_connection("SESSION")
    start = time.time()
    call(other, SERVICE, "SearchItems", "a{ss}", ({"service": "promptsvc"},))
    took = time.time() - start
    other.close()
    waiting.join()
    check("a waiting prompt does not stall other clients", took < 1.0, took)
    mode("right")
    check("the right passphrase through pinentry unlocks", coll.unlock() is False and not coll.is_locked())
    check("and the secret is readable", item.get_secret() == b"behind a prompt")
    coll.lock()
    # Last: wrong passphrases start the unlock back-off.
    mode("wrong")
    check("a wrong passphrase, three times, dismisses it", coll.unlock() is True and coll.is_locked())
    with open(os.path.join(pdir, "log")) as f:
        log = f.read()
    check("pinentry was told who asks", "SETDESC" in log and "python3" in log and "(pid " in log, log[:300])
    check("and was given the timeout", "SETTIMEOUT 7" in log, log[:300])
    conn.close()


def memory():
    """What crosses the bus is wiped (root: the daemon is not dumpable). Right after each call
    of a plain session, no secret is in the daemon's unlocked memory (sd-bus's buffers of the
    call and of its reply); after a lock, none is anywhere, nor the ciphertext a dh session
    that stays open sent or got: with the session's key, which a lock keeps while its client is
    connected, that would give the secret back."""
    import json
    from secretstorage.util import open_session, format_secret
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import memscan
    with open(os.environ["KEYCHAINFS_STORE"] + ".daemon") as f:
        pid = json.load(f)["pid"]

    def marker():
        return os.urandom(24).hex().encode()

    peer = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets", interface="org.freedesktop.DBus.Peer")

    def unlocked_after(name, secret):
        # A round trip first: the daemon sends its answer before it frees the call.
        call(conn, peer, "Ping")
        found = memscan.scan(pid, [secret], True, True)
        check(f"{name}: not in the daemon's unlocked memory after the call", not found,
              [(r, hex(a), c) for hits in found.values() for r, a, c in hits])

    conn = open_dbus_connection("SESSION")
    _, session = call(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))
    coll = DBusAddress(COLLECTION, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Collection")
    created, read, replaced = marker(), marker(), marker()
    props = {"org.freedesktop.Secret.Item.Label": ("s", "mem"),
             "org.freedesktop.Secret.Item.Attributes": ("a{ss}", {"service": "memsvc", "username": "created"})}
    call(conn, coll, "CreateItem", "a{sv}(oayays)b", (props, (session, b"", created, "text/plain"), True))
    unlocked_after("CreateItem (plain)", created)
    # On standard input: a -w argument is in the command line, which anyone may read, and
    # which the daemon reads to name its caller.
    subprocess.run([KC, "add-generic-password", "-s", "memsvc", "-a", "read"], input=read, check=True)
    item = secretstorage.search_items(secretstorage.dbus_init(), {"service": "memsvc", "account": "read"})
    path = next(item).item_path
    item_addr = DBusAddress(path, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Item")
    (got,) = call(conn, item_addr, "GetSecret", "o", (session,))
    check("GetSecret (plain) reads it", bytes(got[2]) == read, got)
    unlocked_after("GetSecret (plain)", read)
    call(conn, SERVICE, "GetSecrets", "aoo", ([path], session))
    unlocked_after("GetSecrets (plain)", read)
    # Several items: sd-bus grows the reply as it goes (realloc), so the first secrets were in
    # smaller buffers that it gave back before the reply was sent. Secrets of a few KiB make
    # the reply grow past each of them.
    several = [marker() + os.urandom(1500 * (n + 1)).hex().encode() for n in range(4)]
    paths = []
    for n, secret in enumerate(several):
        subprocess.run([KC, "add-generic-password", "-s", "memsvc", "-a", f"several{n}"], input=secret, check=True)
        paths.append(next(secretstorage.search_items(secretstorage.dbus_init(),
                                                     {"service": "memsvc", "account": f"several{n}"})).item_path)
    (got,) = call(conn, SERVICE, "GetSecrets", "aoo", (paths, session))
    check("GetSecrets (plain) of four items reads them", sorted(bytes(v[2]) for v in got.values()) == sorted(several),
          len(got))
    call(conn, peer, "Ping")
    found = memscan.scan(pid, [s[:48] for s in several], True, True)
    check("GetSecrets (plain) of four items: none in the daemon's unlocked memory after the call", not found,
          [(r, hex(a), c) for hits in found.values() for r, a, c in hits])
    call(conn, item_addr, "SetSecret", "(oayays)", ((session, b"", replaced, "text/plain"),))
    unlocked_after("SetSecret (plain)", replaced)

    # A dh session, kept open across the lock.
    ss = secretstorage.dbus_init()
    dh = open_session(ss)
    sent, kept = marker(), marker()
    subprocess.run([KC, "add-generic-password", "-s", "memsvc", "-a", "dh"], input=sent, check=True)
    dh_path = next(secretstorage.search_items(ss, {"service": "memsvc", "account": "dh"})).item_path
    dh_item = DBusAddress(dh_path, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Item")
    # On the connection that opened the session: a session is its client's own.
    (out,) = call(ss, dh_item, "GetSecret", "o", (dh.object_path,))
    _, iv, ciphertext_in, _ = format_secret(dh, kept, "text/plain")
    call(ss, dh_item, "SetSecret", "(oayays)", ((dh.object_path, iv, ciphertext_in, "text/plain"),))
    ciphertext_out = bytes(out[2])
    # And several at once: their ciphertexts grew one reply, as the plain secrets above.
    (outs,) = call(ss, SERVICE, "GetSecrets", "aoo", (paths, dh.object_path))
    several_out = [bytes(v[2])[:48] for v in outs.values()]
    check("GetSecrets (dh) of four items answers each", len(several_out) == 4, len(outs))
    r = kc("lock")
    check("lock", r.returncode == 0, r.stderr)
    names = {created: "CreateItem", read: "GetSecret", replaced: "SetSecret", sent: "dh GetSecret",
             kept: "dh SetSecret", ciphertext_out: "dh GetSecret's ciphertext", ciphertext_in: "dh SetSecret's ciphertext"}
    names.update({s[:48]: f"GetSecrets' secret {n}" for n, s in enumerate(several)})
    names.update({c: f"dh GetSecrets' ciphertext {n}" for n, c in enumerate(several_out)})
    found = memscan.scan(pid, list(names), False, False)
    check("after lock none of them is in the daemon's memory, nor the dh ciphertexts", not found,
          [(names[m], len(h)) for m, h in found.items()])
    kc("unlock", "--passphrase-file", os.environ["PASSFILE"])
    for account in ["created", "read", "dh"] + [f"several{n}" for n in range(4)]:
        subprocess.run([KC, "delete-generic-password", "-s", "memsvc", "-a", account], capture_output=True)
    ss.close()
    conn.close()



# Holds a descriptor of the item's file with a write not yet committed (the mount commits at
# close), until told to close it. A process of its own: a descriptor of this one would be
# closed, and its write committed (FUSE flush), in every child forked here (subprocess), so
# the change under test would no longer come after an uncommitted write.
HOLDER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.write(fd, b"MOUNT")
print("written", flush=True)
sys.stdin.readline()
os.close(fd)
print("closed", flush=True)
"""


def uncommitted_writes():
    """A value stored over D-Bus (SetSecret, CreateItem with replace) or the CLI while a file of
    the item has a write not yet committed: its client heard "done", so the file's close must
    not write its older copy over it (it did: found by a tester with python3-secretstorage)."""
    conn = secretstorage.dbus_init()
    coll = secretstorage.get_default_collection(conn)
    path = lambda account: os.path.join(MNT, "co", account)

    # The tester's sequence as it was: the descriptor in this process, closed with no fork
    # between the change and the close.
    for how, change in [
        ("SetSecret", lambda item, account: item.set_secret(b"from-dbus")),
        ("CreateItem replace", lambda item, account: coll.create_item(
            "L", {"service": "co", "username": account}, b"from-dbus", replace=True)),
    ]:
        account = "same-" + how.split()[0]
        item = coll.create_item("L", {"service": "co", "username": account}, b"0123456789", replace=True)
        fd = os.open(path(account), os.O_RDWR)
        os.write(fd, b"MOUNT")
        change(item, account)
        check(f"{how} with a write pending: the file reads the new value", tree_secret("co", account) == b"from-dbus",
              tree_secret("co", account))
        os.close(fd)
        check(f"{how}: the pending write's close did not undo it (tree)", tree_secret("co", account) == b"from-dbus",
              tree_secret("co", account))
        check(f"{how}: nor over D-Bus", item.get_secret() == b"from-dbus", item.get_secret())
        r = kc("find-generic-password", "-s", "co", "-a", account, "-w")
        check(f"{how}: nor in the CLI", r.stdout == b"from-dbus", r.stdout)

    # The writer in another process, so that the CLI can be run while its write is pending.
    for how, change in [
        ("SetSecret", lambda item, account: item.set_secret(b"from-other")),
        ("CreateItem replace", lambda item, account: coll.create_item(
            "L", {"service": "co", "username": account}, b"from-other", replace=True)),
        ("CLI -U", lambda item, account: kc("add-generic-password", "-s", "co", "-a", account, "-w", "from-other", "-U")),
    ]:
        account = "held-" + how.split()[0]
        # Two bytes longer than the new value: stat tells the pending copy's size from its.
        item = coll.create_item("L", {"service": "co", "username": account}, b"0123456789ab", replace=True)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, path(account)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        check(f"{how}: the holder wrote", holder.stdout.readline() == b"written\n")
        change(item, account)
        r = kc("find-generic-password", "-s", "co", "-a", account, "-w")
        check(f"{how}, the write still pending: the CLI finds the new value", r.stdout == b"from-other", r.stdout)
        check(f"{how}, pending: so does the tree", tree_secret("co", account) == b"from-other", tree_secret("co", account))
        check(f"{how}, pending: stat shows its size, not the pending write's", os.stat(path(account)).st_size == 10,
              os.stat(path(account)).st_size)
        holder.stdin.write(b"\n")
        holder.stdin.flush()
        check(f"{how}: the holder closed", holder.stdout.readline() == b"closed\n")
        holder.wait()
        check(f"{how}: the close did not undo it (tree)", tree_secret("co", account) == b"from-other",
              tree_secret("co", account))
        check(f"{how}: nor over D-Bus", item.get_secret() == b"from-other", item.get_secret())
        r = kc("find-generic-password", "-s", "co", "-a", account, "-w")
        check(f"{how}: nor in the CLI", r.stdout == b"from-other", r.stdout)
    conn.close()

{"secretstorage": secretstorage_api, "memory": memory, "aliases": aliases, "plain": plain_session, "signals": signals,
 "keyring": keyring_backend, "lock": lock_unlock, "concurrent": concurrent_search,
 "nopass": no_passphrase, "prompt": prompt, "collections": collections,
 "collections_after": collections_after, "busy": busy, "uncommitted": uncommitted_writes}[STEP]()
sys.exit(1 if failed else 0)
