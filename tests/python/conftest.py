"""Fixtures shared by the Python suites: generated data sets, made once per
session, and a daemon that serves them. A module that needs its own
variant of a data set still makes it itself."""

import functools
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
IMAGENET_GENERATOR = os.path.join(ROOT, "workloads", "imagenet",
                                  "make_imagenet.py")
WMT_TOOLS = os.path.join(ROOT, "workloads", "wmt", "tools")


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
