"""A far resume of a wmt train stream (issue 10, break 2): counting the
epochs before a far step must hold no worker of the shared pool, so that
another stream keeps being served, and must not hold up SIGTERM; a step
beyond what the data can mean is refused at once.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_hardening.py
"""

import signal
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sentencepiece")

import batchd  # noqa: E402
from batchd_daemon import Daemon  # noqa: E402
from helpers import make_wmt  # noqa: E402

GLOBAL_BATCH = 16


@pytest.fixture
def wmt_daemon(tmp_path):
    data = tmp_path / "data" / "wmt"
    make_wmt(data, train=300, validation=10, test=10, shards=1, seed=5,
             vocab_size=600)
    # One worker thread: a preparation that held it would stop every stream.
    d = Daemon(tmp_path / "data", tmp_path / "batchd.log", threads=1)
    yield d
    d.stop()


def wmt_loader(daemon, name, start_step):
    return batchd.Loader(name, GLOBAL_BATCH, workload="wmt", data="wmt",
                         split="train", world_size=1, rank=0, seed=3,
                         start_step=start_step, server=daemon.address,
                         connect_timeout=30.0, timeout=5.0,
                         options={"index_threads": 1})


def test_far_resume_neither_stalls_another_stream_nor_sigterm(wmt_daemon):
    # Beyond what 300 pairs can mean: refused when asked, not spun on.
    for step in (2**62, 2**64 - 2):
        with pytest.raises(batchd.Error, match="start_step|epochs"):
            wmt_loader(wmt_daemon, f"wmt-huge-{step % 1000}", step)
    # Far, but within the bound: thousands of epochs to count first.
    far = wmt_loader(wmt_daemon, "wmt-far", 150_000)
    other = batchd.Loader("synthetic-near", 8, world_size=1, rank=0,
                          server=wmt_daemon.address, connect_timeout=30.0,
                          timeout=30.0,
                          options={"examples": "1000", "payload_bytes": "64"})
    for step in range(30):
        _, info = other.next_batch()
        assert info.step == step
    start = time.monotonic()
    wmt_daemon.proc.send_signal(signal.SIGTERM)
    assert wmt_daemon.proc.wait(timeout=30) == 0
    assert time.monotonic() - start < 30
    del far, other
