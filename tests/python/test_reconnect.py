"""A daemon restart is a pause, not an error, for the Python client: after
kill -9 or a clean stop and a restart on the same socket, every rank goes
on at its own next step with exactly the batches it would have had, for
synthetic, imagenet and wmt streams (checked against a daemon never killed
and, for imagenet, against the independent sampler of tests/soak_reference.py);
a rank that opens its stream while the daemon dies waits for the next one.
And a forked child leaves its parent's stream alone, and exits.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_reconnect.py
"""

import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

import batchd
from batchd_daemon import Daemon

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from soak_reference import (Reference, check_ids_and_targets,  # noqa: E402
                            image_folder_classes)

OPTIONS = {"examples": 500, "payload_bytes": 24}


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


# --- imagenet and wmt under kill -9 ------------------------------------------

STREAMS = {
    "imagenet": dict(workload="imagenet", data="imagenet", split="train",
                     batch=8, seed=5, options={"with_ids": 1}),
    "wmt": dict(workload="wmt", data="wmt", split="train", batch=4, seed=11,
                options={"index_threads": 1}),
}


def open_stream(daemon, name, rank, stream=None):
    s = STREAMS[name]
    # 2 slots: a rank reading 3 steps after a kill has drained the old ring
    # and met the restart, whatever the daemon had published.
    return batchd.Loader(stream or name, s["batch"], workload=s["workload"],
                         data=s["data"], split=s["split"], world_size=2,
                         rank=rank, seed=s["seed"], options=s["options"],
                         slots=2, server=daemon.address, format="numpy",
                         connect_timeout=60.0, timeout=120.0)


def take(loader):
    """(BatchInfo, {name: a copy of the array}) of the next batch."""
    batch, info = loader.next_batch()
    return info, {k: v.copy() for k, v in batch.items()}


def assert_same_batches(got, reference):
    for (info, batch), (ref_info, ref_batch) in zip(got, reference):
        assert info == ref_info
        assert sorted(batch) == sorted(ref_batch), info.step
        for k in batch:
            assert batch[k].dtype == ref_batch[k].dtype, (info.step, k)
            assert batch[k].tobytes() == ref_batch[k].tobytes(), (info.step, k)


@pytest.fixture
def victim_and_reference(shared_data, tmp_path):
    """A daemon to kill, and one never killed, both serving shared_data."""
    victim = Daemon(shared_data, tmp_path / "victim.log")
    reference = Daemon(shared_data, tmp_path / "reference.log")
    yield victim, reference
    victim.stop()
    reference.stop()


def test_imagenet_and_wmt_ranks_ride_out_kill_9s_with_undisturbed_batches(
        victim_and_reference, shared_data):
    victim, reference = victim_and_reference
    ranks = {(n, r): open_stream(victim, n, r) for n in STREAMS for r in (0, 1)}
    got = {k: [] for k in ranks}
    for round in range(4):
        for (name, rank), loader in ranks.items():
            # The ranks of a stream are a step apart at every kill.
            for _ in range(3 + (rank + round) % 2):
                got[name, rank].append(take(loader))
        if round < 3:
            victim.restart()  # kill -9; same socket, flags and cache
    for key, loader in ranks.items():
        assert [i.step for i, _ in got[key]] == list(range(len(got[key]))), key
        assert loader.reconnects[0] == 3, key
    for key, batches in got.items():
        ref = open_stream(reference, *key)
        assert_same_batches(batches, [take(ref) for _ in batches])
    # imagenet: the ids are the sampler's, the targets their classes.
    s = STREAMS["imagenet"]
    classes = image_folder_classes(str(shared_data / "imagenet" / "train"))
    for rank in (0, 1):
        sampler = Reference(dict(split="train", world_size=2,
                                 global_batch_size=s["batch"], seed=s["seed"],
                                 examples=len(classes)), rank)
        for info, batch in got["imagenet", rank]:
            assert check_ids_and_targets(
                sampler, info.step, info, batch["ids"].tolist(),
                batch["targets"].tolist(), classes) == []


SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # empty SETTINGS


class DyingDaemon:
    """Listens on a daemon's socket path as a daemon that dies in the middle
    of its first OpenStream: once the call has arrived (an HTTP/2 HEADERS
    frame), it drops the connection. call_seen is set then."""

    def __init__(self, path):
        self.path = path
        if os.path.exists(path):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.call_seen = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.call_seen.is_set():
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(30)
                data = conn.recv(65536)
                if not data.startswith(b"PRI * HTTP/2.0"):
                    continue  # the client's check of who listens
                conn.sendall(SETTINGS_FRAME)
                data = data[24:]
                while not self.call_seen.is_set():
                    while len(data) >= 9:
                        length = int.from_bytes(data[:3], "big")
                        if data[3] == 1:
                            self.call_seen.set()
                            break
                        data = data[9 + length:]
                    else:
                        more = conn.recv(65536)
                        if not more:
                            break
                        data += more

    def close(self):
        self.sock.close()
        os.unlink(self.path)


def test_a_rank_that_opens_while_the_daemon_dies_waits_for_the_next(
        victim_and_reference):
    victim, reference = victim_and_reference
    victim.kill()
    dying = DyingDaemon(os.path.join(victim.dir, "sock"))
    opened = {}

    def open_rank():
        try:
            opened["loader"] = open_stream(victim, "wmt", 0)
        except batchd.Error as e:
            opened["error"] = e

    opener = threading.Thread(target=open_rank)
    opener.start()
    assert dying.call_seen.wait(60), "the rank never sent its OpenStream"
    dying.close()
    victim.start()
    opener.join(120)
    assert "error" not in opened, opened.get("error")
    got = [take(opened["loader"]) for _ in range(3)]
    ref = open_stream(reference, "wmt", 0)
    assert_same_batches(got, [take(ref) for _ in got])
