"""CPU a batchd daemon spends on rings that are full and idle: N ranks of
one synthetic stream, each attached by a client that never reads, so every
ring stays full. Prints the daemon's CPU (user + system) over a window, as
a share of one core.

    PYTHONPATH=<build>/python /usr/bin/python3 bench/idle_rings.py \\
        --batchd <build>/server/batchd --ranks 2000 --seconds 10

Run it with an older batchd binary for the figure before a change.
"""

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import batchd

from procstat import cpu_seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batchd", required=True)
    p.add_argument("--ranks", type=int, default=2000)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    d = tempfile.mkdtemp(prefix="batchd-idle-", dir="/tmp")
    sock = f"{d}/sock"
    prefix = f"bdidle{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [a.batchd, "--listen", f"unix://{sock}", "--data-root", d,
         "--shm-prefix", prefix, "--threads", str(a.threads)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(sock)
                    break
                except OSError:
                    time.sleep(0.05)
        loaders = [batchd.Loader("idle", a.ranks, world_size=a.ranks,
                                 rank=r, slots=2, server=f"unix://{sock}",
                                 options={"examples": str(4 * a.ranks),
                                          "payload_bytes": "64"})
                   for r in range(a.ranks)]
        time.sleep(3)  # every ring fills
        before, t0 = cpu_seconds([proc.pid], reaped=False), time.monotonic()
        time.sleep(a.seconds)
        used = cpu_seconds([proc.pid], reaped=False) - before
        span = time.monotonic() - t0
        print(f"{a.ranks} idle full rings: daemon CPU {used:.2f} s in "
              f"{span:.1f} s = {100 * used / span:.1f} % of a core")
        del loaders
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
