"""The keychainfs control protocol from outside, for test_control.sh: a client that skips the
CLI's checks, clients that misbehave, and a fake daemon of another version.

A frame is b"KCFS" | version u16 | kind u16 | payload length u32 | payload (big-endian); the
payload is fields tag u16 | length u32 | value. See Sources/KeychainControlProtocol.
"""
import fcntl
import json
import os
import resource
import socket
import struct
import sys
import time

SAVE, STATUS = 1, 6
FAILED, MISMATCH = 0x80FF, 0xFFFF
TAGS = {"kind": 10, "accessGroup": 11, "account": 12, "service": 13, "server": 14, "port": 15, "path": 16,
        "protocol": 17, "authenticationType": 18, "securityDomain": 19}
KEY, SECRET, ERROR_CASE, MESSAGE = 50, 54, 80, 81


def field(tag, value):
    return struct.pack(">HI", tag, len(value)) + value


def frame(version, kind, payload=b""):
    return b"KCFS" + struct.pack(">HHI", version, kind, len(payload)) + payload


def fields(payload):
    out, at = {}, 0
    while at < len(payload):
        tag, n = struct.unpack(">HI", payload[at:at + 6])
        out[tag] = payload[at + 6:at + 6 + n]
        at += 6 + n
    return out


def read_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frame(sock):
    header = read_exactly(sock, 12)
    if header is None:
        return None
    _, version, kind, n = struct.unpack(">4sHHI", header)
    return version, kind, read_exactly(sock, n) or b""


def describe(reply):
    if reply is None:
        return "closed"
    _, kind, payload = reply
    if kind == FAILED:
        f = fields(payload)
        return "error %d %s" % (struct.unpack(">H", f[ERROR_CASE])[0], f.get(MESSAGE, b"").decode(errors="replace"))
    return "kind %#x" % kind


IDENTIFIED = 0x800B


def connect(path):
    """Connects as a client of protocol 6 does: the daemon's first frame says it has
    identified this process (per-program access), before any request."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    first = read_frame(s)
    if first is None or first[1] != IDENTIFIED:
        raise SystemExit("the daemon did not open with 'identified': %s" % describe(first))
    return s


def save(path, version, key_json, secret):
    """Sends a save whose key fields come from JSON as they are, unchecked."""
    key = b""
    for name, value in json.loads(key_json).items():
        if name == "kind":
            key += field(TAGS[name], struct.pack(">B", value))
        elif name == "port":
            key += field(TAGS[name], struct.pack(">H", value))
        else:
            key += field(TAGS[name], value.encode())
    s = connect(path)
    s.sendall(frame(version, SAVE, field(KEY, key) + field(SECRET, secret.encode())))
    print(describe(read_frame(s)))


def idle(path, count, ready):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 100), hard))
    held = [connect(path) for _ in range(count)]
    open(ready, "w").close()
    time.sleep(120)
    del held


def slow(path, version):
    """Sends a status request one byte a second; prints how long the daemon kept the connection."""
    s = connect(path)
    start = time.monotonic()
    for b in frame(version, STATUS)[:-1]:
        try:
            s.send(bytes([b]))
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    break
            except BlockingIOError:
                pass
            s.setblocking(True)
        except OSError:
            break
        time.sleep(1)
        if time.monotonic() - start > 30:
            print("open")
            return
    print("%.1f" % (time.monotonic() - start))


def oversize(path, version):
    s = connect(path)
    start = time.monotonic()
    s.sendall(b"KCFS" + struct.pack(">HHI", version, SAVE, 0x7FFFFFFF))
    reply = read_frame(s)
    print("%s after %.1f s" % (describe(reply), time.monotonic() - start))


def fake_daemon(store, record_protocol, record_version, reply_version, ready):
    """Holds the store like a daemon of another version: its first frame on every connection is a mismatch."""
    store = os.path.realpath(store)
    lock = open(store, "rb")
    fcntl.flock(lock, fcntl.LOCK_EX)
    sock_path = store + ".sock"
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(16)
    record = {"pid": os.getpid(), "storePath": store, "mountpoint": "/nonexistent", "socketPath": sock_path,
              "version": record_version, "protocol": int(record_protocol)}
    with open(store + ".daemon", "w") as f:
        json.dump(record, f)
    os.chmod(store + ".daemon", 0o600)
    open(ready, "w").close()
    while True:
        conn, _ = server.accept()
        try:
            # Its first frame, where a daemon of protocol 6 says `identified`: a client waits
            # for that frame before it sends its request.
            payload = field(1, b"9.9.9") + field(2, struct.pack(">H", int(reply_version)))
            conn.sendall(frame(int(reply_version), MISMATCH, payload))
            read_frame(conn)
        except OSError:
            pass
        conn.close()


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "save":
        save(args[0], int(args[1]), args[2], args[3])
    elif command == "idle":
        idle(args[0], int(args[1]), args[2])
    elif command == "slow":
        slow(args[0], int(args[1]))
    elif command == "oversize":
        oversize(args[0], int(args[1]))
    elif command == "fake-daemon":
        fake_daemon(*args)
    else:
        sys.exit("unknown command " + command)
