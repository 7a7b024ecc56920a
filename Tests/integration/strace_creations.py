"""Reads an `strace -f` log and prints every file created under PREFIX, with its mode and flags,
one line each: "created PATH MODE FLAGS". A file counts as created by the first successful open
with O_CREAT (or mknod, or a socket's bind) while it does not exist; unlink and rename are
followed, so that SQLite's re-creation of a side file it deleted counts too.
Usage: strace_creations.py LOG PREFIX"""
import re
import sys

log, prefix = sys.argv[1], sys.argv[2]
existing = set()
call = re.compile(r'^\d+\s+(\w+)\((.*)\)\s+=\s+(-?\d+)')
for line in open(log):
    m = call.match(line)
    if not m:
        continue
    name, args, result = m.group(1), m.group(2), int(m.group(3))
    paths = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
    if result < 0 or not paths:
        continue
    if name in ("open", "openat", "creat"):
        path = paths[0]
        fields = [f.strip() for f in args.split(",")]
        flags = next((f for f in fields if "O_" in f), "")
        mode = fields[-1] if re.fullmatch(r'0[0-7]+', fields[-1]) else None
        if ("O_CREAT" in flags or name == "creat") and path not in existing:
            if path.startswith(prefix):
                print("created", path, mode, flags)
            existing.add(path)
        else:
            existing.add(path)
    elif name in ("unlink", "unlinkat"):
        existing.discard(paths[-1])
    elif name in ("rename", "renameat", "renameat2") and len(paths) == 2:
        existing.discard(paths[0])
        existing.add(paths[1])
    elif name in ("mknod", "mknodat", "bind"):
        if paths[0].startswith(prefix) and paths[0] not in existing:
            print("created", paths[0], "socket/node", name)
        existing.add(paths[0])
