"""No request holds or floods everyone's control plane (issue 27, break 3,
break 4 and the stream quota), with real daemons and real uids:

- a stream resuming at a far cursor is prepared on the daemon's executor,
  never on the request thread or under the registry's lock: while its
  preparation is held (a test hook), another uid's GetStatus and
  OpenStream answer, and SIGTERM exits 0 at once; a cursor no epoch can
  hold is refused at once, naming start_cursor;
- seats are made as ranks attach: one uid's streams of world_size 65,536
  (rank 0 attached) leave `batchctl status` and /metrics working for
  everyone, their size following the ranks attached;
- the per-uid stream quota follows --max-streams: with 8, one uid cannot
  take every slot from root.

Run as root (setuid to nobody):

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_control_plane.py
"""

import contextlib
import json
import subprocess
import threading
import urllib.request

import pytest

pytest.importorskip("numpy")

import batchd  # noqa: E402
from batchd_daemon import Daemon, Server, binary, free_port  # noqa: E402
from helpers import as_user, needs_root, python_as, wait_until  # noqa: E402

NOBODY = 65534
PAIRS = 3000
STATE_VERSION = 1  # of Loader.state_dict()

pytestmark = needs_root


def batchctl(address, *args, user=None, timeout=60):
    return subprocess.run([binary("batchctl"), *args, "--server", address],
                          capture_output=True, text=True, timeout=timeout,
                          **as_user(user))


# Opens argv[3] streams named argv[2]-<i> of world_size argv[4] (rank 0,
# attached), printing "opened i" or "refused <why>" for each, then holds
# them until stdin closes.
OPENER = r"""
import sys, batchd
address, prefix, count, world = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
held = []
for i in range(count):
    try:
        held.append(batchd.Loader(f"{prefix}-{i}", world, world_size=world,
                                  rank=0, slots=1, format="numpy",
                                  server=address, reconnect=0,
                                  options={"examples": "1000000",
                                           "payload_bytes": "8"},
                                  connect_timeout=20.0, timeout=20.0))
        print("opened", i, flush=True)
    except batchd.Error as e:
        print("refused", str(e).replace("\n", " "), flush=True)
print("done", flush=True)
sys.stdin.readline()
"""


@contextlib.contextmanager
def opener(address, prefix, count, world, user=NOBODY):
    """Runs OPENER as `user`; yields what it printed for each stream, and
    holds the streams until the block ends."""
    p = python_as(user, OPENER, address, prefix, count, world)
    try:
        lines = []
        while True:
            line = p.stdout.readline()
            assert line, p.stderr.read()
            if line.strip() == "done":
                break
            lines.append(line.strip())
        yield lines
    finally:
        p.stdin.close()
        p.wait(timeout=60)


def synthetic(daemon, name, **kw):
    return batchd.Loader(name, 4, world_size=1, rank=0, slots=2,
                         format="numpy", server=daemon.address, reconnect=0,
                         options={"examples": "1000", "payload_bytes": "64"},
                         connect_timeout=20.0, timeout=20.0, **kw)


# ------------------------------------------------- break 3: far cursors

@pytest.fixture(scope="module")
def wmt_root(tmp_path_factory):
    from helpers import make_wmt
    pytest.importorskip("sentencepiece")
    root = tmp_path_factory.mktemp("controlwmt")
    make_wmt(root / "wmt", train=PAIRS, validation=10, test=10, shards=2,
             seed=5, vocab_size=600)
    return root


def far_loader(daemon, cursor, **kw):
    return batchd.Loader("far", 16, workload="wmt", data="wmt",
                         split="train", seed=3, start_step=5,
                         start_cursor=cursor, server=daemon.address,
                         format="numpy", reconnect=0,
                         options={"index_threads": "1", "source": "text"},
                         **kw)


def far_state(daemon, cursor, **kw):
    """A Loader resuming from a crafted state (as Loader.state_dict()
    writes it) whose cursor is `cursor` [epoch, window, row, step]."""
    state = {"format": "batchd.loader_state", "version": STATE_VERSION,
             "workload": "wmt", "data": "wmt", "split": "train",
             "global_batch_size": 16, "seed": 3,
             "options": {"index_threads": "1", "source": "text"},
             "next_step": cursor[3] + 1, "cursor": cursor, "world_size": 1}
    return batchd.Loader("far-state", 16, workload="wmt", data="wmt",
                         split="train", seed=3, server=daemon.address,
                         format="numpy", reconnect=0, state=state,
                         options={"index_threads": "1", "source": "text"},
                         **kw)


@pytest.fixture
def held_daemon(wmt_root, tmp_path, monkeypatch):
    """A daemon whose learning of an epoch's first windows waits while
    tmp_path/hold exists, and whose length pass is too slow to end first
    (about 30 s)."""
    hold = tmp_path / "hold"
    hold.write_text("")
    monkeypatch.setenv("BATCHD_TEST_WMT_LEARN_HOLD", str(hold))
    monkeypatch.setenv("BATCHD_TEST_WMT_INDEX_DELAY_US", "20000")
    d = Daemon(wmt_root, tmp_path / "batchd.log", hooks=True,
               open_to_all=True, args=("--cache-dir", ""))
    try:
        yield d, hold
    finally:
        if hold.exists():
            hold.unlink()
        d.stop()


def test_a_far_cursor_holds_no_other_caller_and_sigterm_exits_0(
        held_daemon):
    d, hold = held_daemon
    # The last window an epoch of 3,000 pairs may have: learning up to it
    # is the whole epoch's tokenizing.
    outcome = {}

    def far():
        try:
            loader = far_loader(d, (0, PAIRS // 256, 0),
                                connect_timeout=120.0, timeout=300.0)
            outcome["opened"] = True
            loader.next_batch()
            outcome["batch"] = True
        except Exception as e:  # noqa: BLE001 (reported below)
            outcome["error"] = e

    thread = threading.Thread(target=far, daemon=True)
    thread.start()
    held = hold.parent / "hold.held"
    wait_until(held.exists, 60, "the far cursor's preparation is held")

    # A crafted Loader state naming such a cursor takes the resume's path
    # (the rank's own schedule): it opens while the first is held.
    def resumed():
        try:
            # Kept: its rank stays attached, its row still being found.
            outcome["resumed"] = far_state(d, [0, PAIRS // 256, 0, 7],
                                           connect_timeout=120.0,
                                           timeout=300.0)
        except Exception as e:  # noqa: BLE001 (reported below)
            outcome["resume_error"] = e

    threading.Thread(target=resumed, daemon=True).start()
    wait_until(lambda: "resumed" in outcome or "resume_error" in outcome, 60,
               "a resume at a far cursor opens while another is held")
    assert "resumed" in outcome, outcome

    # While it is held: another uid's status and a new stream of its own.
    st = batchctl(d.address, "status", "--json", user=NOBODY)
    assert st.returncode == 0, st.stderr
    names = [s["spec"]["name"] for s in json.loads(st.stdout)["streams"]]
    assert "far" in names
    with opener(d.address, "other", 1, 1) as lines:
        assert lines == ["opened 0"], lines
    # ... and the far stream is still being prepared, not served.
    assert held.exists() and hold.exists()
    assert "batch" not in outcome and "error" not in outcome, outcome
    assert outcome.get("opened"), "OpenStream waits for the preparation"

    # SIGTERM stops the preparation: the daemon exits 0, not through the
    # stop deadline (status 1).
    d.proc.terminate()
    assert d.proc.wait(timeout=60) == 0
    log = open(d.log_path).read()
    assert "event=stop_timeout" not in log, log
    assert "event=stopped" in log
    thread.join(timeout=60)


def test_a_cursor_no_epoch_can_hold_is_refused_at_once(held_daemon):
    d, hold = held_daemon
    # Refused from the cursor's figures alone: nothing is learnt (learning
    # is held, and a refusal that waited for it would not come).
    for cursor in [(0, 10**9, 0), (0, 0, 10**6)]:
        with pytest.raises(batchd.InvalidArgumentError,
                           match=r"start_cursor.*beyond any epoch of 3000"):
            far_loader(d, cursor, connect_timeout=30.0, timeout=30.0)
    assert not (hold.parent / "hold.held").exists()
    # A resume whose state names such a cursor is refused as well.
    with pytest.raises(batchd.Error, match="beyond any epoch of 3000"):
        far_state(d, [0, 10**9, 0, 7], connect_timeout=30.0, timeout=30.0)
    assert not (hold.parent / "hold.held").exists()


# ------------------------------------------ break 4: world_size 65,536

def test_world_size_65536_costs_status_and_metrics_only_what_is_attached(
        tmp_path):
    port = free_port()
    d = Server(tmp_path, open_to_all=True,
               args=("--metrics-listen", f"127.0.0.1:{port}"))
    try:
        with opener(d.address, "wide", 16, 65536) as lines:
            assert lines == [f"opened {i}" for i in range(16)], lines
            mine = synthetic(d, "mine")
            next(mine)
            attached = 17  # 16 streams of rank 0 alone, and root's
            text = batchctl(d.address, "status")
            assert text.returncode == 0, text.stderr
            assert "wide-15" in text.stdout
            js = batchctl(d.address, "status", "--json")
            assert js.returncode == 0, js.stderr
            st = json.loads(js.stdout)
            assert len(st["streams"]) == attached
            wide = [s for s in st["streams"]
                    if s["spec"]["name"].startswith("wide-")]
            for s in wide:
                assert s["spec"]["world_size"] == 65536
                assert [r["rank"] for r in s.get("ranks", [])] == [0]
                assert int(s.get("attached_ranks", 0)) == 1
            # Sizes follow the ranks attached, not the world sizes asked.
            assert len(js.stdout) < 4096 + 2048 * attached, len(js.stdout)
            body = urllib.request.urlopen(
                f"http://127.0.0.1:{port}/metrics", timeout=60).read()
            assert len(body) < 8192 + 2048 * attached, len(body)
            assert b'batchd_rank_attached{stream="wide-3",owner="65534",' \
                   b'rank="0"} 1' in body
            del mine
    finally:
        d.stop()


# ----------------------------------------- the stream quota, --max-streams

def test_the_stream_quota_follows_max_streams(tmp_path):
    d = Server(tmp_path, open_to_all=True, args=("--max-streams", "8"))
    try:
        with opener(d.address, "many", 8, 1) as lines:
            # A quarter of --max-streams 8: two streams, then the quota.
            assert lines[:2] == ["opened 0", "opened 1"], lines
            for line in lines[2:]:
                assert line.startswith("refused"), lines
                assert "--max-streams-per-uid 2" in line, line
            st = d.status()
            assert st["max_streams_per_uid"] == 2
            # Root's next streams still open.
            mine = [synthetic(d, f"root-{i}") for i in range(3)]
            for loader in mine:
                next(loader)
            del mine
    finally:
        d.stop()
