"""The hand-off the per-program access tests attack with (test_access_socket, test_access_dbus):
a process that holds a connection forks, and the parent execs /usr/bin/head, a listed
program, which waits on a pipe; the child keeps the connection. `exec_head_in_parent()`
returns in the child once the parent runs head, with the pipe's write end: closing it
lets head end. Run with PYTHONPATH set to this directory."""
import os
import time


def exec_head_in_parent():
    r, w = os.pipe()
    parent = os.getpid()
    if os.fork() != 0:
        os.dup2(r, 0)
        os.execv("/usr/bin/head", ["head", "-c", "1"])
    os.close(r)
    for _ in range(500):
        if os.readlink("/proc/%d/exe" % parent) == "/usr/bin/head":
            break
        time.sleep(0.01)
    print("exec'd", flush=True)
    return w
