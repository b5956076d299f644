"""Arrow shards another user placed cannot stall or swell the daemon
(issue 35, breaks L1 and L2), with a real daemon and two real uids:

- a 3 KB shard whose schema is a DAG (a struct's children name one child
  table twice, 60 levels: 2^60 fields walked as a tree) is refused at once,
  naming the file;
- sparse 2 GiB shards (8 bytes on disk) whose first message claims 2 GiB of
  metadata are refused from the claim, two OpenStreams at once;
- a folder of 2,000 valid shards (each would stay open, a descriptor, while
  its stream lives: the daemon's descriptors serve every user) is refused
  from its listing, before any is opened, and the daemon holds no more
  descriptors than before;

and afterwards the daemon's peak RSS has not grown by what was claimed, its
threads are back to idle, another uid's running stream and its new
OpenStream get their batches (every window the tokens it must be), and
SIGTERM stops the daemon cleanly. Shards are written by
workloads/finewebedu_lm/arrow_ipc.py.

Run as root (setuid to uids of no user):

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_lm_hostile_shards.py
"""

import os
import resource
import subprocess
import sys
import tempfile
import time

import pytest

pytest.importorskip("numpy")

from batchd_daemon import Daemon  # noqa: E402
from helpers import (REPO, chown_tree, cpu_seconds, daemon_threads,  # noqa: E402
                     last_line, needs_root, python_as, status_bytes,
                     wait_until)

sys.path.insert(0, os.path.join(REPO, "workloads", "finewebedu_lm"))
import arrow_ipc  # noqa: E402

# Uids of no user on the test machine.
ATTACKER = 47431
VICTIM = 47432
ROW = 2049
CLAIM = 0x7FFFFFF8  # 2 GiB of metadata, claimed
MANY = 2000  # valid shards of one row each: 16 MB
LIMIT = 8192  # the daemon's RLIMIT_NOFILE: room for every shard

pytestmark = needs_root

# Opens a finewebedu_lm train stream and checks that each row of a batch
# is a window of the token stream 0, 1, 2, ...: prints "OK <batches>" or
# "ERR <message>". With "wait", it prints "ready" after its first batch and
# reads the rest once a line arrives on stdin.
CLIENT = r'''
import sys
import uuid
import numpy as np
import batchd
server, data, batches, wait = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    sys.argv[4] == "wait"
try:
    loader = batchd.Loader(uuid.uuid4().hex[:16], 4,
                           workload="finewebedu_lm", data=data,
                           split="train", world_size=1, rank=0, seed=1,
                           slots=2, format="numpy", server=server,
                           connect_timeout=30.0, timeout=60.0)
    for i in range(batches):
        if wait and i == 1:
            print("ready", flush=True)
            sys.stdin.readline()
        b = next(loader)
        inputs, targets = b["inputs"], b["targets"]
        for row in range(len(inputs)):
            first = int(inputs[row][0])
            assert first % 1025 == 0, first
            assert (inputs[row] == first + np.arange(1024)).all()
            assert (targets[row] == first + 1 + np.arange(1024)).all()
    loader.close()
    print("OK", batches, flush=True)
except batchd.Error as e:
    print("ERR", " ".join(str(e).split()), flush=True)
'''


def write_shards(folder, shards):
    """folder/train/data-XXXXX-of-NNNNN.arrow, one per entry of `shards`:
    bytes, or (bytes, apparent size) for a sparse file."""
    train = os.path.join(folder, "train")
    os.makedirs(train)
    for i, shard in enumerate(shards):
        data, size = shard if isinstance(shard, tuple) else (shard, None)
        path = os.path.join(train, f"data-{i:05d}-of-{len(shards):05d}.arrow")
        with open(path, "wb") as f:
            f.write(data)
            if size is not None:
                f.truncate(size)


@pytest.fixture(scope="module")
def tree():
    """A root-owned data root with attacker/ (its hostile shards, and
    attacker/many: MANY valid ones) and the victim's 0700 victim/lm (two
    shards of 16 rows, tokens 0, 1, 2, ...)."""
    root = tempfile.mkdtemp(prefix="batchd-lm-hostile-", dir="/tmp")
    os.chmod(root, 0o755)
    attacker = os.path.join(root, "attacker")
    write_shards(os.path.join(attacker, "dag"),
                 [arrow_ipc.dag_schema_stream(60)])
    sparse = (arrow_ipc.claimed_metadata_prefix(CLAIM), CLAIM + 8)
    write_shards(os.path.join(attacker, "claimed"), [sparse, sparse])
    write_shards(os.path.join(attacker, "many"),
                 [arrow_ipc.token_stream([[list(range(i, i + ROW))]])
                  for i in range(MANY)])
    chown_tree(attacker, ATTACKER, dir_mode=0o755)
    tokens = list(range(16 * ROW))
    rows = [tokens[i:i + ROW] for i in range(0, len(tokens), ROW)]
    victim = os.path.join(root, "victim")
    write_shards(os.path.join(victim, "lm"),
                 [arrow_ipc.token_stream([rows[0:4], rows[4:8]]),
                  arrow_ipc.token_stream([rows[8:12], rows[12:16]])])
    chown_tree(victim, VICTIM, dir_mode=0o700)
    yield root
    subprocess.run(["rm", "-rf", root], check=True)


def client(uid, server, data, batches, wait=False):
    return python_as(uid, CLIENT, server, data, batches,
                     "wait" if wait else "go")


def answer(proc):
    """The client's last line: what it printed when done (a daemon that
    spins on a shard never answers)."""
    return last_line(proc, timeout=120)


def idle(pid):
    """Whether the process used next to no CPU over half a second (a thread
    still walking a shard uses all of it)."""
    before = cpu_seconds(pid)
    time.sleep(0.5)
    return cpu_seconds(pid) - before < 0.1


def test_hostile_shards_are_refused_and_leave_the_daemon_as_it_was(
        tree, tmp_path):
    # Read-ahead within 16 MiB: the victim's stream would otherwise fill
    # the default 256 MiB with its windows while the attacks run, and the
    # peak RSS would measure that.
    d = Daemon(tree, tmp_path / "batchd.log", open_to_all=True,
               args=("--index-threads", "2",
                     "--readahead-bytes", str(16 << 20)))
    try:
        pid = d.proc.pid
        # The victim's stream runs through the attacks.
        running = client(VICTIM, d.address, "victim/lm", 6, wait=True)
        assert running.stdout.readline().strip() == "ready", \
            running.stderr.read()
        idle_threads = daemon_threads(pid)
        hwm = status_bytes(pid, "VmHWM")

        dag = answer(client(ATTACKER, d.address, "attacker/dag", 1))
        assert dag.startswith("ERR"), dag
        assert "attacker/dag/train/data-00000-of-00001.arrow" in dag, dag
        assert "reached twice (a schema is a tree)" in dag, dag

        # Two at once, each of two shards: the old reader allocated and
        # read 2 GiB for each shard it indexed.
        claimed = [client(ATTACKER, d.address, "attacker/claimed", 1)
                   for _ in range(2)]
        for c in claimed:
            got = answer(c)
            assert got.startswith("ERR"), got
            assert "attacker/claimed/train/data-0000" in got, got
            assert (f"metadata of {CLAIM} bytes, over the limit of "
                    f"{1 << 20}") in got, got

        grown = status_bytes(pid, "VmHWM") - hwm
        assert grown < 256 << 20, f"peak RSS grew by {grown >> 20} MiB"
        # One more of the daemon's own may have started since the count
        # (those it starts in the background at start-up).
        wait_until(lambda: daemon_threads(pid) <= idle_threads + 1, 60,
                   f"the daemon's threads back to {idle_threads}")
        wait_until(lambda: idle(pid), 60, "the daemon's threads idle")
        # The victim's running stream goes on, and its new one opens.
        running.stdin.write("go\n")
        running.stdin.flush()
        assert answer(running) == "OK 6"
        assert answer(client(VICTIM, d.address, "victim/lm", 3)) == "OK 3"
        # The attacker cannot read the victim's 0700 tree at all.
        assert answer(client(ATTACKER, d.address, "victim/lm", 1)) \
            .startswith("ERR")
        # Nothing keeps a thread busy: SIGTERM stops it cleanly.
        d.proc.terminate()
        assert d.proc.wait(timeout=60) == 0
    finally:
        d.stop()


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_folder_of_many_shards_takes_no_descriptors(tree, tmp_path):
    d = Daemon(tree, tmp_path / "batchd.log", open_to_all=True,
               preexec=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                  (LIMIT, LIMIT)))
    try:
        pid = d.proc.pid
        running = client(VICTIM, d.address, "victim/lm", 6, wait=True)
        assert running.stdout.readline().strip() == "ready", \
            running.stderr.read()
        before = descriptors(pid)
        # The attacker's stream waits after its first batch, holding what
        # it opened, had it opened.
        attack = client(ATTACKER, d.address, "attacker/many", 3, wait=True)
        got = attack.stdout.readline().strip()
        held = descriptors(pid) - before
        if got == "ready":
            attack.stdin.write("go\n")
            attack.stdin.flush()
            got = answer(attack)
        attack.wait(timeout=120)
        assert held < 64, f"the attacker's stream holds {held} descriptors"
        assert got.startswith("ERR"), got
        assert "more than 1024 shards in" in got, got
        assert "attacker/many/train" in got, got
        running.stdin.write("go\n")
        running.stdin.flush()
        assert answer(running) == "OK 6"
        assert answer(client(VICTIM, d.address, "victim/lm", 3)) == "OK 3"
        d.proc.terminate()
        assert d.proc.wait(timeout=60) == 0
    finally:
        d.stop()
