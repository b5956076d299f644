"""What a user learns or costs the daemon through its own fastMRI streams,
with a root daemon (socket 0666), a data root owned by root, and two real
uids: an attacker and a victim whose directory is 0700.

The attacker's HDF5 helper runs as the attacker, so the attacker can stop
it (SIGSTOP) while the daemon waits for it inside an OpenStream: the daemon
has resolved the data path and opened the volume, and has the rest of the
call to go. The tests use that pause as a real attacker would:

- sharing's data identity is taken as the caller reaches the data: the
  attacker swaps its data directory for a link into the victim's private
  directory during the pause, for two streams of one spec; were the
  identity a stat(2) by name as the daemon, the two streams would share
  (status shows it) exactly when the guessed name exists;
- indexing stops when its caller has gone: the attacker's client of a
  split of many volumes is killed -9 while the helper is stopped; once the
  preparation's grace has passed and the helper goes on, it answers the
  call it holds, and the daemon asks it nothing more.

Run as root (setuid to uids of no user), with h5py:

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_fastmri_hostile_callers.py
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

pytest.importorskip("numpy")
pytest.importorskip("h5py")

from batchd_daemon import binary, daemon_fixture  # noqa: E402
from helpers import REPO, chown_tree, needs_root, python_as  # noqa: E402
from helpers import wait_until  # noqa: E402

ATTACKER = 47441
VICTIM = 47442
GENERATOR = os.path.join(REPO, "workloads", "fastmri", "make_fastmri.py")
# Volumes of the attacker's large split: hard links to one volume, so
# that indexing them all takes the daemon one helper call each.
MANY = 400

pytestmark = needs_root

# Opens a fastMRI stream; prints "OPENED" or "ERR <message>", then waits
# for stdin to close (the stream stays attached meanwhile).
CLIENT = r'''
import sys
import batchd
server, name, data, split, timeout = sys.argv[1:6]
try:
    loader = batchd.Loader(name, 1, workload="fastmri", data=data,
                           split=split, world_size=1, rank=0, seed=1,
                           slots=2, format="numpy", server=server,
                           connect_timeout=float(timeout))
    print("OPENED", flush=True)
except batchd.Error as e:
    print("ERR", " ".join(str(e).split()), flush=True)
sys.stdin.read()
'''


def client(server, name, data, split="validation", timeout=60):
    return python_as(ATTACKER, CLIENT, server, name, data, split, timeout)


def first_line(proc):
    line = proc.stdout.readline().strip()
    assert line, proc.stderr.read()
    return line


def requests_served(pid):
    """Times the helper's main thread has blocked (it blocks once a request,
    in recvmsg; its watchdog is another thread)."""
    with open(f"/proc/{pid}/task/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


def share_groups(daemon, names):
    out = subprocess.run([binary("batchctl"), "--server", daemon.address,
                          "status", "--json"], capture_output=True,
                         text=True, check=True).stdout
    return {s["spec"]["name"]: s.get("share_group", 0)
            for s in json.loads(out)["streams"] if s["spec"]["name"] in names}


@pytest.fixture(scope="module")
def tree():
    """root (root's, 0755):
    victim/    the victim's, 0700: private/secret (0600)
    attacker/  the attacker's: ds/ (one val volume, contiguous: only
               indexing calls the helper), many/ (MANY train volumes)
    """
    root = tempfile.mkdtemp(prefix="batchd-hostile-", dir="/tmp")
    os.chmod(root, 0o755)
    private = os.path.join(root, "victim", "private")
    os.makedirs(private)
    with open(os.path.join(private, "secret"), "w") as f:
        f.write("the victim's\n")
    os.chmod(os.path.join(private, "secret"), 0o600)
    chown_tree(os.path.join(root, "victim"), VICTIM, dir_mode=0o700)
    attacker = os.path.join(root, "attacker")
    subprocess.run([sys.executable, GENERATOR, os.path.join(attacker, "ds"),
                    "--train", "1", "--val", "1", "--slices", "1", "1",
                    "--chunked-every", "0", "--seed", "5"],
                   check=True, capture_output=True)
    val = os.path.join(attacker, "ds", "knee_singlecoil_val")
    volume = os.path.join(val, os.listdir(val)[0])
    many = os.path.join(attacker, "many", "knee_singlecoil_train")
    os.makedirs(many)
    for i in range(MANY):
        os.link(volume, os.path.join(many, f"file{i:06d}.h5"))
    chown_tree(attacker, ATTACKER)
    yield root
    shutil.rmtree(root)


daemon = daemon_fixture("tree", open_to_all=True)


def attacker_helper(daemon):
    """The attacker's helper, started by a stream of its own."""
    warm = client(daemon.address, "warm-" + uuid.uuid4().hex[:8],
                  "attacker/ds")
    assert first_line(warm) == "OPENED"
    pids = [pid for pid, uid in daemon.hdf5_helpers(live=True).items()
            if uid == ATTACKER]
    assert len(pids) == 1, pids
    return warm, pids[0]


def open_swapped(daemon, helper, tree, guess, name):
    """Opens `name` over attacker/ds while the helper is stopped, and swaps
    attacker/ds for a link to `guess` until the call returns."""
    ds = os.path.join(tree, "attacker", "ds")
    os.kill(helper, signal.SIGSTOP)
    proc = client(daemon.address, name, "attacker/ds")
    try:
        # The daemon resolved the path and opened the volume; it waits
        # for the helper's index with the rest of the call to go.
        wait_until(lambda: requests_pending(helper), 60,
                   "the daemon asks the stopped helper")
        os.rename(ds, ds + ".real")
        os.symlink(os.path.join(tree, guess), ds)
    finally:
        os.kill(helper, signal.SIGCONT)
    line = first_line(proc)
    os.unlink(ds)
    os.rename(ds + ".real", ds)
    assert line == "OPENED", line
    return proc


def requests_pending(helper):
    """Whether a request waits in the helper's socket: the receive queue of
    its one socket, as ss(8) reads it from the kernel (a stopped helper
    reads nothing)."""
    out = subprocess.run(["ss", "-x", "-p", "-H"], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        # Netid State Recv-Q Send-Q ... users:(("batchd-hdf5",pid=N,fd=3))
        if f"pid={helper}," in line and fields[2].isdigit():
            if int(fields[2]) > 0:
                return True
    return False


def test_share_identity_is_taken_as_the_caller(daemon, tree):
    warm, helper = attacker_helper(daemon)
    procs = [warm]
    try:
        # Two plain streams of one spec share: the check below would see
        # a shared identity.
        plain = ["plain-" + uuid.uuid4().hex[:8] for _ in range(2)]
        for name in plain:
            procs.append(client(daemon.address, name, "attacker/ds"))
            assert first_line(procs[-1]) == "OPENED"
        groups = share_groups(daemon, plain)
        assert len(set(groups.values())) == 1 and 0 not in groups.values(), \
            groups
        # Swapped during the pause: for a name that exists in the victim's
        # private directory and for one that does not, the two streams of
        # one spec share alike (not at all: the caller reaches neither).
        answers = {}
        for guess in ("victim/private/secret", "victim/private/absent"):
            names = [f"swap-{i}-" + uuid.uuid4().hex[:8] for i in range(2)]
            for name in names:
                procs.append(open_swapped(daemon, helper, tree, guess, name))
            groups = share_groups(daemon, names)
            assert len(groups) == 2, groups
            answers[guess] = len(set(groups.values()))
        assert answers == {"victim/private/secret": 2,
                           "victim/private/absent": 2}, answers
    finally:
        for p in procs:
            p.kill()
            p.communicate()


def test_indexing_stops_when_its_caller_has_gone(daemon, tree):
    warm, helper = attacker_helper(daemon)
    try:
        os.kill(helper, signal.SIGSTOP)
        try:
            name = "many-" + uuid.uuid4().hex[:8]
            gone = client(daemon.address, name, "attacker/many",
                          split="train")
            wait_until(lambda: requests_pending(helper), 60,
                       "the daemon asks the stopped helper")
            preps = [p for p in daemon.status().get("preparations", [])
                     if p["stream"] == name]
            assert len(preps) == 1, preps
            # The caller goes while the daemon waits for the helper; its
            # preparation is wanted for its grace after that, no longer.
            gone.kill()
            gone.communicate()
            killed = time.monotonic()
            grace = float(preps[0]["grace_seconds"])
            wait_until(lambda: time.monotonic() - killed > grace + 1,
                       grace + 30, "the preparation's grace")
            before = requests_served(helper)
        finally:
            os.kill(helper, signal.SIGCONT)
        # The helper answers what it holds; the daemon's loop over the
        # volumes stops at the next one (MANY calls were it to go on).
        stable = []

        def settled():
            stable.append(requests_served(helper))
            del stable[:-150]  # the last 3 s of samples
            return len(stable) == 150 and stable[0] == stable[-1]
        wait_until(settled, 120, "the helper served its last request")
        assert stable[-1] - before < 10, (before, stable[-1])
    finally:
        warm.kill()
        warm.communicate()
