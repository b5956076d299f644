"""Fixtures shared by the Python suites: generated data sets, made once per
session or once per module, and daemons that serve them. A module that
needs its own variant of a data set still makes it itself (with the
generators of helpers.py). Helpers that are not fixtures live in
helpers.py and batchd_daemon.py: no test module imports another."""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

import pytest

from helpers import IMAGENET_TOOL as IMAGENET_GENERATOR, REPO, WMT_TOOLS
from helpers import LIBRISPEECH_GENERATOR, make_imagenet, make_wmt
from helpers import run_generator

OGBG_GENERATOR = os.path.join(REPO, "workloads", "ogbg", "make_ogbg.py")


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
    for tool in (IMAGENET_GENERATOR, LIBRISPEECH_GENERATOR, OGBG_GENERATOR,
                 os.path.join(WMT_TOOLS, "generate_wmt.py"),
                 os.path.join(WMT_TOOLS, "train_sentencepiece.py"),
                 CRITEO_GENERATOR, LM_GENERATOR, FASTMRI_GENERATOR,
                 os.path.join(REPO, "tests", "python", "conftest.py")):
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


CRITEO_GENERATOR = os.path.join(REPO, "workloads", "criteo1tb",
                                "make_criteo1tb.py")


@pytest.fixture(scope="session")
def criteo_data(tmp_path_factory):
    """A generated criteo1tb set (make_criteo1tb.py, seed 4): train days 0,
    1 and 22 of two files each, 600 + 400 lines a day (3000 lines, several
    64 KiB blocks a file); day 23's 36 files of 40 lines. Its folder."""
    root = tmp_path_factory.mktemp("criteo-data")
    return _generated(root, "criteo1tb", lambda out: subprocess.run(
        [sys.executable, CRITEO_GENERATOR, "--out", str(out), "--lines",
         "600", "--day23-lines", "40", "--seed", "4"], check=True))


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


@pytest.fixture(scope="session")
def librispeech_data(tmp_path_factory):
    """A root with librispeech/: AlgoPerf's pre-processed layout, 6 + 6 + 4
    train, 4 + 3 validation and 5 test utterances (workloads/librispeech/
    make_librispeech.py; each subset's first at 320,000 samples)."""
    root = tmp_path_factory.mktemp("librispeech-data")
    _generated(root, "librispeech", lambda out: run_generator(
        LIBRISPEECH_GENERATOR, out, "--seed", 4, "--per-subset", 6, 6, 4, 4,
        3, 5))
    return root


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


@pytest.fixture(scope="session")
def ogbg_data(tmp_path_factory):
    """A data root with ogbg/ogbg_molpcba/0.1.3/ (workloads/ogbg/
    make_ogbg.py: 240 train graphs in 8 shards, 60 validation, 50 test)."""
    root = tmp_path_factory.mktemp("ogbg-data")
    _generated(root, "ogbg", lambda out: run_generator(
        OGBG_GENERATOR, out, "--train", 240, "--validation", 60, "--test", 50,
        "--seed", 7))
    return root


LM_GENERATOR = os.path.join(REPO, "workloads", "finewebedu_lm",
                            "make_finewebedu_lm.py")


@pytest.fixture(scope="session")
def lm_data(tmp_path_factory):
    """A generated finewebedu_lm set (make_finewebedu_lm.py in the reference
    venv, which has `datasets`; seed 3): train/ of 60 rows of 2,049 tokens
    in 3 shards (119 windows), val/ of 14 rows in 3 shards (27 windows).
    Its folder."""
    from helpers import reference_python
    root = tmp_path_factory.mktemp("lm-data")
    return _generated(root, "finewebedu_lm", lambda out: subprocess.run(
        [reference_python(), LM_GENERATOR, str(out), "--train-rows", "60",
         "--val-rows", "14", "--shards", "3", "--seed", "3"], check=True,
        capture_output=True))


FASTMRI_GENERATOR = os.path.join(REPO, "workloads", "fastmri",
                                 "make_fastmri.py")


@pytest.fixture(scope="session")
def fastmri_data(tmp_path_factory):
    """A generated fastmri set (make_fastmri.py in the reference venv, which
    has h5py; seed 2): knee_singlecoil_train/ of 5 volumes and
    knee_singlecoil_val/ of 3, 2 or 3 slices each, widths 368, 372 and 369,
    every second file chunked and compressed. Its folder."""
    from helpers import reference_python
    root = tmp_path_factory.mktemp("fastmri-data")
    return _generated(root, "fastmri", lambda out: subprocess.run(
        [reference_python(), FASTMRI_GENERATOR, str(out), "--train", "5",
         "--val", "3", "--seed", "2"], check=True, capture_output=True))
