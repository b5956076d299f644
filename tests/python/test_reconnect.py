"""A daemon restart is a pause, not an error, for the Python client: after
kill -9 or a clean stop and a restart on the same socket, every rank goes
on at its own next step with exactly the batches it would have had. And a
forked child leaves its parent's stream alone, and exits.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_reconnect.py
"""

import os
import subprocess
import sys
import textwrap

import pytest

import batchd
from batchd_daemon import Server

OPTIONS = {"examples": 500, "payload_bytes": 24}


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.stop()


def open_rank(server, stream, rank, **kw):
    return batchd.Loader(stream, 8, format="numpy", world_size=2, rank=rank,
                         seed=9, options=OPTIONS, server=server.address,
                         connect_timeout=30.0, timeout=60.0, **kw)


def ids(loader):
    batch, info = loader.next_batch()
    return info.step, batch["ids"].tolist()


@pytest.mark.parametrize("kill", [True, False], ids=["kill-9", "sigterm"])
def test_a_restarted_daemon_is_a_pause_not_an_error(server, kill):
    ranks = [open_rank(server, "job", r) for r in range(2)]
    seen = {0: [ids(ranks[0]) for _ in range(6)],
            1: [ids(ranks[1]) for _ in range(4)]}  # the ranks are apart
    server.restart(kill=kill)
    for rank, n in ((0, 8), (1, 10)):
        seen[rank] += [ids(ranks[rank]) for _ in range(n)]
    for rank in range(2):
        assert [s for s, _ in seen[rank]] == list(range(14)), rank
        assert ranks[rank].reconnects[0] == 1
    # The same batches as a run the restart never touched.
    reference = [open_rank(server, "reference", r) for r in range(2)]
    for rank in range(2):
        assert [ids(reference[rank]) for _ in range(14)] == seen[rank]


def test_a_restart_window_that_passes_names_the_server(server):
    loader = open_rank(server, "gone", 0, reconnect=1.0)
    partner = open_rank(server, "gone", 1, reconnect=1.0)
    ids(loader)
    server.kill()
    with pytest.raises(batchd.ServerUnavailableError,
                       match="did not come back") as e:
        for _ in range(10):
            loader.next_batch()
    assert server.address in str(e.value)
    del partner


FORK_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import batchd
    use = sys.argv[2] == "use"
    loader = batchd.Loader("fork", 4, format="numpy", world_size=1, rank=0,
                           options={"examples": 100, "payload_bytes": 8},
                           server=sys.argv[1], timeout=30.0, slots=3)
    held, info = loader.next_batch()
    pid = os.fork()
    if pid == 0:
        if use:
            try:
                next(loader)
                sys.exit(3)
            except batchd.Error as e:
                if "forked child" not in str(e):
                    sys.exit(4)
        del held
        sys.exit(0)  # a normal exit: the inherited Loader is destroyed
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        print("child hung")
        sys.exit(1)
    if os.waitstatus_to_exitcode(status) != 0:
        print("child failed", os.waitstatus_to_exitcode(status))
        sys.exit(1)
    steps = [info.step] + [loader.next_batch()[1].step for _ in range(8)]
    print("steps", *steps)
""")


@pytest.mark.parametrize("use", ["use", "leave"])
def test_a_forked_child_leaves_its_parents_stream_alone(server, use):
    out = subprocess.run([sys.executable, "-c", FORK_SCRIPT, server.address,
                          use], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split() == ["steps", *map(str, range(9))]
