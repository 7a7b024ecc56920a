"""System calls in sequence, for test_posix.sh, in the manner of pjdfstest's fstest: each
operation prints its result, or the errno's name when it fails, and the results of a run are
printed on one line, separated by spaces. Operations are separated by ":".

    python3 posix_ops.py open F O_RDWR : unlink F : fstat 0 nlink : close 0
    0 0 0 0

Descriptors are numbered 0, 1, ... in the order they were opened. Operations:

    open PATH FLAG[,FLAG...] [MODE]   -> descriptor number
    close FD | unlink PATH | rmdir PATH | mkdir PATH [MODE] | rename FROM TO   -> 0
    write FD TEXT                      -> bytes written
    pread FD COUNT OFFSET              -> the text read ("" prints as '')
    ftruncate FD SIZE | truncate PATH SIZE | fsync FD   -> 0
    lseek FD OFFSET SEEK_SET|SEEK_CUR|SEEK_END|SEEK_DATA|SEEK_HOLE   -> the new offset
    fstat FD FIELD | stat PATH FIELD   -> FIELD: size, nlink, type (reg/dir), mtime_ns, ctime_ns
    sleep SECONDS                      -> 0
    now                                -> the time, in ns since the epoch
"""
import errno
import os
import stat as st
import sys
import time

fds = []


def field(s, name):
    if name == "type":
        return "dir" if st.S_ISDIR(s.st_mode) else "reg" if st.S_ISREG(s.st_mode) else oct(s.st_mode)
    return getattr(s, "st_" + name)


def flags(text):
    value = 0
    for name in text.split(","):
        value |= getattr(os, name)
    return value


def run(op, args):
    if op == "open":
        fds.append(os.open(args[0], flags(args[1]), int(args[2], 8) if len(args) > 2 else 0o600))
        return len(fds) - 1
    if op == "close":
        os.close(fds[int(args[0])])
        return 0
    if op == "unlink":
        os.unlink(args[0])
        return 0
    if op == "rmdir":
        os.rmdir(args[0])
        return 0
    if op == "mkdir":
        os.mkdir(args[0], int(args[1], 8) if len(args) > 1 else 0o700)
        return 0
    if op == "rename":
        os.rename(args[0], args[1])
        return 0
    if op == "write":
        return os.write(fds[int(args[0])], args[1].encode())
    if op == "pread":
        text = os.pread(fds[int(args[0])], int(args[1]), int(args[2])).decode(errors="replace")
        return text if text else "''"
    if op == "ftruncate":
        os.ftruncate(fds[int(args[0])], int(args[1]))
        return 0
    if op == "truncate":
        os.truncate(args[0], int(args[1]))
        return 0
    if op == "fsync":
        os.fsync(fds[int(args[0])])
        return 0
    if op == "lseek":
        return os.lseek(fds[int(args[0])], int(args[1]), getattr(os, args[2]))
    if op == "fstat":
        return field(os.fstat(fds[int(args[0])]), args[1])
    if op == "stat":
        return field(os.stat(args[0]), args[1])
    if op == "sleep":
        time.sleep(float(args[0]))
        return 0
    if op == "now":
        return time.time_ns()
    raise SystemExit("posix_ops.py: unknown operation " + op)


def main(argv):
    ops, current = [], []
    for word in argv:
        if word == ":":
            ops.append(current)
            current = []
        else:
            current.append(word)
    ops.append(current)
    results = []
    for op in ops:
        try:
            results.append(str(run(op[0], op[1:])))
        except OSError as e:
            results.append(errno.errorcode.get(e.errno, str(e.errno)))
    print(" ".join(results))


if __name__ == "__main__":
    main(sys.argv[1:])
