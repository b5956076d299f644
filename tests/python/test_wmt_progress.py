"""Progress while a wmt train stream indexes, with a real daemon whose
length pass is slowed by a test hook ($BATCHD_TEST_WMT_INDEX_DELAY_US):
`batchctl status` shows what is being indexed and how far, the log says so,
and a Loader whose wait times out names the indexing.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_wmt_progress.py
"""

import re
import subprocess
import time

import pytest

pytest.importorskip("sentencepiece")

import batchd  # noqa: E402
from batchd_daemon import Daemon, binary  # noqa: E402
from helpers import step_rows  # noqa: E402

PAIRS = 300  # train pairs of shared_data's wmt/
DELAY_US = 30000  # per pair: a pass of about 9 s with one thread


@pytest.fixture(scope="module")
def data_root(shared_data):  # conftest.py
    return shared_data


def loader(daemon, timeout):
    return batchd.Loader("indexing", 16, workload="wmt", data="wmt",
                         split="train", seed=3, server=daemon.address,
                         format="numpy", connect_timeout=10.0,
                         timeout=timeout,
                         options={"index_threads": 1, "source": "text"})


def status_text(daemon):
    return subprocess.run([binary("batchctl"), "status", "--server",
                           daemon.address], check=True, capture_output=True,
                          text=True).stdout


def test_an_indexing_stream_says_what_it_indexes(data_root, tmp_path,
                                                 monkeypatch):
    monkeypatch.setenv("BATCHD_TEST_WMT_INDEX_DELAY_US", str(DELAY_US))
    log = tmp_path / "daemon.log"
    daemon = Daemon(data_root, log, hooks=True)
    try:
        waiting = loader(daemon, timeout=1.0)
        try:
            with pytest.raises(Exception) as failed:
                waiting.next_batch()
        finally:
            waiting.close()
        message = str(failed.value)
        assert "no batch from batchd" in message
        assert re.search(r"the server says: indexing wmt lengths \d+/300 "
                         r"pairs", message), message

        line = re.compile(r"\n  indexing wmt lengths (\d+)/300 pairs "
                          r"\((\d+)%\)")
        text = status_text(daemon)
        shown = line.search(text)
        assert shown, text
        assert int(shown.group(1)) <= PAIRS
        streams = {s["spec"]["name"]: s for s in daemon.status()["streams"]}
        indexing = streams["indexing"]["indexing"]
        assert indexing["what"] == "wmt lengths"
        assert indexing["unit"] == "pairs"
        assert int(indexing["total"]) == PAIRS

        assert re.search(r"event=indexing stream=indexing .*total=300",
                         open(log).read())

        # Once the pass is done, batches flow and nothing is indexing.
        served = loader(daemon, timeout=120.0)
        try:
            batch, _ = served.next_batch()
            assert batch["inputs"].shape[0] == 16
        finally:
            served.close()
        deadline = time.monotonic() + 30
        while line.search(status_text(daemon)):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        daemon.stop()


def rows_of(daemon, name, steps, timeout):
    loader = batchd.Loader(name, 16, workload="wmt", data="wmt",
                           split="train", seed=3, server=daemon.address,
                           format="numpy", connect_timeout=10.0,
                           timeout=timeout,
                           options={"index_threads": 1, "source": "text",
                                    "max_length": 32})
    try:
        return step_rows(loader, steps, "inputs", "targets_segmentation")
    finally:
        loader.close()


def test_first_batches_come_while_the_length_pass_runs(data_root, tmp_path,
                                                       monkeypatch):
    # Windows of 32 pairs: the first batch needs a window's lengths (~1 s
    # at DELAY_US a pair), the pass all 300 (~9 s).
    monkeypatch.setenv("BATCHD_TEST_WMT_INDEX_DELAY_US", str(DELAY_US))
    daemon = Daemon(data_root, tmp_path / "slow.log", hooks=True,
                    args=("--cache-dir", str(tmp_path / "cache")))
    try:
        early = rows_of(daemon, "early", 2, timeout=60.0)
        streams = {s["spec"]["name"]: s for s in daemon.status()["streams"]}
        indexing = streams["early"].get("indexing")
        assert indexing, "the first batches came only after the pass"
        assert int(indexing["done"]) < PAIRS
    finally:
        daemon.stop()
    # The same rows from a daemon that indexes first (no cache, no delay).
    monkeypatch.delenv("BATCHD_TEST_WMT_INDEX_DELAY_US")
    plain = Daemon(data_root, tmp_path / "plain.log")
    try:
        assert rows_of(plain, "plain", 2, timeout=60.0) == early
    finally:
        plain.stop()
