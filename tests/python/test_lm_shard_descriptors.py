"""A folder of shards another user placed cannot take the daemon's file
descriptors, with a real daemon and two real uids.

finewebedu_lm keeps every shard of a split open while its stream lives,
and the daemon's descriptors serve every user's rings, data files and
connections. A folder of 20,000 empty files named as shards took the
daemon to its limit at each OpenStream (EMFILE), and valid shards (a split
may hold 2^20 record batches) stayed open for the stream's life. Now a
split of more than 1,024 shards is refused from its listing, before any is
opened: the attacker's stream fails naming the folder, the daemon holds no
more descriptors than before, and another uid's running stream and its new
OpenStream get their batches.

Run as root (setuid to uids of no user):

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_lm_shard_descriptors.py
"""

import os
import resource
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("numpy")

from batchd_daemon import Daemon  # noqa: E402
from helpers import REPO, chown_tree, last_line, needs_root  # noqa: E402
from helpers import python_as  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "workloads", "finewebedu_lm"))
import arrow_ipc  # noqa: E402

# Uids of no user on the test machine.
ATTACKER = 47461
VICTIM = 47462
ROW = 2049
SHARDS = 2000  # valid shards of one row each: 16 MB
LIMIT = 8192  # the daemon's RLIMIT_NOFILE: room for every shard

pytestmark = needs_root

# Opens a finewebedu_lm train stream of batches of 4 and checks that each
# row is a window of the token stream 0, 1, 2, ...: prints "OK <batches>"
# or "ERR <message>". With "wait", it prints "ready" after its first batch
# and reads the rest once a line arrives on stdin.
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
        inputs = next(loader)["inputs"]
        for row in range(len(inputs)):
            first = int(inputs[row][0])
            assert first % 1025 == 0, first
            assert (inputs[row] == first + np.arange(1024)).all()
    loader.close()
    print("OK", batches, flush=True)
except batchd.Error as e:
    print("ERR", " ".join(str(e).split()), flush=True)
'''


def write_shards(train, rows):
    """train/data-XXXXX-of-NNNNN.arrow, one row a shard."""
    os.makedirs(train)
    for i, row in enumerate(rows):
        name = f"data-{i:05d}-of-{len(rows):05d}.arrow"
        with open(os.path.join(train, name), "wb") as f:
            f.write(arrow_ipc.token_stream([[row]]))


@pytest.fixture(scope="module")
def tree():
    """A root-owned data root with attacker/many (SHARDS valid shards) and
    the victim's 0700 victim/lm (16 rows in 16 shards)."""
    root = tempfile.mkdtemp(prefix="batchd-lm-fds-", dir="/tmp")
    os.chmod(root, 0o755)
    rows = [list(range(i * ROW, (i + 1) * ROW)) for i in range(SHARDS)]
    write_shards(os.path.join(root, "attacker", "many", "train"), rows)
    chown_tree(os.path.join(root, "attacker"), ATTACKER, dir_mode=0o755)
    write_shards(os.path.join(root, "victim", "lm", "train"), rows[:16])
    chown_tree(os.path.join(root, "victim"), VICTIM, dir_mode=0o700)
    yield root
    subprocess.run(["rm", "-rf", root], check=True)


def client(uid, server, data, batches, wait=False):
    return python_as(uid, CLIENT, server, data, batches,
                     "wait" if wait else "go")


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
            got = last_line(attack, timeout=120)
        attack.wait(timeout=120)
        assert held < 64, f"the attacker's stream holds {held} descriptors"
        assert got.startswith("ERR"), got
        assert "more than 1024 shards in" in got, got
        assert "attacker/many/train" in got, got
        running.stdin.write("go\n")
        running.stdin.flush()
        assert last_line(running, timeout=120) == "OK 6"
        assert last_line(client(VICTIM, d.address, "victim/lm", 3),
                         timeout=120) == "OK 3"
        d.proc.terminate()
        assert d.proc.wait(timeout=60) == 0
    finally:
        d.stop()
