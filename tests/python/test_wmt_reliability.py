"""The wmt workload against what one user can do to everyone's daemon, with
real daemons: a request's index_threads under a pids limit (a real cgroup),
a hostile SentencePiece model, model memory charged, shared and returned,
a cache directory removed or made read-only under the daemon, and the
one-time length pass that finishes after a short stream so that a
restarted daemon resumes far ahead without tokenizing.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_wmt_reliability.py
"""

import os
import re
import shutil
import struct
import subprocess
import time
import uuid

import pytest

pytest.importorskip("sentencepiece")

import batchd  # noqa: E402
from batchd_daemon import Daemon, binary  # noqa: E402
from helpers import daemon_threads, generate_wmt, status_bytes  # noqa: E402
from helpers import step_rows, train_sentencepiece  # noqa: E402

PAIRS = 300
# Enough pairs that a length pass wanted hundreds of threads at once
# (ParallelFor: a thread per 64 pairs, 257 per block of the cached pass).
BIG_PAIRS = 20000
GLOBAL_BATCH = 16
PIDS = "/sys/fs/cgroup/pids"


def generate(root, name, pairs):
    return generate_wmt(root / name, train=pairs, validation=40, test=10,
                        shards=2, seed=7)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("wmtreliability")
    data = generate(root, "wmt", PAIRS)
    train_sentencepiece(data, vocab_size=600)
    big = generate(root, "big", BIG_PAIRS)
    shutil.copy(data / "wmt_sentencepiece_model",
                big / "wmt_sentencepiece_model")
    return root


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7f) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def piece(text, score):
    """A ModelProto piece (field 1): text, score, type NORMAL."""
    body = b"\x0a" + varint(len(text)) + text + b"\x15" + struct.pack("<f",
                                                                     score)
    return b"\x0a" + varint(len(body)) + body


def model_with(data_root, name, extra):
    """A copy of the wmt data set (validation split) whose model has the
    pieces `extra` appended."""
    src = data_root / "wmt"
    dst = data_root / name
    if not dst.exists():
        dst.mkdir()
        for f in ("validation.de", "validation.en"):
            shutil.copy(src / f, dst / f)
        model = (src / "wmt_sentencepiece_model").read_bytes()
        (dst / "wmt_sentencepiece_model").write_bytes(model + extra)
    return dst.name


def loader(daemon, name, data="wmt", split="train", start_step=0,
           options=None, timeout=60.0):
    opts = {"source": "text", "max_length": 32}
    opts.update(options or {})
    return batchd.Loader(name, GLOBAL_BATCH, workload="wmt", data=data,
                         split=split, seed=3, start_step=start_step,
                         server=daemon.address, format="numpy",
                         connect_timeout=60.0, timeout=timeout, options=opts)


def rows(daemon, name, steps, **kwargs):
    with loader(daemon, name, **kwargs) as l:
        return step_rows(l, steps, "inputs", "targets")


def close(daemon, stream):
    subprocess.run([binary("batchctl"), "close", stream, "--server",
                    daemon.address], check=True, capture_output=True)


def wait_until(what, condition, seconds=120):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.1)


def needs_root(path):
    if os.geteuid() != 0 or not os.path.isdir(path):
        pytest.skip(f"needs root and {path}")


def test_index_threads_cannot_exhaust_a_pids_limit(data_root, tmp_path):
    # A stream asking for 100,000 indexing threads, with a daemon whose
    # task limit leaves it 32 more tasks than it has at start: it used to
    # throw in std::thread and terminate (exit 134).
    needs_root(PIDS)
    group = os.path.join(PIDS, f"batchd-test-{uuid.uuid4().hex[:12]}")
    os.mkdir(group)

    def join():
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    daemon = Daemon(data_root, tmp_path / "pids.log", preexec=join)
    try:
        pid = daemon.proc.pid
        with open(os.path.join(group, "pids.current")) as f:
            tasks = int(f.read())
        with open(os.path.join(group, "pids.max"), "w") as f:
            f.write(str(tasks + 32))
        before = daemon_threads(pid)
        most = before
        with loader(daemon, "greedy", data="big",
                    options={"index_threads": 100000}, timeout=300.0) as l:
            for _ in range(8):
                batch, _ = l.next_batch()
                assert batch["inputs"].shape == (GLOBAL_BATCH, 32)
                del batch
                most = max(most, daemon_threads(pid))
            # Until the pass has every length, threads are sampled.
            log = tmp_path / "pids.log"
            deadline = time.monotonic() + 300
            while "event=wmt_lengths" not in log.read_text():
                assert daemon.proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline
                most = max(most, daemon_threads(pid))
                time.sleep(0.05)
        assert daemon.proc.poll() is None, (tmp_path / "pids.log").read_text()
        print(f"daemon threads: {before} before the stream, at most {most} "
              f"while it asked for 100000")
        # Workloads add none. (One of the daemon's own may start after the
        # first count: the threads it starts in the background at start-up.)
        assert most <= before + 1, (before, most)
        assert rows(daemon, "after", 2, data="big")
    finally:
        daemon.stop()
        os.rmdir(group)


def test_an_8mib_piece_model_is_refused_and_the_daemon_serves_on(data_root,
                                                                tmp_path):
    hostile = model_with(data_root, "hostile",
                         piece(b"a" * (8 << 20), -20.0))
    daemon = Daemon(data_root, tmp_path / "hostile.log")
    try:
        with pytest.raises(batchd.Error) as refused:
            rows(daemon, "hostile", 1, data=hostile, split="validation")
        message = str(refused.value)
        assert "is 8388608 bytes, over the limit of 1024" in message, message
        assert daemon.proc.poll() is None, "the daemon died"
        assert rows(daemon, "good", 2)
    finally:
        daemon.stop()


def test_model_memory_is_budgeted_shared_and_returned(data_root, tmp_path):
    # 300,000 more pieces (5 MB): within the model limits, ~100 MB loaded.
    extra = b"".join(piece(("\u0298%06d" % i).encode(), -15.0 - i % 997 / 100)
                     for i in range(300000))
    big = model_with(data_root, "bigmodel", extra)
    small = Daemon(data_root, tmp_path / "budget.log",
                   args=("--max-model-bytes", "50000000"))
    try:
        with pytest.raises(batchd.Error) as refused:
            rows(small, "over", 1, data=big, split="validation")
        assert "--max-model-bytes" in str(refused.value), str(refused.value)
    finally:
        small.stop()

    daemon = Daemon(data_root, tmp_path / "memory.log")
    try:
        pid = daemon.proc.pid
        idle = status_bytes(pid, "VmRSS")
        first = loader(daemon, "first", data=big, split="validation")
        first.next_batch()
        one = status_bytes(pid, "VmRSS")
        second = loader(daemon, "second", data=big, split="validation")
        second.next_batch()
        two = status_bytes(pid, "VmRSS")
        first.close()
        second.close()
        for name in ("first", "second"):
            close(daemon, name)
        # Closed, the streams go, and the model's memory with them.
        wait_until("the streams are gone",
                   lambda: not daemon.status()["streams"])
        after = status_bytes(pid, "VmRSS")
        print(f"rss idle {idle >> 20} MiB, one stream {one >> 20} MiB, "
              f"two {two >> 20} MiB, after {after >> 20} MiB")
        loaded = one - idle
        assert loaded > 50 << 20, (idle, one)
        assert two - one < loaded // 4, (one, two)  # shared, not loaded again
        assert after - idle < loaded // 4, (idle, one, after)
    finally:
        daemon.stop()


def cacheless_rows(data_root, tmp_path, steps, start_step=0, data="wmt"):
    daemon = Daemon(data_root, tmp_path / "cacheless.log",
                    args=("--cache-dir", ""))
    try:
        return rows(daemon, "plain", steps, start_step=start_step, data=data,
                    timeout=300.0)
    finally:
        daemon.stop()


def test_a_removed_cache_dir_is_a_warning_and_streams_are_served(data_root,
                                                                 tmp_path):
    expected = cacheless_rows(data_root, tmp_path, 4)
    cache = tmp_path / "cache"
    log = tmp_path / "removed.log"
    daemon = Daemon(data_root, log, args=("--cache-dir", str(cache)))
    try:
        shutil.rmtree(cache)
        # A stream used to wait for ever: creating the lock file failed.
        assert rows(daemon, "nocache", 4, timeout=60.0) == expected
        assert "event=cache_unusable" in log.read_text()
    finally:
        daemon.stop()


def test_a_read_only_cache_dir_is_a_warning_and_streams_are_served(data_root,
                                                                   tmp_path):
    needs_root("/proc/self")
    expected = cacheless_rows(data_root, tmp_path, 4)
    mount = tmp_path / "cachefs"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs",
                       str(mount)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs")
    log = tmp_path / "readonly.log"
    daemon = None
    try:
        daemon = Daemon(data_root, log,
                        args=("--cache-dir", str(mount / "cache")))
        # The file system turns read-only under the daemon (as ext4 does
        # with errors=remount-ro).
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        assert rows(daemon, "rocache", 4, timeout=60.0) == expected
        assert "event=cache_unusable" in log.read_text()
    finally:
        if daemon is not None:
            daemon.stop()
        subprocess.run(["umount", "-l", str(mount)])


LENGTHS = re.compile(r"event=wmt_lengths pairs=\d+ tokenized=(\d+) "
                     r"first_windows=(\d+) from=(\S+)")


def test_the_pass_finishes_after_a_short_stream_and_a_restart_resumes_far(
        data_root, tmp_path, monkeypatch):
    far = 1000  # past two epochs of 20,000 pairs in rows of 32
    expected = cacheless_rows(data_root, tmp_path, 2, start_step=far,
                              data="big")
    cache = tmp_path / "cache"
    # A pass of ~10 s on two threads; the stream reads two batches (which
    # need a few hundred pairs) and is closed, as a short job's is.
    monkeypatch.setenv("BATCHD_TEST_WMT_INDEX_DELAY_US", "1000")
    log = tmp_path / "first.log"
    daemon = Daemon(data_root, log, hooks=True,
                    args=("--cache-dir", str(cache)))
    try:
        rows(daemon, "short", 2, data="big")
        close(daemon, "short")  # the stream is gone, not only its client
        assert "event=wmt_tokens" not in log.read_text()
        # Nobody reads any more; the pass ends and stores the token ids,
        # then the row counts of the seed's first epochs.
        wait_until("the token ids are stored",
                   lambda: "event=wmt_tokens" in log.read_text())
        wait_until("the epochs are counted",
                   lambda: "event=wmt_epochs_counted" in log.read_text())
    finally:
        daemon.stop()
    monkeypatch.delenv("BATCHD_TEST_WMT_INDEX_DELAY_US")
    log = tmp_path / "restarted.log"
    daemon = Daemon(data_root, log, args=("--cache-dir", str(cache)))
    try:
        assert rows(daemon, "resumed", 2, start_step=far,
                    data="big") == expected
        ends = LENGTHS.findall(log.read_text())
        assert ends == [("0", "0", "cache")], log.read_text()
        assert "event=wmt_tokens" in log.read_text()
    finally:
        daemon.stop()
