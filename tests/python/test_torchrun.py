"""DDP jobs over batchd launched by torch's own torchrun (PyPI's torch 2.x;
scripts/test-torch.sh runs this in its venv): the slices of every step
disjoint and complete (tests/python/ddp_check.py), examples/synthetic_ddp.py
as its docstring runs it, and a clean stop on Ctrl-C (SIGINT to the
launcher's process group) and when one rank is killed. Skipped where torch
is older than 2 or has no torchrun beside the interpreter (Debian's torch
1.13 torchrun fails on Python 3.11; examples/launch.py stands in there).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import torchrun_or_skip

TORCHRUN = torchrun_or_skip()

from batchd_daemon import Server  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEADLINE = 120  # seconds: torch's import alone takes several on a loaded machine


def torchrun(server, *args, **popen):
    env = dict(os.environ, OMP_NUM_THREADS="1", BATCHD_SERVER=server.address)
    return subprocess.Popen(
        [TORCHRUN, "--standalone", "--nproc_per_node", "2", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, **popen)


def run_job(server, script, *args):
    """Runs `script` (a path) with args as a torchrun job to its end; its
    output, the job having succeeded."""
    proc = torchrun(server, script, *args)
    out, _ = proc.communicate(timeout=DEADLINE * 3)
    assert proc.returncode == 0, out
    return out


def read_until(proc, pattern, lines):
    """Lines of proc's output up to the first that matches (or its end)."""
    for line in proc.stdout:
        lines.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    return None


def gone(pgid):
    try:
        os.killpg(pgid, 0)
        return False
    except ProcessLookupError:
        return True


def wait_until(cond, seconds=DEADLINE):
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_torchrun_ranks_get_disjoint_complete_slices_every_step(server):
    out = run_job(server, os.path.join(HERE, "ddp_check.py"),
                  "--stream", "tr-check", "--steps", "25")
    assert "every step's slices disjoint and complete, every epoch whole" in out, out
    assert len(re.findall(r"^step \d+ ok$", out, re.M)) == 25, out
    # The ranks detached: their rings are freed, the daemon serves on.
    assert wait_until(lambda: server.segments() == []), server.segments()


def test_torchrun_runs_synthetic_ddp_example(server):
    out = run_job(server, os.path.join(REPO, "examples", "synthetic_ddp.py"),
                  "--steps", "20", "--global-batch-size", "64",
                  "--examples", "2048", "--features", "16")
    assert "every step's ranks held disjoint examples" in out, out


def stopped_job(server, stream, stop):
    """Runs ddp_check.py on `stream` as a torchrun job without end; once
    its step 5 is done, stop(proc, lines so far) acts on it. The job's
    process and its whole output once it has ended."""
    proc = torchrun(server, os.path.join(HERE, "ddp_check.py"),
                    "--stream", stream, "--steps", "-1")
    lines = []
    try:
        assert read_until(proc, r"^step 5 ok$", lines), "".join(lines)
        stop(proc, lines)
        rest, _ = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, "".join(lines) + rest


def test_ctrl_c_stops_torchrun_and_its_ranks_cleanly(server):
    def ctrl_c(proc, lines):
        assert len(server.segments()) == 2
        # What a terminal's Ctrl-C does: SIGINT to the whole foreground group.
        os.killpg(proc.pid, signal.SIGINT)

    proc, out = stopped_job(server, "tr-sigint", ctrl_c)
    assert proc.returncode != 0, out
    assert wait_until(lambda: gone(proc.pid)), "a rank outlived torchrun"
    assert wait_until(lambda: server.segments() == []), server.segments()
    # No stuck worker, no torn daemon: a new job runs.
    run_job(server, os.path.join(HERE, "ddp_check.py"),
            "--stream", "tr-after-sigint", "--steps", "3")


def test_a_killed_rank_stops_the_job_and_frees_the_rings(server):
    def kill_rank_1(proc, lines):
        # Both ranks write to torchrun's one stdout: their lines may
        # interleave, so no anchors.
        pids = dict(re.findall(r"rank (\d) pid (\d+)", "".join(lines)))
        assert set(pids) == {"0", "1"}, "".join(lines)
        os.kill(int(pids["1"]), signal.SIGKILL)

    proc, out = stopped_job(server, "tr-kill", kill_rank_1)
    # torchrun reports the failed rank and stops the other one.
    assert proc.returncode != 0, out
    assert re.search(r"Signal 9|SIGKILL", out), out
    assert wait_until(lambda: gone(proc.pid)), "rank 0 outlived torchrun"
    assert wait_until(lambda: server.segments() == []), server.segments()


def test_torchrun_criteo1tb_through_algoperf_disjoint_complete(server, tmp_path):
    subprocess.run([sys.executable, os.path.join(
        REPO, "workloads", "criteo1tb", "make_criteo1tb.py"), "--out",
        str(tmp_path / "data" / "criteo1tb"), "--lines", "400",
        "--day23-lines", "30"], check=True)
    out = run_job(server, os.path.join(HERE, "criteo_ddp_check.py"),
                  "--steps", "6", "--global-batch-size", "64")
    assert "criteo: every global batch disjoint and complete" in out, out
    assert len(re.findall(r"^criteo \w+ step \d+ ok$", out, re.M)) == 12, out


def test_torchrun_librispeech_through_algoperf_drop_in(tmp_path,
                                                       librispeech_data):
    """Two ranks of AlgoPerf's LibriSpeech queues: every global batch of a
    train epoch disjoint and complete, the epoch AlgoPerf's utterances,
    the validation pass AlgoPerf's in order (reference/librispeech_ref.py)."""
    from helpers import run_reference
    s = Server(tmp_path)
    try:
        shutil.copytree(librispeech_data / "librispeech",
                        tmp_path / "data" / "librispeech")
        out = run_job(s, os.path.join(HERE, "librispeech_ddp_check.py"),
                      "--global-batch-size", "4", "--epoch", "16",
                      "--eval", "7")
        assert "librispeech ddp ok" in out, out
        data = librispeech_data / "librispeech"
        for split in ("train", "validation"):
            want = [line.split()[0] for line in run_reference(
                "librispeech_ref.py", data, split, 0, 0).split("\n") if line]
            got = re.findall(rf"^{split} ([0-9a-f]{{64}})$", out, re.M)
            if split == "train":
                assert sorted(got) == sorted(want)
            else:
                assert got == want
    finally:
        s.stop()


def test_torchrun_fastmri_through_algoperf_drop_in(tmp_path, fastmri_data):
    """Two ranks of AlgoPerf's fastMRI queues: every global batch of a train
    epoch disjoint and complete, and the slices' means those of AlgoPerf's
    transform (reference/fastmri_ref.py with TF): the train epoch as a
    multiset, the validation pass in order."""
    import numpy as np
    from helpers import run_reference
    ref = {}
    for split, sub in (("train", "train"), ("validation", "val")):
        files = sorted((fastmri_data / f"knee_singlecoil_{sub}").glob("*.h5"))
        run_reference("fastmri_ref.py", tmp_path / f"{split}.npz", split, 1, 2,
                      0, *files)
        ref[split] = np.load(tmp_path / f"{split}.npz")["mean"]
    g = 4
    epoch = len(ref["train"]) // g * g
    s = Server(tmp_path)
    try:
        shutil.copytree(fastmri_data, tmp_path / "data" / "fastmri")
        out = run_job(s, os.path.join(HERE, "fastmri_ddp_check.py"),
                      "--global-batch-size", str(g), "--epoch", str(epoch),
                      "--eval", str(len(ref["validation"])),
                      "--validation-files", "2")
        assert "fastmri ddp ok" in out, out
        for split in ("train", "validation"):
            got = [float(m) for m in re.findall(rf"^{split} (\S+)$", out, re.M)]
            want = [float(m) for m in ref[split]]
            if split == "train":
                # The epoch drops the last partial batch: each slice served
                # is one of AlgoPerf's, none twice.
                matched = [min(range(len(want)), key=lambda j: abs(want[j] - m))
                           for m in got]
                assert len(set(matched)) == len(got) == epoch
                want = [want[j] for j in matched]
            assert got == pytest.approx(want, rel=2e-6), split
    finally:
        s.stop()


def test_torchrun_ogbg_through_the_drop_in(server, ogbg_data, tmp_path):
    """AlgoPerf's ogbg through batchd.algoperf in a 2-rank DDP job: every
    global batch's slices disjoint and complete (ogbg_ddp_check.py)."""
    import shutil
    shutil.copytree(ogbg_data / "ogbg", tmp_path / "data" / "ogbg")
    out = run_job(server, os.path.join(HERE, "ogbg_ddp_check.py"),
                  "--steps", "6", "--global-batch", "16",
                  "--graphs-per-row", "4")
    assert "ogbg: every global batch disjoint and complete" in out, out
    assert len(re.findall(r"^ogbg step \d+ ok$", out, re.M)) == 6, out


def test_torchrun_finewebedu_lm_through_algoperf_disjoint_complete(server,
                                                                   tmp_path):
    from helpers import reference_python  # make_finewebedu_lm needs datasets
    subprocess.run([reference_python(), os.path.join(
        REPO, "workloads", "finewebedu_lm", "make_finewebedu_lm.py"),
        str(tmp_path / "data" / "finewebedu_lm"), "--train-rows", "40",
        "--val-rows", "40", "--shards", "2"], check=True, capture_output=True)
    out = run_job(server, os.path.join(HERE, "lm_ddp_check.py"),
                  "--steps", "4", "--global-batch-size", "16")
    assert "lm: every global batch disjoint and complete" in out, out
    assert len(re.findall(r"^lm \w+ step \d+ ok$", out, re.M)) == 8, out
