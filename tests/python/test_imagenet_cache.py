"""The imagenet index cache through real daemons: a restarted daemon takes
the ImageFolder listing and the TFRecord offsets from its --cache-dir (its
log says so) and serves the same batches; a file added to a class folder
is seen by the next daemon.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_imagenet_cache.py
"""

import os
import shutil
import time

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("PIL")
pytest.importorskip("skimage")  # the generator's photos

import batchd  # noqa: E402
from batchd_daemon import Daemon  # noqa: E402
from helpers import make_imagenet  # noqa: E402

# The sources store an index only when its inputs are this old (they may
# still change within their timestamps' granularity).
SETTLE_S = 2.1


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet")
    make_imagenet(root / "clean", "--classes", 3, "--per-class", 2,
                  "--val-per-class", 3, "--no-odd")
    time.sleep(SETTLE_S)
    return root


def batches(daemon, stream, data, split):
    out = []
    with batchd.Loader(stream, 4, workload="imagenet", data=data, split=split,
                       server=daemon.address, format="numpy",
                       connect_timeout=10.0, timeout=60.0) as ld:
        for batch in ld:
            out.append((np.array(batch["inputs"]), np.array(batch["targets"]),
                        float(np.array(batch["weights"]).sum())))
    return out


def run(data_root, cache, log):
    """Every val batch from the ImageFolder tree and from the shards, and
    the daemon's log."""
    d = Daemon(data_root, log, args=("--cache-dir", str(cache)))
    try:
        folder = batches(d, "folder", "clean", "val")
        shards = batches(d, "shards", "clean/tfds", "validation")
    finally:
        d.stop()
    return folder, shards, open(log).read()


def same(a, b):
    return len(a) == len(b) and all(
        np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])
        for x, y in zip(a, b))


def test_a_restarted_daemon_takes_the_index_from_the_cache(data_root,
                                                           tmp_path):
    cache = tmp_path / "cache"
    folder, shards, log = run(data_root, cache, tmp_path / "first.log")
    assert "stored in the cache" in log, log
    assert "0 from the cache" in log, log
    assert len(folder) == 3 and same(folder, shards)

    folder2, shards2, log = run(data_root, cache, tmp_path / "second.log")
    assert "clean/val from the cache" in log, log
    assert "2 from the cache, 0 scanned" in log, log
    assert same(folder, folder2) and same(shards, shards2)

    # A file added to a class folder: listed again, one example more.
    val = data_root / "clean" / "val"
    cls = sorted(os.listdir(val))[0]
    first = sorted(os.listdir(val / cls))[0]
    shutil.copy(val / cls / first, val / cls / "zz_added.JPEG")
    try:
        folder3, _, log = run(data_root, cache, tmp_path / "third.log")
        assert "clean/val from the cache" not in log, log
        assert sum(b[2] for b in folder) == 9
        assert sum(b[2] for b in folder3) == 10
    finally:
        os.unlink(val / cls / "zz_added.JPEG")
