#!/usr/bin/env python3
"""Catches a client (the git helper, the CLI) holding a secret and scans its memory, as root can.

    client_memory.py NAME DAEMON_PID MEMSCAN --feed FILE [MARKER...] -- COMMAND...
    client_memory.py NAME DAEMON_PID MEMSCAN --feed-sent FILE [MARKER...] -- COMMAND...
    client_memory.py NAME DAEMON_PID MEMSCAN --block FD[:ROOM] [MARKER...] -- COMMAND...
    client_memory.py NAME DAEMON_PID MEMSCAN --block-tty FD [MARKER...] -- COMMAND...

--feed: COMMAND's standard input is a pipe it waits on; once it blocks reading it, the daemon
is stopped (SIGSTOP) and FILE (holding the secrets) is written, so the client reads it and then
waits for the daemon's answer. --feed-sent: the same, but the daemon runs on, and strace
delays its second recvmsg(2) per thread by 3 s: the control server reads a request as a header,
then its payload, so the client is caught after it has built and sent its whole request (the
secret among it), waiting for the answer. --block FD: descriptor FD (1 or 2) of COMMAND is a pipe filled
beforehand, with standard input from /dev/null, so the client blocks writing a secret it got;
with ROOM, that many bytes are left free, so that it blocks only after writing that much.
--block-tty FD: the same with a terminal (a pty whose buffer is full), for what a client writes
only at one, such as a progress line.

While it waits, memscan.py looks for each MARKER ([NAME=]BYTES) in the client's memory twice:
in the regions that are not locked (where a copy could be swapped out, or left behind
unwiped) it must find none; in all of its memory it must find each one at least once (so the
scan sees the secret where it is kept, and the first check can fail), but for a MARKER written
?[NAME=]BYTES, which the client may already have wiped. Prints one line per check, "ok ..." or "not ok ..."; exits 1 if a check failed, 2 if the client was never caught
waiting.
"""
import fcntl
import os
import pty
import signal
import subprocess
import sys
import time


def syscall(pid):
    """The client's current system call and its first argument, as /proc/PID/syscall shows."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return None
    return (fields[0], fields[1]) if len(fields) > 1 else (fields[0], "")


def wait_for(pid, predicate, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = syscall(pid)
        if state is not None and predicate(state):
            return True
        time.sleep(0.02)
    return False


def scan(memscan, pid, markers, unlocked_only):
    args = [sys.executable, memscan, str(pid)] + (["--unlocked-only"] if unlocked_only else []) + markers
    run = subprocess.run(args, capture_output=True, text=True)
    return run.returncode, run.stdout.strip().replace("\n", "; ")


def full_pipe(room):
    """A pipe with `room` bytes free, so that a write past them blocks."""
    r, w = os.pipe()
    size = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ
    if room >= size:
        size = fcntl.fcntl(w, 1031, room + 65536)  # F_SETPIPE_SZ: root may pass pipe-max-size
    os.write(w, b"x" * (size - room))
    return r, w


def full_terminal():
    """A pty (master, slave) whose buffer is full: not even a byte more fits on the slave."""
    master, slave = pty.openpty()
    fcntl.fcntl(slave, fcntl.F_SETFL, os.O_NONBLOCK)
    # Large writes, then single bytes; again after a pause, since the pty moves what was
    # written into the other side's buffer a moment later, making room.
    for size in (256, 1, 0, 256, 1, 0, 1):
        if size == 0:
            time.sleep(0.2)
            continue
        try:
            while True:
                os.write(slave, b"x" * size)
        except BlockingIOError:
            pass
    fcntl.fcntl(slave, fcntl.F_SETFL, 0)
    return master, slave


def drain_all(fd):
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # a pty's master reads EIO once the slave is closed
        pass
    os.close(fd)


def main():
    name, daemon, memscan, mode, arg = sys.argv[1:6]
    rest = sys.argv[6:]
    split = rest.index("--")
    markers, command = [m.lstrip("?") for m in rest[:split]], rest[split + 1:]
    required = [m for m in rest[:split] if not m.startswith("?")]
    daemon = int(daemon)
    stopped = False
    drain = None
    delayer = None
    if mode in ("--feed", "--feed-sent"):
        with open(arg, "rb") as f:
            body = f.read()
        if mode == "--feed-sent":
            delayer = subprocess.Popen(["strace", "-f", "-qq", "-o", "/dev/null", "-p", str(daemon), "-e", "trace=recvmsg",
                                        "-e", "inject=recvmsg:delay_enter=3000000:when=2"])
            time.sleep(0.5)  # attached to every thread
        stdin_r, stdin_w = os.pipe()
        child = subprocess.Popen(command, stdin=stdin_r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(stdin_r)
        # read(2) is system call 0 on x86-64; its first argument the descriptor, 0.
        caught = wait_for(child.pid, lambda s: s == ("0", "0x0"))
        if caught and mode == "--feed":
            os.kill(daemon, signal.SIGSTOP)
            stopped = True
    else:
        fd, _, room = arg.partition(":")
        fd = int(fd)
        drain, w = full_terminal() if mode == "--block-tty" else full_pipe(int(room or 0))
        outputs = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        outputs["stdout" if fd == 1 else "stderr"] = w
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, **outputs)
        os.close(w)
        # write(2) is system call 1.
        caught = wait_for(child.pid, lambda s: s == ("1", hex(fd)))
    failed = False
    try:
        if mode in ("--feed", "--feed-sent"):
            try:
                os.write(stdin_w, body)
            finally:
                os.close(stdin_w)
            if caught:
                # Then blocked again, now on its call to the daemon: stopped, or (--feed-sent)
                # reading its request late; past the identification's round trip, the answer's.
                caught = wait_for(child.pid, lambda s: s[0] != "running" and s != ("0", "0x0"))
                time.sleep(0.5 if mode == "--feed-sent" else 0.2)
                caught = caught and child.poll() is None
        if not caught:
            print(f"not ok {name}: the client was caught waiting")
            return 2
        rc, out = scan(memscan, child.pid, markers, unlocked_only=True)
        ok = rc == 0
        failed |= not ok
        print(("ok" if ok else "not ok") + f" {name}: no secret in unlocked memory" + ("" if ok else f" ({out})"))
        rc, out = scan(memscan, child.pid, markers, unlocked_only=False)
        ok = rc in (0, 1) and bool(required) and all(f"{m.rpartition('=')[0] or m} found" in out for m in required)
        failed |= not ok
        print(("ok" if ok else "not ok") + f" {name}: each secret is in locked memory, where the scan sees it"
              + ("" if ok else f" (memscan exited {rc}: {out})"))
    finally:
        if stopped:
            os.kill(daemon, signal.SIGCONT)
        if delayer is not None:
            delayer.terminate()
            delayer.wait()
        if drain is not None:
            # So that the client can finish its answer.
            drain_all(drain)
        child.wait(timeout=30)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
