"""The example DDP trainers end to end: 2 ranks of each over Gloo, started by
the trainer's own launcher, reading from a real daemon. Each rank
all_gathers its example ids (imagenet) or cursors (wmt) every step and the
job fails if a global batch's slices overlap or leave a gap; the loss must
stay finite.

    BATCHD_BIN=<build>/server/batchd /usr/bin/python3 -m pytest tests/python/test_trainers.py
"""

import math
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(
    os.environ.get("BATCHD_BIN", "/nonexistent/server/batchd"))),
    "examples")


def trainer(name):
    path = os.path.join(EXAMPLES, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} not built (libtorch or libgloo-dev missing)")
    return path


@pytest.fixture
def server(algoperf_server):  # conftest.py: the small ImageNet and WMT sets
    return algoperf_server


def run(cmd, server):
    env = dict(os.environ, BATCHD_SERVER=server.address)
    env.pop("RANK", None)  # the trainers start their own ranks
    p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    done = [l for l in p.stdout.splitlines() if " done: " in l]
    assert done, p.stdout
    assert "every step disjoint and complete" in done[0]
    m = re.search(r"steps (\S+), of the last (\S+),", done[0])
    assert m, done[0]
    for loss in m.groups():
        assert math.isfinite(float(loss)), done[0]
    return done[0]


def test_resnet_ranks_hold_disjoint_complete_slices(server):
    run([trainer("imagenet_resnet_ddp"), "--nproc", "2", "--data", "imagenet",
         "--global-batch-size", "8", "--steps", "3", "--classes", "2",
         "--image-size", "64", "--log-every", "1"], server)


def test_transformer_ranks_hold_disjoint_complete_slices(server):
    run([trainer("wmt_transformer_ddp"), "--nproc", "2", "--data", "wmt",
         "--vocab-size", "500", "--global-batch-size", "4", "--steps", "3",
         "--d-model", "32", "--layers", "1", "--log-every", "1"], server)


def test_a_job_of_another_world_size_is_refused_not_hung(server):
    # Two jobs that disagree on world size can't share a stream: the second
    # is refused, and the launcher reports the failure instead of hanging.
    run([trainer("wmt_transformer_ddp"), "--nproc", "2", "--data", "wmt",
         "--vocab-size", "500", "--global-batch-size", "4", "--steps", "1",
         "--d-model", "32", "--layers", "1", "--stream", "shared"], server)
    env = dict(os.environ, BATCHD_SERVER=server.address)
    env.pop("RANK", None)
    p = subprocess.run([trainer("wmt_transformer_ddp"), "--nproc", "1",
                        "--data", "wmt", "--vocab-size", "500",
                        "--global-batch-size", "4", "--steps", "1",
                        "--stream", "shared"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "world_size" in p.stderr


def test_algoperf_example_trains_through_the_drop_in(server):
    # The Python example: torch DDP (Gloo here) fed by batchd.algoperf,
    # two ranks started the way torchrun would; with this interpreter's
    # torch (scripts/test-pip.sh's numpy-only venv has none).
    pytest.importorskip("torch")
    env = dict(os.environ, BATCHD_SERVER=server.address)
    env.pop("RANK", None)
    p = subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", "launch.py"),
         "--nproc", "2", "--",
         os.path.join(REPO, "examples", "algoperf_ddp.py"),
         "--workload", "imagenet", "--data", "imagenet", "--image-size", "64",
         "--classes", "2", "--global-batch-size", "8", "--steps", "3"],
        env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"loss (\S+) -> (\S+),", p.stdout)
    assert m, p.stdout
    assert all(math.isfinite(float(x)) for x in m.groups())


@pytest.mark.parametrize("name", ["imagenet_resnet_ddp", "wmt_transformer_ddp"])
def test_trainer_flags_are_checked_before_anything_starts(name):
    path = trainer(name)
    env = dict(os.environ)
    env.pop("RANK", None)

    def flags(*args):
        return subprocess.run([path, *args], env=env, capture_output=True,
                              text=True, timeout=60)

    for bad in (["--steps", "ten"], ["--global-batch-size", "0"],
                ["--nproc", "-1"], ["--lr", "fast"]):
        p = flags(*bad)
        assert p.returncode == 2, (bad, p.stdout, p.stderr)
        assert bad[0] in p.stderr, (bad, p.stderr)
    p = flags("--no-such-flag")
    assert p.returncode == 2 and "--no-such-flag" in p.stderr, p.stderr
    p = flags("--help")
    assert p.returncode == 0, p.stderr
    for flag in ("--server", "--global-batch-size", "--steps", "--nproc",
                 "--no-check"):
        assert flag in p.stdout, p.stdout
