"""Read-ahead of WMT TFDS records through a daemon: train rows (packed, from
a resume point) and validation rows are byte for byte those of a daemon
without read-ahead, and the metrics show that pairs were read ahead.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_wmt_readahead.py
"""

import os

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("torch")
pytest.importorskip("sentencepiece")

import batchd  # noqa: E402
from batchd_daemon import Daemon, free_port, metrics  # noqa: E402
from helpers import make_wmt  # noqa: E402

# The labels of stream "s" in /metrics: streams are keyed by owner and name.
S = f'{{stream="s",owner="{os.getuid()}"}}'

DEFAULT_BUDGET = 256 << 20


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("wmt-ra")
    data = root / "wmt"
    make_wmt(data, train=400, validation=60, test=10, shards=3, seed=7,
             vocab_size=600)
    return root


def run(data_root, tmp_path, budget, split, steps, start=0):
    """The first `steps` batches of each of 2 ranks, and the metrics."""
    port = free_port()
    # No cache: rows made from stored token ids read no records, and the
    # read-ahead of records is what is tested here.
    d = Daemon(data_root, tmp_path / f"{split}-{budget}.log",
               args=["--readahead-bytes", str(budget),
                     "--metrics-listen", f"127.0.0.1:{port}",
                     "--cache-dir", ""])
    try:
        lds = [batchd.Loader("s", 8, workload="wmt", data="wmt", split=split,
                             server=d.address, world_size=2, rank=r, seed=3,
                             start_step=start,
                             options={"index_threads": 1, "source": "tfds"},
                             connect_timeout=10.0, timeout=60.0)
               for r in range(2)]
        got = []
        for ld in lds:
            rows = []
            for batch in ld:
                rows.append({k: v.numpy().copy() for k, v in batch.items()})
                if len(rows) == steps:
                    break
            got.append(rows)
        m = metrics(port)
        for ld in lds:
            ld.close()
        return got, m
    finally:
        d.stop()


@pytest.mark.parametrize("split,steps,start", [
    ("train", 6, 2),       # packed rows, from a resume point
    ("validation", 8, 0),  # one pass, the last batch padded
])
def test_same_rows_with_and_without_readahead(data_root, tmp_path, split,
                                              steps, start):
    off, m_off = run(data_root, tmp_path, 0, split, steps, start)
    assert m_off.get('batchd_readahead_reads_total' + S, 0) == 0
    assert all(len(rows) > 1 for rows in off)
    for budget in (DEFAULT_BUDGET, 1):
        on, m_on = run(data_root, tmp_path, budget, split, steps, start)
        assert [len(r) for r in on] == [len(r) for r in off]
        for rank, (a, b) in enumerate(zip(off, on)):
            for k, (x, y) in enumerate(zip(a, b)):
                assert x.keys() == y.keys()
                for name in x:
                    assert np.array_equal(x[name], y[name]), (budget, rank, k,
                                                              name)
        assert m_on['batchd_readahead_reads_total' + S] > 0
        if budget == DEFAULT_BUDGET:
            assert m_on['batchd_readahead_hits_total' + S] > 0
