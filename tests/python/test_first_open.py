"""A first open whose preparation outlasts the client's open deadline, with
a real daemon and real client processes (issue 35, item 3's cancellation
kept, without cancelling what a waiting client still wants):

- the daemon answers "still preparing" (with what it does) before the
  call's deadline, the preparation goes on, and a client that asks again
  joins it: a first open that takes several times the client's
  connect_timeout opens, from one preparation (never restarted);
- a client killed -9 while its stream is prepared: the preparation stops
  once its grace passes (its thread logs that its work returned cancelled,
  and GetStatus lists it no more), and another uid's OpenStream is
  answered meanwhile.

The ImageFolder listing is slowed by a test hook
(BATCHD_TEST_IMAGEFOLDER_HOLD: the listing goes on, counting steps of
progress, while a file exists). Run as root (setuid to a uid of no user):

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_first_open.py
"""

import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

pytest.importorskip("numpy")

from batchd_daemon import Daemon, binary  # noqa: E402
from helpers import as_user, chown_tree, python_as  # noqa: E402
from helpers import require_python_as, wait_until  # noqa: E402

# Uids of no user on the test machine.
PREPARER = 47441
OTHER = 47442

# Opens one stream and reads a batch; prints "OK" or "ERR <message>".
OPEN = r'''
import sys
import batchd
server, workload, data, split, name, connect = sys.argv[1:7]
try:
    loader = batchd.Loader(name, 4, workload=workload, data=data,
                           split=split, world_size=1, rank=0, seed=1,
                           slots=2, format="numpy", server=server,
                           connect_timeout=float(connect), timeout=120.0,
                           options={"index_threads": 1} if workload == "wmt"
                           else {})
    next(loader)
    print("OK", flush=True)
except batchd.Error as e:
    print("ERR", " ".join(str(e).split()), flush=True)
'''


def start_open(uid, server, workload, data, split, name, connect_timeout,
               stderr):
    return python_as(uid, OPEN, server, workload, data, split, name,
                     connect_timeout, stdin=None, stderr=stderr)


def log_count(d, event):
    with open(d.log_path) as f:
        return f.read().count(event)


@pytest.fixture(scope="module")
def tree(shared_data):
    """A data root (root's, 0755) with imagenet/ (readable by all: an
    ImageFolder train/ tree) and other/wmt/ (OTHER's, in a 0700 folder)."""
    require_python_as(PREPARER)
    require_python_as(OTHER)
    root = tempfile.mkdtemp(prefix="batchd-first-open-", dir="/tmp")
    os.chmod(root, 0o755)
    shutil.copytree(shared_data / "imagenet", os.path.join(root, "imagenet"))
    chown_tree(os.path.join(root, "imagenet"), 0, 0, 0o755, 0o644)
    other = os.path.join(root, "other")
    os.mkdir(other)
    shutil.copytree(shared_data / "wmt", os.path.join(other, "wmt"))
    chown_tree(other, OTHER)
    os.chmod(other, 0o700)
    yield root
    shutil.rmtree(root)


@pytest.fixture
def hold(tmp_path, monkeypatch):
    """The hook's file: the daemon's ImageFolder listing goes on while it
    exists."""
    path = tmp_path / "hold"
    path.write_text("")
    os.chmod(tmp_path, 0o755)
    monkeypatch.setenv("BATCHD_TEST_IMAGEFOLDER_HOLD", str(path))
    return path


def start_daemon(tree, tmp_path):
    d = Daemon(tree, tmp_path / "batchd.log", hooks=True, open_to_all=True,
               args=("--index-threads", "2"))
    return d


def test_a_first_open_longer_than_the_connect_timeout_opens(
        tree, tmp_path, hold):
    d = start_daemon(tree, tmp_path)
    client = None
    try:
        connect_timeout = 2.0
        err = open(tmp_path / "client.err", "w")
        start = time.monotonic()
        client = start_open(None, d.address, "imagenet", "imagenet", "train",
                            "slow", connect_timeout, err)
        wait_until(lambda: os.path.exists(f"{hold}.held"), 60,
                   "the daemon lists the ImageFolder tree")
        # The client was told that the stream is being prepared...
        wait_until(lambda: "batchd is preparing it" in
                   (tmp_path / "client.err").read_text(), 60,
                   "the client hears 'still preparing'")
        # ... and still waits, well past its connect_timeout.
        wait_until(lambda: time.monotonic() - start > 3 * connect_timeout,
                   60, "three connect timeouts pass")
        assert client.poll() is None, client.communicate()
        # GetStatus lists the preparation, with what it does.
        preps = d.status().get("preparations", [])
        assert [p["stream"] for p in preps] == ["slow"], preps
        assert "listing imagenet/train" in preps[0]["what"], preps
        # Another uid sees that root prepares a stream, not what it lists
        # (the folders of a directory it may not read).
        seen = json.loads(subprocess.run(
            [binary("batchctl"), "status", "--json", "--server", d.address],
            check=True, capture_output=True, text=True,
            **as_user(OTHER)).stdout)
        others = seen.get("preparations", [])
        assert [p["stream"] for p in others] == ["slow"], others
        assert [others[0][k] for k in ("what", "unit", "done", "total")] \
            == ["", "", 0, 0], others
        # The listing ends: the client's open succeeds.
        hold.unlink()
        out, _ = client.communicate(timeout=120)
        assert out.strip() == "OK", (out, (tmp_path / "client.err").read_text())
        text = (tmp_path / "client.err").read_text()
        assert "listing imagenet/train" in text, text
        # One preparation, joined by every ask, never restarted from zero.
        assert log_count(d, "prepare_started") == 1
        assert log_count(d, "prepare_done") == 1
        assert log_count(d, "prepare_stopped") == 0
        assert d.status().get("preparations", []) == []
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        d.stop()


def test_a_killed_client_stops_its_preparation(tree, tmp_path, hold):
    d = start_daemon(tree, tmp_path)
    client = None
    try:
        client = start_open(PREPARER, d.address, "imagenet", "imagenet",
                            "train", "gone", 600.0, subprocess.DEVNULL)
        wait_until(lambda: os.path.exists(f"{hold}.held"), 60,
                   "the daemon lists the ImageFolder tree")
        wait_until(lambda: log_count(d, "prepare_slow") >= 1, 60,
                   "the client is answered 'still preparing'")
        client.kill()
        client.wait()
        # Another uid's OpenStream is answered and served meanwhile (the
        # listing still holds: the hook's file is there).
        other = start_open(OTHER, d.address, "wmt", "other/wmt", "train",
                           "other", 90.0, subprocess.PIPE)
        out, errs = other.communicate(timeout=180)
        assert out.strip() == "OK", (out, errs)
        assert hold.exists()
        # Nobody asks for the preparation any more: once its grace passes
        # it is cancelled, and its work stops although the listing would
        # go on (the file is still there).
        wait_until(lambda: log_count(d, "prepare_stopped") == 1, 60,
                   "the preparation stops after its caller went")
        wait_until(lambda: d.status().get("preparations", []) == [], 30,
                   "GetStatus lists no preparation")
        names = [s["spec"]["name"] for s in d.status().get("streams", [])]
        assert "gone" not in names, names
        # Stopped, not finished: the listing never ended (its file is still
        # there), and nothing else was prepared for the gone client.
        assert hold.exists()
        assert log_count(d, "prepare_started") == 2  # "gone", "other"
        assert log_count(d, "prepare_done") == 1  # "other"
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        d.stop()
