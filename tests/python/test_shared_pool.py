"""One uid's indexing takes at most its share, and stops when its caller
goes (issue 35, break C1), with a real daemon and two real uids. The
attacker's data is a sparse giant (`truncate -s 2T`) of the workload whose
test data can make one (giant() in workloads/<name>/test_data.py: a data
file its OpenStream indexes whole):

- a giant of 2 TiB is refused at OpenStream by its size, naming the file,
  its size, the limit and --max-data-file-bytes, at the cost of an fstat;
  another uid's OpenStream is answered meanwhile;
- a giant under a raised limit, which the attacker's OpenStream indexes on
  the shared pool, does not keep another uid's WMT OpenStream from being
  answered and served; once the attacker's client is killed mid-call, the
  daemon's threads go back to idle (their CPU stops growing) and no stream
  of the attacker's is left.

Run as root (setuid to uids of no user):

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_shared_pool.py
"""

import os
import shutil
import tempfile
import time

import pytest

pytest.importorskip("numpy")

from batchd_daemon import Daemon  # noqa: E402
from helpers import chown_tree, last_line, needs_root, python_as  # noqa: E402
from helpers import require_python_as, wait_until  # noqa: E402
from helpers import workload_test_data  # noqa: E402

# Uids of no user on the test machine.
ATTACKER = 47431
VICTIM = 47432

pytestmark = needs_root

TIB = 1 << 40
# The workload whose test data makes a giant, and that test data.
GIANT, GIANT_DATA = next((name, data)
                         for name, data in workload_test_data().items()
                         if hasattr(data, "giant"))
DEFAULT_LIMIT = 256 << 30  # --max-data-file-bytes' default
HZ = os.sysconf("SC_CLK_TCK")

# Opens one stream and reads two batches; prints "OK" or "ERR <message>".
OPEN = r'''
import sys
import batchd
server, workload, data, split, name = sys.argv[1:6]
try:
    loader = batchd.Loader(name, 4, workload=workload, data=data,
                           split=split, world_size=1, rank=0, seed=1,
                           slots=2, format="numpy", server=server,
                           connect_timeout=float(sys.argv[6]), timeout=60.0,
                           options={"index_threads": 1} if workload == "wmt"
                           else {})
    next(loader)
    next(loader)
    print("OK")
except batchd.Error as e:
    print("ERR", " ".join(str(e).split()))
'''


def open_as(uid, server, workload, data, split, name, connect_timeout=90.0):
    """("OK", "") or ("ERR", the error) of a stream `uid` opens and reads
    (its OpenStream bounded by `connect_timeout`: generous, since a stream
    starved of the pool would wait for the attacker's hours of counting)."""
    proc = python_as(uid, OPEN, server, workload, data, split, name,
                     connect_timeout)
    word, _, rest = last_line(proc, timeout=180).partition(" ")
    return word, rest


def cpu_ticks(pid):
    """utime + stime of every thread of `pid`, in clock ticks."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended
        total += int(fields[11]) + int(fields[12])
    return total


def settles(pid, seconds):
    """True once the process spends under a tenth of a core over a whole
    second (its threads idle), within `seconds`; the samples are a rate's,
    not a wait for something to happen."""
    deadline = time.monotonic() + seconds
    since, base = time.monotonic(), cpu_ticks(pid)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now, ticks = time.monotonic(), cpu_ticks(pid)
        if now - since >= 1.0:
            if ticks - base <= 0.1 * HZ * (now - since):
                return True
            since, base = now, ticks
    return False


@pytest.fixture(scope="module")
def tree(shared_data):
    """A data root (root's, 0755) with
    att/     the attacker's, 0755: giant/ a set of GIANT with a sparse 2 TiB
             file, big/ one with a sparse 4 TiB file
    vic/     the victim's, 0700: wmt/ (its own copy)
    Its `giant` attribute: (the file, relative to a set, and the split that
    indexes it)."""
    require_python_as(ATTACKER)
    require_python_as(VICTIM)
    root = tempfile.mkdtemp(prefix="batchd-pool-", dir="/tmp")
    os.chmod(root, 0o755)
    att = os.path.join(root, "att")
    for sub, size in (("giant", 2 * TIB), ("big", 4 * TIB)):
        giant = GIANT_DATA.giant(os.path.join(att, sub), size)
    chown_tree(att, ATTACKER)
    vic = os.path.join(root, "vic")
    os.mkdir(vic)
    shutil.copytree(shared_data / "wmt", os.path.join(vic, "wmt"))
    chown_tree(vic, VICTIM)
    os.chmod(vic, 0o700)
    yield root, giant
    shutil.rmtree(root)


def start_daemon(tree, tmp_path, *args):
    d = Daemon(tree[0], tmp_path / "batchd.log", open_to_all=True,
               args=("--index-threads", "2", *args))
    return d


def test_a_sparse_giant_is_refused_by_its_size(tree, tmp_path):
    d = start_daemon(tree, tmp_path)
    try:
        before = cpu_ticks(d.proc.pid)
        path, split = tree[1]
        word, err = open_as(ATTACKER, d.address, GIANT, "att/giant", split,
                            "giant")
        assert word == "ERR", "a 2 TiB file was taken"
        # Refused by its size (fstat), naming what to change: no pass ran.
        assert (f"att/giant/{path} is {2 * TIB} bytes, over the limit "
                f"of {DEFAULT_LIMIT} bytes of one data file (batchd "
                f"--max-data-file-bytes)") in err, err
        # Indexing 2 TiB would take the daemon hours of CPU; the refusal a
        # few milliseconds (the bound is generous: a loaded machine).
        assert cpu_ticks(d.proc.pid) - before < 10 * HZ
        # The victim's stream is answered and served.
        assert open_as(VICTIM, d.address, "wmt", "vic/wmt", "train",
                       "victim") == ("OK", "")
    finally:
        d.stop()


def test_a_giant_stops_with_its_caller_and_leaves_the_pool_to_others(
        tree, tmp_path):
    # 4 TiB under a raised limit: the attacker's OpenStream indexes it on
    # its gRPC thread and the shared pool, for far longer than this test
    # runs.
    d = start_daemon(tree, tmp_path, "--max-data-file-bytes", str(16 * TIB))
    split = tree[1][1]
    attacker = None
    try:
        before = cpu_ticks(d.proc.pid)
        attacker = python_as(ATTACKER, OPEN, d.address, GIANT, "att/big",
                             split, "giant", 600, stdin=None)
        # Indexing: the daemon burns CPU for the attacker's call.
        wait_until(lambda: cpu_ticks(d.proc.pid) - before > 2 * HZ, 120,
                   "the daemon counts the attacker's giant")
        assert attacker.poll() is None, attacker.communicate()
        # Meanwhile the victim's WMT stream opens and is served (the red
        # team's victim timed out here: its model load waited for a pool
        # thread that the attacker's loop held).
        assert open_as(VICTIM, d.address, "wmt", "vic/wmt", "train",
                       "victim") == ("OK", "")
        assert attacker.poll() is None, "the count ended before the victim"
        # The attacker gives up mid-call: its work stops.
        attacker.kill()
        attacker.wait()
        assert settles(d.proc.pid, 60), (
            "the daemon's threads still burn CPU after the caller went")
        names = [s["spec"]["name"] for s in d.status().get("streams", [])]
        assert "giant" not in names, names
        # And the daemon serves the victim as before.
        assert open_as(VICTIM, d.address, "wmt", "vic/wmt", "train",
                       "victim2") == ("OK", "")
    finally:
        if attacker is not None and attacker.poll() is None:
            attacker.kill()
            attacker.wait()
        d.stop()
