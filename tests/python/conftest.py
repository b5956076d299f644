"""Fixtures shared by the Python suites: generated data sets, made once per
session or once per module, and daemons that serve them. A module that
needs its own variant of a data set still makes it itself (with the
generators of helpers.py). Helpers that are not fixtures live in
helpers.py and batchd_daemon.py: no test module imports another."""

import functools
import os
import shutil
import subprocess
import sys

import pytest

from helpers import IMAGENET_TOOL as IMAGENET_GENERATOR, WMT_TOOLS
from helpers import make_imagenet, make_wmt


GENERATOR_MODULES = ("numpy", "PIL", "skimage", "sentencepiece")


def _has_modules(python):
    probe = "import " + ", ".join(GENERATOR_MODULES)
    try:
        return subprocess.run([python, "-c", probe],
                              capture_output=True).returncode == 0
    except OSError:
        return False


@functools.lru_cache(maxsize=None)
def generator_python():
    """The interpreter that runs the data generators: this one when it has
    what they import, else Debian's (the generators are scripts, so the
    suite under test need not carry Pillow, scikit-image and SentencePiece
    to be tested against their data). None when neither has them."""
    for python in (sys.executable, "/usr/bin/python3"):
        if _has_modules(python):
            return python
    return None


def _run(*args):
    python = generator_python()
    if python is None:
        pytest.skip("no interpreter here has the data generators' "
                    + ", ".join(GENERATOR_MODULES))
    result = subprocess.run([python, *map(str, args)], capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed "
                           f"(exit {result.returncode}):\n{result.stderr}")


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory):
    """A data root with imagenet/ (4 classes x 6 train, x 3 val, ImageFolder
    and TFRecord shards, no odd files) and wmt/ (300 train, 90 validation
    and 10 test pairs in 2 TFDS shards, a 600-piece SentencePiece model)."""
    root = tmp_path_factory.mktemp("shared-data")
    _run(IMAGENET_GENERATOR, root / "imagenet", "--classes", "4",
         "--per-class", "6", "--val-per-class", "3", "--no-odd")
    wmt = root / "wmt"
    _run(os.path.join(WMT_TOOLS, "generate_wmt.py"), "--out", wmt, "--train",
         "300", "--validation", "90", "--test", "10", "--shards", "2",
         "--seed", "5")
    _run(os.path.join(WMT_TOOLS, "train_sentencepiece.py"), "--data", wmt,
         "--vocab-size", "600", "--threads", "1")
    return root


@pytest.fixture
def shared_daemon(shared_data, tmp_path):
    """A daemon serving shared_data, with a cache of its own."""
    from batchd_daemon import Daemon
    d = Daemon(shared_data, tmp_path / "batchd.log")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def algoperf_data(tmp_path_factory):
    """The AlgoPerf drop-in's and the trainers' small sets: imagenet/ (2
    classes x 4 train, x 3 val, ImageFolder only, no odd files) and wmt/
    (200 train, 20 validation and 10 test pairs in one TFDS shard, a
    500-piece SentencePiece model)."""
    root = tmp_path_factory.mktemp("algoperf")
    make_imagenet(root / "imagenet", "--classes", 2, "--per-class", 4,
                  "--val-per-class", 3, "--no-odd", "--no-tfrecord")
    make_wmt(root / "wmt", train=200, validation=20, test=10, shards=1,
             seed=3, vocab_size=500)
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
        make_imagenet(root / name, "--classes", 4, "--per-class", 6, *extra)
    return root


@pytest.fixture
def server(tmp_path):
    """A Server (batchd_daemon.py) of one test's own, its data root
    tmp_path/data. A module's own `server` fixture takes its place."""
    from batchd_daemon import Server
    s = Server(tmp_path)
    yield s
    s.stop()
