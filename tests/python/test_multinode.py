"""Many nodes, no server-to-server traffic: two daemons with their own
sockets, shared-memory prefixes and copies of the data stand for two nodes,
and a job of W = 4 is launched by torch's own torchrun as on two machines
(two invocations, --nnodes 2 --nproc-per-node 2, c10d rendezvous on
127.0.0.1), each node's ranks attached to their node's daemon only
(tests/python/ddp_check.py --record). Checked against the one global order
(the same stream read at W = 1): every rank's slice of every step is its
share of that global batch, so the slices are disjoint and complete; the
daemon of one node is killed (-9) under the running job and restarted, and
no batch is lost or repeated; a state_dict() taken on one node resumes the
job at W = 2 on the other node's daemon with exactly the following batches.
Packed WMT rows (wmt train) so that the resume carries a cursor.
scripts/test-torch.sh runs this in PyPI's torch venv; skipped where torch is
older than 2 or has no torchrun beside the interpreter, as
tests/python/test_torchrun.py is.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid

import numpy as np
import pytest

from helpers import make_wmt, torchrun_or_skip

TORCHRUN = torchrun_or_skip()

import batchd  # noqa: E402
from batchd_daemon import Daemon, free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEADLINE = 300  # seconds for a job: torch's import alone takes several on a loaded machine
GLOBAL_BATCH = 8
SEED = 11
OPTIONS = ["index_threads=1"]
STEPS = 12  # of the W = 4 job (300 pairs: a few epochs of packed rows)
HOLD_AT = 4  # its ranks wait after this step while a daemon is killed and restarted
RESUMED_STEPS = 6  # of the W = 2 job resumed from its state


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Two daemons, each with a copy of one small WMT set (300 train pairs,
    a 600-piece SentencePiece model)."""
    root = tmp_path_factory.mktemp("multinode")
    make_wmt(root / "wmt", train=300, validation=10, test=10, shards=2,
             seed=5, vocab_size=600)
    daemons = []
    try:
        for node in range(2):
            data = root / f"node{node}"
            data.mkdir()
            shutil.copytree(root / "wmt", data / "wmt")
            daemons.append(Daemon(data, root / f"node{node}.log"))
        yield daemons
    finally:
        for d in daemons:
            d.stop()


@pytest.fixture(scope="module")
def global_order(nodes):
    """The global batches of the stream read whole (W = 1) from node 0:
    {step: {tensor: array}}."""
    loader = batchd.Loader(f"order-{uuid.uuid4().hex[:8]}", GLOBAL_BATCH,
                           format="numpy", workload="wmt", data="wmt",
                           world_size=1, rank=0, seed=SEED,
                           options=dict(o.split("=") for o in OPTIONS),
                           server=nodes[0].address, timeout=120)
    order = {}
    for _ in range(STEPS + RESUMED_STEPS):
        batch, info = loader.next_batch()
        order[info.step] = {k: np.array(v) for k, v in batch.items()}
    loader.close()
    return order


def share(global_batch, world, rank):
    """What rank `rank` of `world` must hold: its rows of the global batch,
    as ddp_check.py records them."""
    out = {"shape": {}, "sha256": {}}
    for k, v in global_batch.items():
        part = np.ascontiguousarray(np.split(v, world)[rank])
        out["shape"][k] = list(part.shape)
        out["sha256"][k] = hashlib.sha256(part.tobytes()).hexdigest()
    return out


def ddp_check(stream, record, *more):
    return [os.path.join(HERE, "ddp_check.py"), "--stream", stream,
            "--workload", "wmt", "--data", "wmt", "--seed", str(SEED),
            "--global-batch-size", str(GLOBAL_BATCH), "--record", str(record),
            *[a for o in OPTIONS for a in ("--option", o)], *more]


def launch(daemon, log, launcher_args, script_args):
    """torchrun with its ranks' BATCHD_SERVER the daemon's; its output goes
    to `log` (a file: nobody reads a pipe while the ranks are held)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", BATCHD_SERVER=daemon.address)
    with open(log, "w") as out:
        proc = subprocess.Popen([TORCHRUN, *launcher_args, *script_args],
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    proc.log = log
    return proc


def stop(procs):
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def output(proc):
    with open(proc.log) as f:
        return f.read()


def finish(procs):
    """Waits for the launchers; each must exit 0. Returns their output."""
    try:
        for proc in procs:
            proc.wait(timeout=DEADLINE)
    finally:
        stop(procs)
    outs = [output(proc) for proc in procs]
    for proc in procs:
        assert proc.returncode == 0, "\n".join(outs)
    return outs


def records(directory, world):
    """{rank: ([step lines], end line)} of a job's --record directory."""
    out = {}
    for rank in range(world):
        with open(os.path.join(directory, f"rank{rank}.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        assert lines and lines[-1].get("end"), f"rank {rank} did not finish"
        out[rank] = (lines[:-1], lines[-1])
    return out


def wait_for_steps(directory, world, step, procs):
    """Until every rank recorded `step` (they then hold)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        done = 0
        for rank in range(world):
            try:
                with open(os.path.join(directory, f"rank{rank}.jsonl")) as f:
                    done += any(json.loads(line)["step"] == step
                                for line in f if line.endswith("\n"))
            except FileNotFoundError:
                pass
        if done == world:
            return
        for proc in procs:
            assert proc.poll() is None, output(proc)
        assert time.monotonic() < deadline, f"the ranks did not reach step {step}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def two_node_job(nodes, tmp_path_factory):
    """The W = 4 job over both daemons: node 1's daemon is killed (-9) after
    step HOLD_AT while every rank waits, the ranks go on, and the daemon
    comes back a moment later on the same socket. Returns the records."""
    record = tmp_path_factory.mktemp("job-w4")
    release = record / "release"
    port = free_port()
    rdzv_id = f"multinode-{uuid.uuid4().hex[:8]}"
    procs = [
        launch(daemon, record / f"node{node}.out",
               ["--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(node),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-id", rdzv_id, "--local-addr", "127.0.0.1"],
               ddp_check("job", record, "--steps", str(STEPS), "--hold-at",
                         str(HOLD_AT), "--hold-file", str(release)))
        for node, daemon in enumerate(nodes)]
    try:
        wait_for_steps(record, 4, HOLD_AT, procs)
        held = nodes[1].segments()
        assert len(held) == 2, held  # node 1's two ranks, on node 1 alone
        nodes[1].kill()
        release.touch()
        time.sleep(1)  # the ranks go on and find their daemon gone
        nodes[1].start()
    except BaseException:
        stop(procs)
        raise
    outs = finish(procs)
    return records(record, 4), outs


def test_each_nodes_ranks_hold_their_share_of_the_one_global_order(
        nodes, global_order, two_node_job):
    recs, outs = two_node_job
    servers = {rank: recs[rank][1]["server"] for rank in recs}
    # Two ranks per node, each attached to its own node's daemon.
    assert sorted(servers.values()) == sorted([nodes[0].address] * 2 +
                                              [nodes[1].address] * 2), servers
    for rank, (lines, _) in recs.items():
        assert [line["step"] for line in lines] == list(range(STEPS)), rank
        for line in lines:
            want = share(global_order[line["step"]], 4, rank)
            assert (line["shape"], line["sha256"]) == (want["shape"], want["sha256"]), \
                f"rank {rank} step {line['step']}: not its rows of the global batch"
    # Node 0's daemon served only its ranks' rings; both sets are freed.
    for daemon in nodes:
        deadline = time.monotonic() + 60
        while daemon.segments() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert daemon.segments() == []


def test_a_daemon_killed_under_the_job_loses_and_repeats_no_batch(nodes,
                                                                  two_node_job):
    recs, outs = two_node_job
    for rank, (lines, end) in recs.items():
        # Every step once, in order, through the kill (checked against the
        # global order above); the killed node's ranks reopened their stream.
        assert [line["step"] for line in lines] == list(range(STEPS)), rank
        assert end["next_step"] == STEPS
        if end["server"] == nodes[1].address:
            assert end["reconnects"] >= 1, (rank, end)
        else:
            assert end["reconnects"] == 0, (rank, end)
    assert len(re.findall(r"^step \d+ ok$", "".join(outs), re.M)) == STEPS


def test_a_state_from_one_node_resumes_at_w2_on_the_other(nodes, global_order,
                                                          two_node_job,
                                                          tmp_path):
    recs, _ = two_node_job
    # The state of a rank of node 0 (every rank's is the same) ...
    node0 = [r for r in recs if recs[r][1]["server"] == nodes[0].address]
    state = recs[node0[0]][1]["state"]
    assert all(recs[r][1]["state"] == state for r in recs)
    assert state["next_step"] == STEPS and state["cursor"] is not None
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    # ... resumes the job at W = 2 on node 1's daemon, a new stream there.
    record = tmp_path / "job-w2"
    record.mkdir()
    finish([launch(nodes[1], record / "node1.out",
                   ["--standalone", "--nproc-per-node", "2"],
                   ddp_check("resumed", record, "--steps", str(RESUMED_STEPS),
                             "--state", str(path)))])
    resumed = records(record, 2)
    for rank, (lines, end) in resumed.items():
        assert end["server"] == nodes[1].address
        assert [line["step"] for line in lines] == \
            list(range(STEPS, STEPS + RESUMED_STEPS)), rank
        for line in lines:
            want = share(global_order[line["step"]], 2, rank)
            assert (line["shape"], line["sha256"]) == (want["shape"], want["sha256"]), \
                f"rank {rank} step {line['step']}: not its rows after the resume"
