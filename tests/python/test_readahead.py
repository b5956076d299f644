"""Read-ahead through a daemon: the batches are byte for byte those of a
daemon without read-ahead (ImageFolder, TFRecord shards, evaluation, a
resume point, corrupt files and their substitutes), and the metrics show the
reads made ahead. Speed is measured in bench/readahead_bench.sh, not here.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_readahead.py
"""

import os
import subprocess

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("PIL")
pytest.importorskip("skimage")  # the generator's photos

import batchd  # noqa: E402
from batchd_daemon import Daemon, free_port, metrics  # noqa: E402

# The labels of stream "s" in /metrics: streams are keyed by owner and name.
S = f'{{stream="s",owner="{os.getuid()}"}}'

DEFAULT_BUDGET = 256 << 20


@pytest.fixture(scope="module")
def data_root(imagenet_clean_and_odd):  # conftest.py
    return imagenet_clean_and_odd


def run(data_root, tmp_path, budget, data, split, steps, world=2, start=0,
        options=None, name="s"):
    """The first `steps` global batches (ranks concatenated) and the
    daemon's metrics afterwards."""
    port = free_port()
    d = Daemon(data_root, tmp_path / f"{name}-{budget}.log",
               args=["--readahead-bytes", str(budget),
                     "--metrics-listen", f"127.0.0.1:{port}"])
    try:
        lds = [batchd.Loader(name, 8, workload="imagenet", data=data,
                             split=split, server=d.address, world_size=world,
                             rank=r, seed=3, start_step=start,
                             options=options or {}, connect_timeout=10.0,
                             timeout=60.0)
               for r in range(world)]
        per_rank = []
        for ld in lds:
            got = []
            while len(got) < steps:
                try:
                    batch = next(ld)  # across epochs
                except StopIteration:
                    break
                got.append((batch["inputs"].numpy().copy(),
                            batch["targets"].numpy().copy()))
            per_rank.append(got)
        m = metrics(port)
        for ld in lds:
            ld.close()
        batches = [(np.concatenate([p[k][0] for p in per_rank]),
                    np.concatenate([p[k][1] for p in per_rank]))
                   for k in range(min(len(p) for p in per_rank))]
        return batches, m
    finally:
        d.stop()


@pytest.mark.parametrize("data,split,steps,start", [
    ("clean", "train", 6, 2),       # ImageFolder, from a resume point
    ("clean/tfds", "train", 6, 2),  # TFRecord shards
    ("clean", "val", 2, 0),         # evaluation: in order, padded
    ("odd", "train", 6, 1),         # corrupt files: the same substitutes
])
def test_same_batches_with_and_without_readahead(data_root, tmp_path, data,
                                                 split, steps, start):
    off, m_off = run(data_root, tmp_path, 0, data, split, steps, start=start)
    assert len(off) == steps
    assert m_off["batchd_readahead_budget_bytes"] == 0
    assert m_off.get('batchd_readahead_reads_total' + S, 0) == 0
    # The default budget, and one so small that a rank holds one example.
    for budget in (DEFAULT_BUDGET, 1):
        on, m_on = run(data_root, tmp_path, budget, data, split, steps,
                       start=start)
        assert len(on) == steps
        for k in range(steps):
            assert np.array_equal(off[k][0], on[k][0]), (budget, k)
            assert np.array_equal(off[k][1], on[k][1]), (budget, k)
        assert m_on["batchd_readahead_budget_bytes"] == budget
        if split == "train":
            # Reads were made ahead and decoded from.
            assert m_on['batchd_readahead_reads_total' + S] > 0
            assert m_on['batchd_readahead_hits_total' + S] > 0
        if data == "odd":
            assert m_on['batchd_decode_errors_total' + S] > 0


def test_read_ahead_depth_is_bounded_by_the_budget(data_root, tmp_path):
    # A budget of 3 typical files over 2 ranks: each rank holds ~1.5 files.
    size = max(os.path.getsize(os.path.join(dp, f))
               for dp, _, fs in os.walk(data_root / "clean" / "train")
               for f in fs)
    _, m = run(data_root, tmp_path, 3 * size, "clean", "train", 10)
    assert m['batchd_readahead_reads_total' + S] > 0
    # At most the budget, counted over both ranks, is held at any time.
    held = (m['batchd_readahead_buffered_bytes' + S] +
            m['batchd_readahead_in_flight_bytes' + S])
    assert held <= 3 * size
    assert m['batchd_readahead_depth_examples' + S] <= 6


def test_batchctl_status_shows_each_streams_read_ahead(data_root, tmp_path):
    from batchd_daemon import binary
    d = Daemon(data_root, tmp_path / "status.log",
               args=["--readahead-bytes", str(DEFAULT_BUDGET)])
    try:
        ld = batchd.Loader("s", 8, workload="imagenet", data="clean",
                           split="train", server=d.address, seed=3,
                           connect_timeout=10.0, timeout=60.0)
        for _, _ in zip(range(3), ld):
            pass
        out = subprocess.run([binary("batchctl"), "status", "--server",
                              d.address], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        ld.close()
    finally:
        d.stop()
    assert "read-ahead 256.0 MiB (" in out.splitlines()[0]
    line = [l for l in out.splitlines() if l.startswith("  read-ahead  depth")]
    assert len(line) == 1, out
    hits = int(line[0].split("  hits ")[1].split()[0])
    sync = int(line[0].split("  sync reads ")[1].split()[0])
    assert hits + sync >= 3 * 8  # every example decoded so far was counted
