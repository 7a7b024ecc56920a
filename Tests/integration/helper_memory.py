#!/usr/bin/env python3
"""Catches git-credential-keychainfs holding a secret and scans its memory, as root can.

    helper_memory.py HELPER DAEMON_PID MEMSCAN store REQUEST MARKER...
    helper_memory.py HELPER DAEMON_PID MEMSCAN get REQUEST MARKER...

store: the helper is started with its standard input a pipe it waits on; once it blocks
reading it, the daemon is stopped (SIGSTOP) and the request (REQUEST, with its password and
refresh token) is written, so the helper parses it and then waits for the daemon's answer to
its first call. get: the helper's standard output is a pipe filled beforehand, so it blocks
writing its answer (the stored password and token).

While it waits, memscan.py looks for each MARKER in the helper's memory twice: in the regions
that are not locked (where a copy could be swapped out, or left behind unwiped) it must find
none; in all of its memory it must find each one at least once (so the scan sees the secret
where it is kept, and the first check can fail). Prints one line per check, "ok NAME" or
"not ok NAME"; exits 1 if a check failed, 2 if the helper was never caught waiting.
"""
import fcntl
import os
import signal
import subprocess
import sys
import time


def syscall(pid):
    """The helper's current system call and its first argument, as /proc/PID/syscall shows."""
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
    args = [sys.executable, memscan, str(pid), "--context"] + (["--unlocked-only"] if unlocked_only else []) + markers
    run = subprocess.run(args, capture_output=True, text=True)
    return run.returncode, run.stdout.strip()


def main():
    helper, daemon, memscan, action, request = sys.argv[1:6]
    markers = sys.argv[6:]
    daemon = int(daemon)
    with open(request, "rb") as f:
        body = f.read()
    stopped = False
    if action == "store":
        stdin_r, stdin_w = os.pipe()
        child = subprocess.Popen([helper, "store"], stdin=stdin_r, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        os.close(stdin_r)
        # read(2) is system call 0 on x86-64; its first argument the descriptor, 0.
        caught = wait_for(child.pid, lambda s: s == ("0", "0x0"))
        if caught:
            os.kill(daemon, signal.SIGSTOP)
            stopped = True
            os.write(stdin_w, body)
            os.close(stdin_w)
            # Then blocked again, now on its call to the stopped daemon.
            caught = wait_for(child.pid, lambda s: s[0] != "running" and s != ("0", "0x0"))
            time.sleep(0.2)
        else:
            os.close(stdin_w)
    else:
        out_r, out_w = os.pipe()
        fcntl.fcntl(out_w, fcntl.F_SETFL, os.O_NONBLOCK)
        try:
            while True:
                os.write(out_w, b"x" * 4096)
        except BlockingIOError:
            pass
        fcntl.fcntl(out_w, fcntl.F_SETFL, 0)
        child = subprocess.Popen([helper, "get"], stdin=open(request, "rb"), stdout=out_w,
                                 stderr=subprocess.DEVNULL)
        os.close(out_w)
        # write(2) is system call 1; to descriptor 1.
        caught = wait_for(child.pid, lambda s: s == ("1", "0x1"))
    failed = False
    try:
        if not caught:
            print(f"not ok the helper was caught waiting ({action})")
            return 2
        rc, out = scan(memscan, child.pid, markers, unlocked_only=True)
        ok = rc == 0
        failed |= not ok
        print(("ok" if ok else "not ok") + f" {action}: no secret in the helper's unlocked memory" + ("" if ok else f" ({out})"))
        rc, out = scan(memscan, child.pid, markers, unlocked_only=False)
        ok = rc == 1 and all(m.split("=", 1)[0] in out for m in markers)
        failed |= not ok
        print(("ok" if ok else "not ok") + f" {action}: each secret is in its locked memory, where the scan sees it"
              + ("" if ok else f" (memscan exited {rc}: {out})"))
    finally:
        if stopped:
            os.kill(daemon, signal.SIGCONT)
        if action == "get":
            # Drains the pipe so that the helper can finish its answer.
            fd = out_r
            while os.read(fd, 65536):
                pass
            os.close(fd)
        child.wait(timeout=30)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
