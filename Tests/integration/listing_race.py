#!/usr/bin/python3
"""Lists DIR through getdents64 with a small buffer (a few entries per call, so the
listing takes many FUSE requests) and changes the directory between the calls: deletes
names listed and not yet listed, creates names (one of them kept open, pending, from before
the listing until after it was listed), renames. Prints "ok N" when every name that
existed throughout was listed exactly once and nothing was listed that never existed;
else what went wrong, and exits 1.

    listing_race.py DIR
"""
import ctypes
import os
import random
import sys

SYS_GETDENTS64 = 217  # x86_64
libc = ctypes.CDLL(None, use_errno=True)


def getdents(fd, size=480):
    buf = ctypes.create_string_buffer(size)
    n = libc.syscall(SYS_GETDENTS64, fd, buf, size)
    if n < 0:
        raise OSError(ctypes.get_errno(), "getdents64")
    out, pos = [], 0
    raw = buf.raw[:n]
    while pos < n:
        reclen = int.from_bytes(raw[pos + 16:pos + 18], "little")
        name = raw[pos + 19:pos + reclen].split(b"\0", 1)[0].decode()
        out.append(name)
        pos += reclen
    return out


def main():
    d = sys.argv[1]
    rng = random.Random(7)
    # A file created and kept open with nothing written: a pending item, until its close.
    pending_name = "pending-one"
    pending = open(os.path.join(d, pending_name), "wb")
    first = os.listdir(d)
    if len(first) != len(set(first)):
        print("a listing with a pending file repeats names")
        return 1
    before = set(first)
    ever = set(before)
    gone = set()          # deleted or renamed away: may be listed or not
    listed = []
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    calls = 0
    try:
        while True:
            # Mostly a few entries per call; every eighth call a buffer as glibc's readdir
            # takes, which holds a whole FUSE reply (pending entries first, then stored ones).
            names = getdents(fd, 32768 if calls % 8 == 7 else 480)
            if not names:
                break
            calls += 1
            listed += [n for n in names if n not in (".", "..")]
            if pending is not None and pending_name in listed:
                # Committed now, under a new row id past the listing's cursor.
                pending.write(b"now stored")
                pending.close()
                pending = None
            if calls % 3:
                continue
            seen = set(listed)
            lasting = sorted(before - gone)
            unseen = [n for n in lasting if n not in seen and n != pending_name]
            already = [n for n in lasting if n in seen and n != pending_name]
            for pool in (unseen, already):
                if pool:
                    victim = rng.choice(pool)
                    os.unlink(os.path.join(d, victim))
                    gone.add(victim)
            if unseen:
                moved = rng.choice([n for n in unseen if n not in gone] or [None])
                if moved:
                    os.rename(os.path.join(d, moved), os.path.join(d, moved + "-moved"))
                    gone.add(moved)
                    ever.add(moved + "-moved")
            new = "new-%d" % calls
            with open(os.path.join(d, new), "wb") as f:
                f.write(b"x")
            ever.add(new)
    finally:
        os.close(fd)
        if pending is not None:
            pending.close()
    lasting = before - gone
    problems = []
    twice = sorted({n for n in listed if listed.count(n) > 1})
    if twice:
        problems.append("listed twice: %s" % twice[:10])
    missed = sorted(lasting - set(listed))
    if missed:
        problems.append("missed: %s" % missed[:10])
    unknown = sorted(set(listed) - ever)
    if unknown:
        problems.append("never existed: %s" % unknown[:10])
    if calls < 10:
        problems.append("only %d getdents calls" % calls)
    if problems:
        print("; ".join(problems))
        return 1
    print("ok %d names in %d calls, %d changed" % (len(set(listed)), calls, len(gone)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
