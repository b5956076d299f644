"""Starts W local ranks of a trainer the way torchrun does (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT in each process's environment) and
waits for them; if one fails, the others are stopped and its exit code is
returned. Debian 12's torch 1.13 ships a torchrun that fails on Python 3.11
(`'NoneType' object has no attribute 'get'` in its argument handling), so
the demo and the tests use this instead.

    /usr/bin/python3 examples/launch.py --nproc 2 -- trainer.py ARGS
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2, help="ranks to start")
    p.add_argument("cmd", nargs=argparse.REMAINDER,
                   help="-- SCRIPT [ARGS]: the trainer, run by this Python")
    args = p.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("name the trainer script after --")
    port = str(free_port())
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(args.nproc), LOCAL_WORLD_SIZE=str(args.nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        procs.append(subprocess.Popen([sys.executable] + cmd, env=env))
    code = 0
    while procs:
        for pr in list(procs):
            rc = pr.poll()
            if rc is None:
                continue
            procs.remove(pr)
            if rc != 0 and code == 0:
                code = rc
                for other in procs:
                    other.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    sys.exit(code)


if __name__ == "__main__":
    main()
