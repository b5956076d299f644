"""Jobs of one spec on one daemon share every fill (issue 37), with the real
daemon and real job processes:

- exact: the SHA-256 of every global batch of a job beside others equals
  its lone run's (a daemon that shares nothing): at other world sizes, one
  resumed from a state_dict mid-epoch, one started later, one stopped
  (SIGSTOP) for longer than the window, and on an eval split;
- shared: jobs read side by side copy the items one of them decoded
  (status, metrics and `batchctl status` say so);
- no lockstep: the others run on while a job is stopped; a job killed with
  kill -9 frees what the window kept for it; the window never holds more
  than its budget; the daemon's threads are those of a lone job;
- streams of two owners never share.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_sweep.py
"""

import hashlib
import json
import os
import signal
import subprocess
import threading
import uuid

import pytest

np = pytest.importorskip("numpy")

import batchd  # noqa: E402
from batchd_daemon import Daemon, binary, free_port, metrics  # noqa: E402
from helpers import (GRPC_THREAD_NAMES, python_as,  # noqa: E402
                     thread_names, wait_until)

TRAIN = dict(workload="imagenet", data="imagenet", split="train",
             global_batch_size=4, seed=11)
EVAL = dict(workload="imagenet", data="imagenet", split="validation",
            global_batch_size=2, seed=11)
# What an imagenet item counts in the window: a 224 x 224 x 3 image and
# its int64 label, each on its own 64-byte line, and its entry (256 bytes).
ITEM_BYTES = 224 * 224 * 3 + 64 + 256
STEPS = 40  # train steps a job reads (6 a epoch: several epochs)

# One job as a trainer process runs it: W ranks' Loaders in this process.
# Prints "open", then "<step> <sha256 of the global batch>" a step, then
# "done", and waits for a line on stdin before it exits; with "gate": K,
# it prints "gate" after K steps and waits for a line before going on.
JOB = r'''
import hashlib, json, sys
import numpy as np
import batchd
address, name, world, steps, spec, extra = sys.argv[1:7]
world, steps = int(world), int(steps)
spec, extra = json.loads(spec), json.loads(extra)
g = spec.pop("global_batch_size")
loaders = [batchd.Loader(name, g, format="numpy", world_size=world, rank=r,
                         server=address, connect_timeout=60.0, timeout=300.0,
                         state=extra.get("state"), **spec)
           for r in range(world)]
print("open", flush=True)
for k in range(steps):
    if k == extra.get("gate"):
        print("gate", flush=True)
        sys.stdin.readline()
    parts = [loader.next_batch() for loader in loaders]
    h = hashlib.sha256()
    for key in sorted(parts[0][0]):
        h.update(key.encode())
        for batch, _ in parts:
            h.update(np.ascontiguousarray(batch[key]).tobytes())
    print(parts[0][1].step, h.hexdigest(), flush=True)
    del parts
print("done", flush=True)
sys.stdin.readline()
'''


def global_hash(parts):
    """The JOB's hash of one global batch from its ranks' (batch, info)."""
    h = hashlib.sha256()
    for key in sorted(parts[0][0]):
        h.update(key.encode())
        for batch, _ in parts:
            h.update(np.ascontiguousarray(batch[key]).tobytes())
    return h.hexdigest()


def open_job(daemon, name, spec, world, **kw):
    spec = dict(spec)
    g = spec.pop("global_batch_size")
    return [batchd.Loader(name, g, format="numpy", world_size=world, rank=r,
                          server=daemon.address, connect_timeout=60.0,
                          timeout=300.0, **spec, **kw)
            for r in range(world)]


def read_hashes(loaders, steps):
    """{step: hash} of the next `steps` global batches."""
    out = {}
    for _ in range(steps):
        parts = [loader.next_batch() for loader in loaders]
        out[parts[0][1].step] = global_hash(parts)
    return out


def close(loaders):
    for loader in loaders:
        loader.close()


class JobProcess:
    """A JOB process and the steps it printed, read by a thread."""

    def __init__(self, daemon, spec, world, steps, uid=None, **extra):
        self.name = f"sweep-{uuid.uuid4().hex[:10]}"
        self.hashes = {}
        self.lines = []
        self._cv = threading.Condition()
        self.proc = python_as(uid, JOB, daemon.address, self.name, world,
                              steps, json.dumps(spec), json.dumps(extra))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            words = line.split()
            with self._cv:
                self.lines.append(line.strip())
                if len(words) == 2 and words[0].isdigit():
                    self.hashes[int(words[0])] = words[1]
                self._cv.notify_all()

    def wait_for(self, what, seconds=300):
        """Waits until the job printed `what` ("open", "gate", "done") or
        its step `what` (an int)."""
        def seen():
            if isinstance(what, int):
                return what in self.hashes
            return what in self.lines
        wait_until(lambda: seen() or self.proc.poll() is not None, seconds,
                   f"job {self.name} printing {what}")
        if not seen():
            pytest.fail(f"job {self.name} exited with {self.proc.returncode}:"
                        f" {self.proc.stderr.read()[-3000:]}")

    def go_on(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def lone(shared_data, tmp_path_factory):
    """Every job's reference: the spec read alone, by a daemon that shares
    nothing, at W = 1. {"train": {step: hash}, "eval": {step: hash}}."""
    d = Daemon(shared_data, tmp_path_factory.mktemp("lone") / "batchd.log",
               args=("--share-window-bytes", "0"))
    try:
        train = open_job(d, "lone-train", TRAIN, 1)
        out = {"train": read_hashes(train, STEPS + 10)}
        close(train)
        ev = open_job(d, "lone-eval", EVAL, 1)
        out["eval"] = read_hashes(ev, 6)
        close(ev)
        yield out
    finally:
        d.stop()


def stream_of(status, name):
    (s,) = [s for s in status["streams"] if s["spec"]["name"] == name]
    return s


def test_jobs_read_side_by_side_share_fills_and_get_their_lone_bytes(
        shared_data, lone, tmp_path):
    port = free_port()
    d = Daemon(shared_data, tmp_path / "batchd.log",
               args=("--metrics-listen", f"127.0.0.1:{port}"))
    try:
        # A state_dict mid-epoch (step 3 of 6), from another job.
        first = open_job(d, "first", TRAIN, 2)
        read_hashes(first, 3)
        state = json.loads(json.dumps(first[1].state_dict()))
        close(first)
        a = open_job(d, "a", TRAIN, 2)
        b = open_job(d, "b", TRAIN, 1)
        c = open_job(d, "c", TRAIN, 4, state=state)  # resumed, W = 4
        got = {"a": {}, "b": {}, "c": {}}
        for _ in range(STEPS):
            for name, job in (("a", a), ("b", b), ("c", c)):
                got[name].update(read_hashes(job, 1))
        for name in "ab":
            assert got[name] == {s: lone["train"][s] for s in range(STEPS)}
        assert got["c"] == {s: lone["train"][s] for s in range(3, STEPS + 3)}

        st = d.status()
        rows = {n: stream_of(st, n) for n in "abc"}
        groups = {int(r["share_group"]) for r in rows.values()}
        assert len(groups) == 1 and 0 not in groups, rows
        assert all(r["share_group_streams"] == 3 for r in rows.values())
        # Every step from 7 on (c's start plus its 4 slots) was made while
        # all three ran: each item decoded by one job and copied by two.
        shared = sum(int(r.get("fills_shared", 0)) for r in rows.values())
        assert shared >= 2 * 4 * (STEPS - 7), rows
        made = sum(int(r.get("fills_made", 0)) for r in rows.values())
        assert made < 3 * 4 * STEPS
        assert int(st["share_held_bytes"]) <= int(st["share_window_bytes"])

        m = metrics(port)
        for n in "abc":
            labels = f'{{stream="{n}",owner="{os.geteuid()}"}}'
            assert m[f"batchd_fills_shared_total{labels}"] == int(
                rows[n].get("fills_shared", 0))
            assert m[f"batchd_fills_made_total{labels}"] == int(
                rows[n].get("fills_made", 0))
        assert m["batchd_share_groups"] == 1
        text = subprocess.run([binary("batchctl"), "status", "--server",
                               d.address], check=True, capture_output=True,
                              text=True).stdout
        assert "sharing with b, c" in text, text
        assert "share window" in text
        for job in (a, b, c):
            close(job)

        # Eval passes share too (2 slots: steps 2..5 are made with both
        # open), the last one included.
        e1 = open_job(d, "e1", EVAL, 2, slots=2)
        e2 = open_job(d, "e2", EVAL, 1, slots=2)
        got1, got2 = {}, {}
        for _ in range(6):
            got1.update(read_hashes(e1, 1))
            got2.update(read_hashes(e2, 1))
        assert got1 == lone["eval"] and got2 == lone["eval"]
        st = d.status()
        shared = sum(int(stream_of(st, n).get("fills_shared", 0))
                     for n in ("e1", "e2"))
        assert shared >= 4 * 2
        close(e1)
        close(e2)
    finally:
        d.stop()


def test_stopped_late_and_killed_jobs_hold_nobody_and_get_exact_bytes(
        shared_data, lone, tmp_path):
    # A window of 16 items (4 steps): a job stopped while the others run
    # 30 steps is far behind it when it goes on.
    budget = 16 * ITEM_BYTES
    d = Daemon(shared_data, tmp_path / "batchd.log",
               args=("--share-window-bytes", str(budget)))
    jobs = []
    try:
        lead = JobProcess(d, TRAIN, 2, STEPS)
        paused = JobProcess(d, TRAIN, 1, STEPS)
        jobs += [lead, paused]
        paused.wait_for(4)
        os.kill(paused.proc.pid, signal.SIGSTOP)
        stopped_at = max(paused.hashes)
        # The others run on while it is stopped: one started now, and the
        # lead, 30 steps past where the stopped job is.
        late = JobProcess(d, TRAIN, 2, STEPS - 10)
        jobs.append(late)
        lead.wait_for(min(STEPS - 1, stopped_at + 30))
        late.wait_for(5)
        st = d.status()
        assert int(st["share_max_held_bytes"]) <= budget
        os.kill(paused.proc.pid, signal.SIGCONT)
        for job in jobs:
            job.wait_for("done")
        for job in (lead, paused):
            assert job.hashes == {s: lone["train"][s] for s in range(STEPS)}
        assert late.hashes == {s: lone["train"][s]
                               for s in range(STEPS - 10)}
        st = d.status()
        assert int(st["share_max_held_bytes"]) <= budget
        groups = {int(stream_of(st, j.name)["share_group"]) for j in jobs}
        assert len(groups) == 1
    finally:
        for job in jobs:
            job.stop()
        d.stop()


def test_a_killed_job_frees_its_share_of_the_window(shared_data, lone,
                                                    tmp_path):
    d = Daemon(shared_data, tmp_path / "batchd.log")
    jobs = []
    try:
        reader = JobProcess(d, TRAIN, 1, STEPS)
        idle = JobProcess(d, TRAIN, 2, STEPS, gate=2)  # reads 2 steps, waits
        jobs += [reader, idle]
        idle.wait_for("gate")
        reader.wait_for(20)
        # What the reader decoded since is kept for the idle job, which is
        # behind it and alive.
        wait_until(lambda: int(d.status().get("share_held_bytes", 0)) > 0, 60,
                   "fills kept for the idle job")
        threads_shared = {n: c for n, c in thread_names(d.proc.pid).items()
                          if not n.startswith(GRPC_THREAD_NAMES) and
                          n != "batchd-io"}
        assert threads_shared["batchd-worker"] == 2
        idle.proc.kill()
        idle.proc.wait()
        wait_until(lambda: int(d.status().get("share_held_bytes", 0)) == 0,
                   60, "the window empty once the idle job was killed")
        reader.wait_for("done")
        assert reader.hashes == {s: lone["train"][s] for s in range(STEPS)}
        assert int(d.status().get("share_held_bytes", 0)) == 0
        # Sharing started no thread: those of a job alone are those of two
        # jobs sharing (gRPC's and the read-ahead's I/O threads, started
        # and ended as their work comes, aside).
        threads_alone = {n: c for n, c in thread_names(d.proc.pid).items()
                         if not n.startswith(GRPC_THREAD_NAMES) and
                         n != "batchd-io"}
        assert threads_alone == threads_shared
    finally:
        for job in jobs:
            job.stop()
        d.stop()


# Uids of no user on the test machine.
OWNER_A = 47431
OWNER_B = 47432


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become others")
def test_streams_of_two_owners_never_share(tmp_path):
    (tmp_path / "data").mkdir()
    d = Daemon(tmp_path / "data", tmp_path / "batchd.log",
               args=("--socket-mode", "0666"))
    os.chmod(d.dir, 0o755)  # other uids may reach the socket
    spec = dict(workload="synthetic", split="train", global_batch_size=8,
                seed=3, options={"examples": 64, "payload_bytes": 4096})
    jobs = []
    try:
        for uid in (OWNER_A, OWNER_B, OWNER_A):
            jobs.append(JobProcess(d, spec, 1, 30, uid=uid))
        for job in jobs:
            job.wait_for("done")
        assert jobs[0].hashes == jobs[1].hashes == jobs[2].hashes
        st = d.status()
        rows = [stream_of(st, j.name) for j in jobs]
        assert [r["owner_uid"] for r in rows] == [OWNER_A, OWNER_B, OWNER_A]
        # The two streams of one owner are one group; the other owner's is
        # a group of its own, and copied nothing.
        assert rows[0]["share_group"] == rows[2]["share_group"]
        assert rows[1]["share_group"] != rows[0]["share_group"]
        assert int(rows[1].get("fills_shared", 0)) == 0
        assert int(rows[1]["fills_made"]) > 0
    finally:
        for job in jobs:
            job.stop()
        d.stop()
