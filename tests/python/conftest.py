"""Fixtures shared by the Python suites: generated data sets, made once per
session or once per module, and daemons that serve them. A workload's own
set is described in its folder (workloads/<name>/test_data.py: the
fixture's name, how its generator makes it) and made a session fixture
here. A module that needs its own variant of a data set still makes it
itself (with the generators of helpers.py). Helpers that are not fixtures
live in helpers.py and batchd_daemon.py: no test module imports another."""

import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys

import pytest

from batchd_daemon import daemon_fixture
from helpers import IMAGENET_TOOL as IMAGENET_GENERATOR, REPO, WMT_TOOLS
from helpers import WORKLOADS, make_imagenet, make_wmt, run_generator
from helpers import workload_test_data


def _generated(root, name, make):
    """root/name made by make(path). With BATCHD_TEST_DATA set (scripts/
    test.sh sets it), the set is made once per run of scripts/test.sh, by the
    first session that needs it, in that directory (keyed by name and the
    generators' sources); each session then takes its own duplicate of
    those files: every pytest session of a CI run (Debian's, the venvs',
    PyPI torch's) gets the same bytes without generating them again, and
    no session sees another's."""
    out = root / name
    cache = os.environ.get("BATCHD_TEST_DATA")
    if not cache:
        make(out)
        return out
    digest = hashlib.sha256(name.encode())
    for tool in (sorted(glob.glob(os.path.join(WORKLOADS, "*", "make_*.py")))
                 + sorted(glob.glob(os.path.join(WORKLOADS, "*",
                                                 "test_data.py")))
                 + [os.path.join(WMT_TOOLS, "generate_wmt.py"),
                    os.path.join(WMT_TOOLS, "train_sentencepiece.py"),
                    os.path.join(REPO, "tests", "python", "conftest.py")]):
        with open(tool, "rb") as f:
            digest.update(f.read())
    os.makedirs(cache, exist_ok=True)
    kept = os.path.join(cache, f"{name}-{digest.hexdigest()[:16]}")
    with open(kept + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent sessions wait for the first
        if not os.path.isdir(kept):
            tmp = kept + ".part"
            shutil.rmtree(tmp, ignore_errors=True)
            make(tmp)
            os.rename(tmp, kept)
    shutil.copytree(kept, out, symlinks=True)
    return out


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory):
    """A data root with imagenet/ (4 classes x 6 train, x 3 val, ImageFolder
    and TFRecord shards, no odd files) and wmt/ (300 train, 90 validation
    and 10 test pairs in 2 TFDS shards, a 600-piece SentencePiece model)."""
    root = tmp_path_factory.mktemp("shared-data")
    _generated(root, "imagenet", lambda out: run_generator(
        IMAGENET_GENERATOR, out, "--classes", "4", "--per-class", "6",
        "--val-per-class", "3", "--no-odd"))
    _generated(root, "wmt", lambda out: make_wmt(
        out, train=300, validation=90, test=10, shards=2, seed=5,
        vocab_size=600))
    return root


# A daemon serving shared_data, with a cache of its own.
shared_daemon = daemon_fixture("shared_data")


@pytest.fixture(scope="module")
def algoperf_data(tmp_path_factory):
    """The AlgoPerf drop-in's and the trainers' small sets: imagenet/ (2
    classes x 4 train, x 3 val, ImageFolder only, no odd files) and wmt/
    (200 train, 20 validation and 10 test pairs in one TFDS shard, a
    500-piece SentencePiece model)."""
    root = tmp_path_factory.mktemp("algoperf")
    _generated(root, "algoperf-imagenet", lambda out: make_imagenet(
        out, "--classes", 2, "--per-class", 4, "--val-per-class", 3,
        "--no-odd", "--no-tfrecord"))
    _generated(root, "algoperf-wmt", lambda out: make_wmt(
        out, train=200, validation=20, test=10, shards=1, seed=3,
        vocab_size=500))
    os.rename(root / "algoperf-imagenet", root / "imagenet")
    os.rename(root / "algoperf-wmt", root / "wmt")
    return root


@pytest.fixture
def algoperf_server(algoperf_data, tmp_path):
    """A Server (batchd_daemon.py) whose data root holds a copy of
    algoperf_data: the daemon's data root is tmp_path/data, and a symlink
    out of it would be refused."""
    from batchd_daemon import Server
    s = Server(tmp_path)
    for name in ("imagenet", "wmt"):
        shutil.copytree(algoperf_data / name, tmp_path / "data" / name)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def imagenet_clean_and_odd(tmp_path_factory):
    """clean/: 4 classes x 6 train, x 3 val, with TFRecord shards
    (clean/tfds); odd/: the same without shards, with grayscale, CMYK,
    PNG-named and truncated files among them."""
    root = tmp_path_factory.mktemp("imagenet")
    for name, extra in (("clean", ["--no-odd", "--val-per-class", "3"]),
                        ("odd", ["--no-tfrecord"])):
        _generated(root, name, lambda out, extra=extra: make_imagenet(
            out, "--classes", 4, "--per-class", 6, *extra))
    return root


@pytest.fixture
def server(tmp_path):
    """A Server (batchd_daemon.py) of one test's own, its data root
    tmp_path/data. A module's own `server` fixture takes its place."""
    from batchd_daemon import Server
    s = Server(tmp_path)
    yield s
    s.stop()


def _runner(kind, folder):
    """run(script, *args): a script of `folder` under the interpreter the
    workload's test data names: "this" one, the "generator" one
    (helpers.generator_python; the test skips where none has what the
    generators import) or the "reference" venv's."""
    def run(script, *args):
        path = os.path.join(folder, script)
        if kind == "generator":
            run_generator(path, *args)
            return
        if kind == "reference":
            from helpers import reference_python
            subprocess.run([reference_python(), path, *map(str, args)],
                           check=True, capture_output=True)
            return
        subprocess.run([sys.executable, path, *map(str, args)], check=True)
    return run


def _workload_fixture(name, data):
    """The session fixture workloads/<name>/test_data.py describes: its set,
    made by its make(out, run) once (_generated), as its folder or a root
    holding <name>/."""
    @pytest.fixture(scope="session", name=data.FIXTURE)
    def fixture(tmp_path_factory):
        root = tmp_path_factory.mktemp(f"{name}-data")
        folder = _generated(root, name, lambda out: data.make(
            out, _runner(data.PYTHON, os.path.join(WORKLOADS, name))))
        return root if data.RETURNS == "root" else folder
    fixture.__doc__ = data.__doc__
    return fixture


for _name, _data in workload_test_data().items():
    globals()[f"_fixture_{_name}"] = _workload_fixture(_name, _data)
