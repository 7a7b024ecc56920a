#!/usr/bin/env python3
"""Reads the items keychainfs-fill made, through a mount, and checks each secret.

    read_filled.py MOUNTPOINT COUNT PER-SERVICE PREFIX

Prints the number of items that failed to read or read wrong, then the seconds taken.
"""
import sys
import time

mountpoint, count, per_service, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
bad = 0
start = time.monotonic()
for i in range(count):
    want = f"{prefix}-{i:07d}-".ljust(len(prefix) + 23, "f").encode()
    try:
        with open(f"{mountpoint}/svc{i // per_service}/a{i}", "rb") as f:
            if f.read() != want:
                bad += 1
    except OSError as e:
        if bad < 5:
            print(f"a{i}: {e}", file=sys.stderr)
        bad += 1
print(bad, round(time.monotonic() - start, 1))
