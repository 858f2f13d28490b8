#!/usr/bin/env python3
"""Stop some threads of a process, and only those: threadstop.py PID NAME...

Every thread of PID whose name (/proc/PID/task/TID/comm) is one of NAME is
stopped with ptrace (PTRACE_SEIZE, then PTRACE_INTERRUPT: no signal, so the
process's other threads run on), until this program gets SIGTERM or SIGINT
or dies; then the kernel lets them go. Prints "stopped TID NAME" for each,
then "ready", and exits 1 if it stopped none.

The Group Replication tests use it to cut a member off from its group
(tests/helpers/group.bash, gr_cut): its group communication threads
stopped, it neither sends nor answers the others, while its server goes on
answering SQL, as a member on the far side of a broken link does. A
SIGSTOP would freeze the whole server instead. Needs root (CAP_SYS_PTRACE).
"""

import ctypes
import os
import signal
import sys

PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_DETACH = 17

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long


def ptrace(req, tid):
    if libc.ptrace(req, tid, None, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"ptrace({req:#x}, {tid}): {os.strerror(err)}")


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: threadstop.py PID NAME...")
    pid, names = int(sys.argv[1]), set(sys.argv[2:])
    stopped = []
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name not in names:
            continue
        ptrace(PTRACE_SEIZE, tid)
        ptrace(PTRACE_INTERRUPT, tid)
        os.waitpid(tid, os.__WALL if hasattr(os, "__WALL") else 0x40000000)
        stopped.append(tid)
        print(f"stopped {tid} {name}", flush=True)
    if not stopped:
        sys.exit(f"threadstop.py: no thread of {pid} is named {' or '.join(sorted(names))}")
    print("ready", flush=True)

    def release(_sig, _frame):
        for tid in stopped:
            try:
                ptrace(PTRACE_DETACH, tid)
            except OSError:
                pass  # gone with its process
        sys.exit(0)

    signal.signal(signal.SIGTERM, release)
    signal.signal(signal.SIGINT, release)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
