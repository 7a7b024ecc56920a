#!/usr/bin/env python3
"""Scans a process's memory for marker strings, as an attacker with ptrace rights would.

    memscan.py PID [--context] [--unlocked-only] [NAME=]MARKER...

Reads /proc/PID/smaps and every readable region of /proc/PID/mem (root reads a non-dumpable
process too). Prints one line per marker found: its name, how many times, and in which
regions; with --context also the bytes around each hit. --unlocked-only looks only in
regions that are not locked in RAM (mlock), which may be swapped out. Exits 0 when no
marker is found, 1 when some is, 2 when the memory cannot be read.
"""
import re
import sys

CHUNK = 8 << 20
CONTEXT = 64


def regions(pid, unlocked_only):
    """(start, end, name) of each readable region, from smaps, whose VmFlags say "lo" when locked."""
    found = []
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=5)
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                start, end = (int(x, 16) for x in head[0].split("-"))
                found.append([start, end, head[1], head[5].strip() if len(head) > 5 else "", False])
            elif line.startswith("VmFlags:") and found:
                found[-1][4] = "lo" in line.split()[1:]
    for start, end, perms, name, locked in found:
        # Kernel pages that reading may fault on; they hold no data of the process.
        if perms[0] != "r" or name in ("[vvar]", "[vvar_vclock]", "[vsyscall]"):
            continue
        if unlocked_only and locked:
            continue
        yield start, end, (name or "anonymous") + (" (locked)" if locked else "")


def scan(pid, markers, context, unlocked_only):
    """{marker: [(region, address, surrounding bytes)]} for the markers found."""
    found = {m: [] for m in markers}
    keep = max(len(m) for m in markers) - 1 + CONTEXT
    pattern = re.compile(b"|".join(re.escape(m) for m in markers))
    readable = 0
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for start, end, name in regions(pid, unlocked_only):
            at, tail = start, b""
            while at < end:
                size = min(CHUNK, end - at)
                try:
                    mem.seek(at)
                    data = mem.read(size)
                except OSError:
                    break
                readable += len(data)
                window = tail + data
                for match in pattern.finditer(window):
                    if match.end() <= len(tail):
                        continue  # found in the previous chunk already
                    around = window[max(0, match.start() - CONTEXT):match.end() + CONTEXT] if context else b""
                    found[match.group(0)].append((name, at - len(tail) + match.start(), around))
                tail = window[-keep:]
                at += size
    if readable == 0 and not unlocked_only:
        print(f"memscan: nothing of process {pid} was readable", file=sys.stderr)
        sys.exit(2)
    return {m: hits for m, hits in found.items() if hits}


def main():
    args = sys.argv[1:]
    context = "--context" in args
    unlocked_only = "--unlocked-only" in args
    args = [a for a in args if a not in ("--context", "--unlocked-only")]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    pid = int(args[0])
    names = {}
    for arg in args[1:]:
        name, _, value = arg.rpartition("=")
        names[value.encode()] = name or value
    try:
        found = scan(pid, list(names), context, unlocked_only)
    except OSError as e:
        print(f"memscan: {e}", file=sys.stderr)
        sys.exit(2)
    for marker, hits in found.items():
        where = ", ".join(sorted(set(h[0] for h in hits)))
        print(f"{names[marker]} found {len(hits)} times in {where}")
        for region, address, around in hits if context else []:
            print(f"    {region} {address:#x}: {around!r}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
