#!/usr/bin/env python3
"""The attacker's side of "nothing deleted can be recovered": copies a keychainfs store's
files (db, -wal, -shm, -journal, -reserve) and recovers every sealed row they still hold:

  * every historical state the WAL holds, replayed commit by commit (a commit frame is one
    whose "database size" field is non-zero), each opened with SQLite;
  * every page of every file, free pages and stale WAL frames included, scanned byte by byte
    for item records (their header has a fixed signature: two 32-byte blind indexes and a
    60-byte wrapped key).

It fails (exit 1) if a sealed secret or sealed extras blob found anywhere is not in the
current state, or, with --classes, if any row ever held has a class outside the given list.

With --disk IMAGE, the bytes of IMAGE (the file system the store is on, unmounted) are
scanned too: the blocks of files deleted or cut, the WAL's included.

usage: wal_replay.py STORE [--classes 4,5,6,7] [--disk IMAGE] [--quiet]
"""
import os
import shutil
import sqlite3
import struct
import sys
import tempfile

SUFFIXES = ["", "-wal", "-shm", "-journal", "-reserve"]
# Serial types of the blind, group_blind and wrapped_key columns: blobs of 32, 32 and 60 bytes.
SIGNATURE = bytes([12 + 2 * 32, 12 + 2 * 32, 0x81, 0x04])


def varint(b, i):
    v = 0
    for n in range(9):
        c = b[i + n]
        if n == 8:
            return (v << 8) | c, i + 9
        v = (v << 7) | (c & 0x7F)
        if c < 0x80:
            return v, i + n + 1
    raise ValueError


def serial_size(t):
    if t in (0, 8, 9):
        return 0
    if 1 <= t <= 4:
        return t
    if t == 5:
        return 6
    if t in (6, 7):
        return 8
    if t >= 12:
        return (t - 12) // 2 if t % 2 == 0 else (t - 13) // 2
    raise ValueError


def serial_value(t, body):
    if t == 0:
        return None
    if t in (8, 9):
        return t - 8
    if 1 <= t <= 6:
        return int.from_bytes(body, "big", signed=True)
    if t == 7:
        return struct.unpack(">d", body)[0]
    return bytes(body)


def records_in(raw, usable):
    """Every item record whose bytes lie whole in `raw` (records that overflow to other pages
    are left to the SQLite replay)."""
    out = []
    start = 0
    while True:
        at = raw.find(SIGNATURE, start)
        if at < 0:
            return out
        start = at + 1
        h = at - 5  # header size, id (NULL: the rowid), kind, class, version
        if h < 0 or raw[h + 1] != 0:
            continue
        try:
            hsize, i = varint(raw, h)
            if hsize < 10 or hsize > 40:
                continue
            types = []
            while i < h + hsize:
                t, i = varint(raw, i)
                types.append(t)
            if len(types) not in (9, 11) or i != h + hsize:
                continue
            total = hsize + sum(serial_size(t) for t in types)
            if total > usable - 35 or h + total > len(raw):
                continue
            values, p = [], h + hsize
            for t in types:
                n = serial_size(t)
                values.append(serial_value(t, raw[p:p + n]))
                p += n
        except (ValueError, IndexError):
            continue
        kind, cls, version = values[1], values[2], values[3]
        if kind not in (1, 2) or not isinstance(cls, int) or not isinstance(values[8], bytes):
            continue
        extras = values[10] if len(values) == 11 else None
        out.append({"class": cls, "version": version, "secret": values[8], "extras": extras, "where": h})


def wal_frames(wal):
    """(salt-valid frames of the current WAL generation, all frames) as (pgno, commit size, data)."""
    if len(wal) < 32:
        return [], []
    magic, _version, page_size, _seq, salt1, salt2 = struct.unpack(">IIIIII", wal[:24])
    if magic not in (0x377F0682, 0x377F0683) or page_size < 512:
        return [], []
    valid, every = [], []
    off = 32
    in_order = True
    while off + 24 + page_size <= len(wal):
        pgno, size, s1, s2 = struct.unpack(">IIII", wal[off:off + 16])
        data = wal[off + 24:off + 24 + page_size]
        every.append((pgno, size, data))
        if in_order and (s1, s2) == (salt1, salt2) and pgno > 0:
            valid.append((pgno, size, data))
        else:
            in_order = False
        off += 24 + page_size
    return valid, every


def rows_of_image(image, scratch):
    """Opens a database image with SQLite and returns its item rows, or None if it does not open."""
    path = os.path.join(scratch, "state.db")
    img = bytearray(image)
    if len(img) >= 20:
        img[18] = img[19] = 1  # rollback-journal format: the image is read as it is, no WAL
    with open(path, "wb") as f:
        f.write(img)
    try:
        con = sqlite3.connect("file:%s?immutable=1" % path, uri=True)
        cols = [r[1] for r in con.execute("PRAGMA table_info(items)")]
        extras = "extras" if "extras" in cols else "NULL"
        rows = con.execute("SELECT id, class, version, secret, %s FROM items" % extras).fetchall()
        con.close()
        return [{"id": r[0], "class": r[1], "version": r[2], "secret": bytes(r[3]),
                 "extras": bytes(r[4]) if r[4] is not None else None} for r in rows]
    except sqlite3.DatabaseError:
        return None


def main():
    args = sys.argv[1:]
    quiet = "--quiet" in args
    args = [a for a in args if a != "--quiet"]
    classes = None
    if "--classes" in args:
        i = args.index("--classes")
        classes = {int(c) for c in args[i + 1].split(",")}
        del args[i:i + 2]
    disk = None
    if "--disk" in args:
        i = args.index("--disk")
        disk = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    store = args[0]
    scratch = tempfile.mkdtemp(prefix="kcfs-attack.")
    try:
        # The attacker's copy, taken at once, as cp would.
        files = {}
        for s in SUFFIXES:
            if os.path.exists(store + s):
                with open(store + s, "rb") as f:
                    files[s] = f.read()
        db = files.get("", b"")
        wal = files.get("-wal", b"")
        page_size = struct.unpack(">H", db[16:18])[0] if len(db) >= 100 else 4096
        page_size = 65536 if page_size == 1 else page_size
        usable = page_size - (db[20] if len(db) >= 100 else 0)

        # The current state: the copy as SQLite opens it, WAL included.
        live = os.path.join(scratch, "live.db")
        for s in ("", "-wal"):
            if s in files:
                with open(live + s, "wb") as f:
                    f.write(files[s])
        con = sqlite3.connect(live)
        current = set()
        has_extras = "extras" in [r[1] for r in con.execute("PRAGMA table_info(items)")]
        for secret, extras in con.execute("SELECT secret, %s FROM items" % ("extras" if has_extras else "NULL")):
            current.add(bytes(secret))
            if extras is not None:
                current.add(bytes(extras))
        con.close()

        found = []  # (source, row)
        # Every historical state: the database file with the WAL's frames applied up to each commit.
        valid, every = wal_frames(wal)
        pages = {n: db[(n - 1) * page_size:n * page_size] for n in range(1, len(db) // page_size + 1)}
        states = 0
        for k, (pgno, size, data) in enumerate(valid):
            pages[pgno] = data
            if size == 0:
                continue
            image = b"".join(pages.get(n, bytes(page_size)) for n in range(1, size + 1))
            rows = rows_of_image(image, scratch)
            states += 1
            for r in rows or []:
                found.append(("WAL commit ending at frame %d" % (k + 1), r))
        # Every byte of every file: live pages, free pages, stale frames of older WAL generations.
        for s, raw in files.items():
            for r in records_in(raw, usable):
                found.append(("bytes of keychain.db%s at offset %d" % (s, r["where"]), r))

        if disk is not None:
            with open(disk, "rb") as f:
                raw = f.read()
            for r in records_in(raw, usable):
                found.append(("bytes of the disk %s at offset %d" % (os.path.basename(disk), r["where"]), r))

        problems = []
        for source, r in found:
            for part in ("secret", "extras"):
                blob = r.get(part)
                if blob is not None and blob not in current:
                    problems.append("%s: a sealed %s (class %s, version %s) that is not in the current state"
                                    % (source, part, r["class"], r["version"]))
            if classes is not None and r["class"] not in classes:
                problems.append("%s: a row of class %s, outside %s" % (source, r["class"], sorted(classes)))
        if not quiet:
            print("replayed %d WAL commits (%d frames, %d of the current generation); %d rows found; %d current values"
                  % (states, len(every), len(valid), len(found), len(current)))
        for p in sorted(set(problems)):
            print("RECOVERABLE " + p)
        return 1 if problems else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
