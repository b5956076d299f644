"""The wmt workload's persistent cache with real daemons: a restarted daemon
serves the same train rows without tokenizing (its log says how many pairs
its length pass tokenized), a corrupted entry is rebuilt with a warning,
two daemons sharing one cache directory build the lengths once, and rows
are the same with the cache off.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_wmt_cache.py
"""

import os
import re
import threading
import time

import pytest

pytest.importorskip("sentencepiece")

import batchd  # noqa: E402
from batchd_daemon import Daemon  # noqa: E402
from helpers import step_rows  # noqa: E402

GLOBAL_BATCH = 16
PAIRS = 300  # train pairs of shared_data's wmt/
KEYS = ("inputs", "targets", "inputs_segmentation")


@pytest.fixture(scope="module")
def data_root(shared_data):  # conftest.py
    return shared_data


def train_rows(daemon, stream, steps=6, threads=1):
    loader = batchd.Loader(stream, GLOBAL_BATCH, workload="wmt", data="wmt",
                           split="train", seed=3, server=daemon.address,
                           format="numpy", connect_timeout=10.0, timeout=120.0,
                           options={"index_threads": threads,
                                    "source": "text"})
    rows = step_rows(loader, steps, *KEYS)
    loader.close()
    return rows


LENGTHS = re.compile(r"event=wmt_lengths pairs=\d+ tokenized=(\d+) "
                     r"first_windows=(\d+) from=(\S+)")


def tokenized(log_path):
    """Pairs each workload that ended its length pass tokenized for their
    lengths (its pass's and those of the first windows it served before)."""
    return [int(a) + int(b) for a, b, _ in
            LENGTHS.findall(open(log_path).read())]


def wait_for_passes(logs):
    """Until every daemon's length pass has ended (it ends whether or not a
    stream reads; a daemon stopped before stores only part of it), within a
    bound."""
    deadline = time.monotonic() + 120
    for log in logs:
        while not LENGTHS.search(open(log).read()):
            assert time.monotonic() < deadline, open(log).read()
            time.sleep(0.05)


def run(data_root, tmp_path, name, cache, threads=1):
    log = tmp_path / f"{name}.log"
    daemon = Daemon(data_root, log, args=("--cache-dir", str(cache)))
    try:
        rows = train_rows(daemon, f"wmtcache-{name}", threads=threads)
        wait_for_passes([log])
    finally:
        daemon.stop()
    return rows, tokenized(log), open(log).read()


@pytest.mark.parametrize("threads", [1, 2])
def test_restart_serves_the_same_rows_without_tokenizing(data_root, tmp_path,
                                                         threads):
    cache = tmp_path / "cache"
    cold, cold_passes, _ = run(data_root, tmp_path, "cold", cache, threads)
    assert cold_passes == [PAIRS]
    warm, warm_passes, warm_log = run(data_root, tmp_path, "warm", cache,
                                      threads)
    assert warm_passes == [0], warm_log
    assert "from=cache" in warm_log
    assert warm == cold
    off, off_passes, _ = run(data_root, tmp_path, "off", "", threads)
    assert off_passes == [PAIRS]
    assert off == cold
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"


def test_corrupt_entry_is_rebuilt_with_a_warning(data_root, tmp_path):
    cache = tmp_path / "cache"
    cold, _, _ = run(data_root, tmp_path, "cold", cache)
    (entry,) = [p for p in os.listdir(cache)
                if p.startswith("wmt-lengths-") and p.endswith(".entry")]
    path = cache / entry
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xff
    path.write_bytes(bytes(data))
    again, passes, log = run(data_root, tmp_path, "again", cache)
    assert "level=warn event=cache_corrupt kind=wmt-lengths" in log
    assert passes == [PAIRS]
    assert again == cold
    _, passes, _ = run(data_root, tmp_path, "third", cache)
    assert passes == [0]


def test_two_daemons_on_one_cache_build_once(data_root, tmp_path):
    cache = tmp_path / "cache"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    daemons = [Daemon(data_root, log, args=("--cache-dir", str(cache)))
               for log in logs]
    results = [None, None]
    try:
        def read(i):
            results[i] = train_rows(daemons[i], f"wmtcache-two-{i}")
        threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_for_passes(logs)
    finally:
        for d in daemons:
            d.stop()
    assert results[0] is not None and results[0] == results[1]
    # One length pass tokenized the set; the other daemon's waited for it
    # and loaded what it stored (having tokenized only the pairs of the
    # first windows it served meanwhile).
    ends = [LENGTHS.findall(open(log).read()) for log in logs]
    assert [len(e) for e in ends] == [1, 1], ends
    by_from = {end[0][2]: (int(end[0][0]), int(end[0][1])) for end in ends}
    assert sorted(by_from) == ["cache", "pass,cached"], ends
    assert by_from["cache"][0] == 0  # its pass tokenized nothing
    assert sum(by_from["pass,cached"]) == PAIRS


def test_unsafe_cache_dir_is_refused_at_start(data_root, tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    os.chmod(cache, 0o777)
    log = tmp_path / "refused.log"
    with pytest.raises(pytest.fail.Exception):
        Daemon(data_root, log, args=("--cache-dir", str(cache)))
    assert "writable by group or others" in open(log).read()
