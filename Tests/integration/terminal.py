#!/usr/bin/env python3
"""Runs a command on a new pseudo-terminal, as a person at a terminal would.

    terminal.py [EXPECT SEND]... -- COMMAND [ARG]...

For each pair, waits until EXPECT has appeared in the terminal's output (after the previous
one), then types SEND and Enter. Then reads to the end and prints everything the terminal
showed. Exits with the command's exit status; 124 if an EXPECT did not appear within 20 s
(the output so far is printed, with the EXPECT that was missing).
"""
import os
import pty
import select
import sys
import time


def main():
    args = sys.argv[1:]
    if "--" not in args:
        sys.exit("usage: terminal.py [EXPECT SEND]... -- COMMAND [ARG]...")
    split = args.index("--")
    pairs, command = args[:split], args[split + 1:]
    if len(pairs) % 2:
        sys.exit("terminal.py: EXPECT without SEND")
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    seen = b""
    position = 0

    def read_some(timeout):
        nonlocal seen
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return False
        if not chunk:
            return False
        seen += chunk
        return True

    for i in range(0, len(pairs), 2):
        expect, send = pairs[i].encode(), pairs[i + 1].encode()
        deadline = time.monotonic() + 20
        while seen.find(expect, position) < 0:
            if time.monotonic() > deadline or not read_some(0.2):
                sys.stdout.write(seen.decode(errors="replace"))
                sys.stdout.write("\n[terminal.py: never saw %r]\n" % pairs[i])
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                sys.exit(124)
        position = seen.find(expect, position) + len(expect)
        os.write(fd, send + b"\r")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and read_some(0.5):
        pass
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(seen.decode(errors="replace"))
    sys.exit(os.waitstatus_to_exitcode(status))


main()
