"""What a client writes in its own ring cannot keep the ring, its quota or a
drain for ever, nor make status show what cannot be (issue 27, weak
points), with real daemons, real uids and clients killed with -9:

- a client that writes pid 1 (with pid 1's start time) and a heartbeat an
  hour ahead into its ring, then dies, loses its ring: the daemon trusts
  the process the kernel named when it asked for the ring (SO_PEERCRED),
  and then `batchctl drain` finishes;
- over TCP (no such process) a heartbeat from the future is stale;
- a drain with a client still attached ends at --drain-timeout-seconds;
- a released counter beyond what was published shows as a fill of at
  most the ring's slots, flagged in status and counted in /metrics.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_forged_liveness.py
"""

import glob
import mmap
import os
import signal
import socket
import struct
import subprocess
import time
import uuid

import pytest

pytest.importorskip("numpy")

import batchd  # noqa: E402
from batchd_daemon import Server, binary, free_port, metrics  # noqa: E402
from helpers import become, needs_root, python_as, wait_until  # noqa: E402

NOBODY = 65534
CLIENT_PID, CLIENT_START, CLIENT_HEARTBEAT = 256, 264, 272
WRITE_POS, RELEASED = 64, 192

pytestmark = needs_root


CLIENT = r"""
import sys, batchd
loader = batchd.Loader("held", 4, world_size=1, rank=0, slots=4,
                       format="numpy", server=sys.argv[1],
                       options={"examples": "100000", "payload_bytes": "64"},
                       connect_timeout=20.0, timeout=20.0, reconnect=0)
next(loader)
print(loader.info.segment, flush=True)
sys.stdin.readline()
"""


def start_client(address, user=None):
    p = python_as(user, CLIENT, address)
    segment = p.stdout.readline().strip()
    assert segment, p.stderr.read()
    return p, "/dev/shm" + segment


def pid1_start_ticks():
    with open("/proc/1/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def forge_liveness(segment):
    """Writes, as the client could: pid 1 with its start time, and a
    heartbeat an hour ahead."""
    fd = os.open(segment, os.O_RDWR)
    try:
        m = mmap.mmap(fd, 4096)
        struct.pack_into("<I", m, CLIENT_PID, 1)
        struct.pack_into("<Q", m, CLIENT_START, pid1_start_ticks())
        struct.pack_into("<Q", m, CLIENT_HEARTBEAT,
                         time.monotonic_ns() + 3600 * 10**9)
        m.close()
    finally:
        os.close(fd)


def forked_as(user, work):
    """Runs work() in a child forked from this process that has become
    `user` (None: stays root); it must return."""
    pid = os.fork()
    if pid == 0:
        try:
            if user is not None:
                become(user)
            work()
            os._exit(0)
        except BaseException:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0


def forged_then_killed(client, segment, user):
    """The client stops (its heartbeat thread too), its ring is forged by
    a process of the same uid, and the client dies by kill -9."""
    client.send_signal(signal.SIGSTOP)
    forked_as(user, lambda: forge_liveness(segment))
    client.kill()
    client.wait()


def batchctl(address, *args, timeout=120):
    return subprocess.run([binary("batchctl"), *args, "--server", address],
                          capture_output=True, text=True, timeout=timeout)


def test_a_dead_client_that_forged_pid_1_loses_its_ring_and_drain_ends(
        tmp_path):
    # --shm-group: how nobody mapped root's rings before rings had ACLs.
    # A stale heartbeat alone would take an hour here.
    d = Server(tmp_path, open_to_all=True,
               args=("--shm-group", str(NOBODY),
                     "--client-stale-seconds", "3600"))
    try:
        client, segment = start_client(d.address, user=NOBODY)
        forged_then_killed(client, segment, NOBODY)
        # The process the kernel named is gone: so is its ring.
        wait_until(lambda: not os.path.exists(segment), 30,
                   "the dead client's ring is freed")
        (stream,) = d.status()["streams"]
        assert not any(r.get("attached") for r in stream["ranks"])
        r = batchctl(d.address, "drain", "--wait", "60")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert d.proc.wait(timeout=30) == 0
    finally:
        d.stop()


def test_a_tcp_clients_heartbeat_from_the_future_is_stale(tmp_path):
    port = free_port()
    prefix = f"batchdlive{uuid.uuid4().hex[:12]}"
    log = open(tmp_path / "batchd.log", "w")
    daemon = subprocess.Popen(
        [binary("batchd"), "--listen", f"tcp://127.0.0.1:{port}",
         "--data-root", str(tmp_path), "--shm-prefix", prefix,
         "--threads", "1", "--cache-dir", "",
         "--client-stale-seconds", "3600"],
        stdout=log, stderr=subprocess.STDOUT)

    def accepts():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(lambda: accepts() or daemon.poll() is not None, 30,
                   "batchd accepts")
        assert daemon.poll() is None, open(tmp_path / "batchd.log").read()
        client, segment = start_client(f"tcp://127.0.0.1:{port}")
        forged_then_killed(client, segment, None)
        # No process to ask over TCP: an hour-old heartbeat would be
        # needed, but one an hour ahead is forged, hence stale now.
        wait_until(lambda: not os.path.exists(segment), 30,
                   "the ring of a heartbeat from the future is freed")
    finally:
        daemon.kill()
        daemon.wait()
        for path in glob.glob(f"/dev/shm/{prefix}.*"):
            os.unlink(path)


def test_a_drain_ends_at_its_deadline_with_a_client_attached(tmp_path):
    d = Server(tmp_path, args=("--drain-timeout-seconds", "2"))
    try:
        client, segment = start_client(d.address)
        r = batchctl(d.address, "drain", "--wait", "60")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert d.proc.wait(timeout=30) == 0
        log = open(d.log_path).read()
        assert "drain_deadline" in log and "attached_ranks=1" in log, log
        client.kill()
        client.wait()
    finally:
        d.stop()


def test_an_impossible_released_counter_is_clamped_and_flagged(tmp_path):
    port = free_port()
    d = Server(tmp_path, open_to_all=True,
               args=("--shm-group", str(NOBODY),
                     "--metrics-listen", f"127.0.0.1:{port}"))
    try:
        client, segment = start_client(d.address, user=NOBODY)

        def overrelease():
            # As the client could: released far beyond what was published.
            fd = os.open(segment, os.O_RDWR)
            m = mmap.mmap(fd, 4096)
            published = struct.unpack_from("<Q", m, WRITE_POS)[0]
            struct.pack_into("<Q", m, RELEASED, published + 5)

        forked_as(NOBODY, overrelease)
        (stream,) = d.status()["streams"]
        (rank,) = stream["ranks"]
        assert rank.get("ring_fill", 0) <= rank["ring_slots"] == 4, rank
        assert rank["consumed_step"] <= rank["produced_step"], rank
        assert rank["client_counters_invalid"] is True, rank
        text = batchctl(d.address, "status").stdout
        assert "impossible counters" in text, text
        m = metrics(port)
        assert m["batchd_client_counters_invalid_total"] == 1, m
        fills = [v for k, v in m.items() if k.startswith("batchd_ring_fill")]
        assert fills and max(fills) <= 4, fills
        # Counted once per ring, however often it is looked at.
        d.status()
        assert metrics(port)["batchd_client_counters_invalid_total"] == 1
        client.kill()
        client.wait()
    finally:
        d.stop()
