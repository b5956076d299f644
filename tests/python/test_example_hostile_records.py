"""tf.train.Example records another user placed cannot swell the daemon,
with a real daemon and two real uids.

A value of an Example takes two bytes of a record (an empty bytes value)
and kept 32 once parsed (a std::string): ImageNet TFRecord shards of one
32 MiB record of 16 million empty values made the daemon's peak RSS grow by
over 2 GiB (every read of the record, the first and its substitutes, parsed
it whole), 8 GiB with records of 64 MiB (the default max_file_bytes; a
stream may ask for 256 MiB). Now a parse is refused
once its values would keep more than kMaxExampleOverheadBytes
(workloads/common/tf_example.h) beyond their bytes: the stream fails,
naming the record, the daemon's peak RSS grows by far less, and another
uid's running stream gets its batches.

Run as root (setuid to uids of no user):

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_example_hostile_records.py
"""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("numpy")

from batchd_daemon import Daemon  # noqa: E402
from helpers import REPO, chown_tree, last_line, needs_root  # noqa: E402
from helpers import python_as, status_bytes  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "workloads", "common"))
import records  # noqa: E402

# Uids of no user on the test machine.
ATTACKER = 47451
VICTIM = 47452
EMPTY_VALUES = 16 << 20  # a 32 MiB record

pytestmark = needs_root

# Opens an imagenet train stream of batches of 4 and reads `batches` of
# them: prints "OK <batches>" or "ERR <message>". With "wait", it prints
# "ready" after its first batch and reads the rest once a line arrives on
# stdin.
CLIENT = r'''
import sys
import uuid
import batchd
server, data, batches, wait = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    sys.argv[4] == "wait"
try:
    loader = batchd.Loader(uuid.uuid4().hex[:16], 4, workload="imagenet",
                           data=data, split="train", world_size=1, rank=0,
                           seed=1, slots=2, format="numpy", server=server,
                           connect_timeout=60.0, timeout=120.0)
    for i in range(batches):
        if wait and i == 1:
            print("ready", flush=True)
            sys.stdin.readline()
        b = next(loader)
        assert b["inputs"].shape[0] == 4, b["inputs"].shape
    loader.close()
    print("OK", batches, flush=True)
except batchd.Error as e:
    print("ERR", " ".join(str(e).split()), flush=True)
'''


def empty_values_example(count):
    """A tf.train.Example whose `image` is `count` empty bytes values."""
    bytes_list = b"\x0a\x00" * count
    feature = records.field_bytes(1, bytes_list)
    entry = records.field_bytes(1, "image") + records.field_bytes(2, feature)
    return records.field_bytes(1, records.field_bytes(1, entry))


@pytest.fixture(scope="module")
def tree(shared_data):
    """A root-owned data root with attacker/inet (four TFRecord shards of
    one hostile record each: links of one file) and the victim's 0700
    victim/imagenet (an ImageFolder tree)."""
    root = tempfile.mkdtemp(prefix="batchd-example-hostile-", dir="/tmp")
    os.chmod(root, 0o755)
    inet = os.path.join(root, "attacker", "inet")
    os.makedirs(inet)
    first = os.path.join(inet, "x-train.tfrecord-00000-of-00004")
    records.write_tfrecord(first, [empty_values_example(EMPTY_VALUES)])
    for i in range(1, 4):
        os.link(first,
                os.path.join(inet, f"x-train.tfrecord-0000{i}-of-00004"))
    chown_tree(os.path.join(root, "attacker"), ATTACKER, dir_mode=0o755)
    victim = os.path.join(root, "victim")
    os.mkdir(victim)
    shutil.copytree(shared_data / "imagenet" / "train",
                    os.path.join(victim, "imagenet", "train"))
    chown_tree(victim, VICTIM, dir_mode=0o700)
    yield root
    subprocess.run(["rm", "-rf", root], check=True)


def client(uid, server, data, batches, wait=False):
    return python_as(uid, CLIENT, server, data, batches,
                     "wait" if wait else "go")


def answer(proc):
    """The client's last line."""
    return last_line(proc, timeout=180)


def test_records_of_tiny_values_are_refused_without_swelling_the_daemon(
        tree, tmp_path):
    # One worker and read-ahead within 16 MiB, so that the peak RSS
    # measures the parses, not the victim's read-ahead.
    d = Daemon(tree, tmp_path / "batchd.log", threads=1, open_to_all=True,
               args=("--index-threads", "2",
                     "--readahead-bytes", str(16 << 20)))
    try:
        pid = d.proc.pid
        running = client(VICTIM, d.address, "victim/imagenet", 3, wait=True)
        assert running.stdout.readline().strip() == "ready", \
            running.stderr.read()
        hwm = status_bytes(pid, "VmHWM")

        got = answer(client(ATTACKER, d.address, "attacker/inet", 1))
        assert got.startswith("ERR"), got
        assert "attacker/inet/x-train.tfrecord-0000" in got, got

        # Unbounded, the parses kept over 2 GiB (512 MiB of std::strings
        # each, and their vectors' growth); bounded, about 500 MiB (the
        # records read, and what each parse keeps before it is refused).
        grown = status_bytes(pid, "VmHWM") - hwm
        assert grown < 3 << 29, f"peak RSS grew by {grown >> 20} MiB"
        # The client's text is cut short; the log says why in full.
        with open(d.log_path) as f:
            log = f.read()
        assert ("malformed tf.train.Example: its values and features would "
                "take more than 16777216 bytes") in log, log[-2000:]
        # The victim's running stream goes on.
        running.stdin.write("go\n")
        running.stdin.flush()
        assert answer(running) == "OK 3"
        d.proc.terminate()
        assert d.proc.wait(timeout=60) == 0
    finally:
        d.stop()
