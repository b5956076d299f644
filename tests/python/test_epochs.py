"""Epochs as torch's DataLoader has them, against a real daemon: len(loader)
is an epoch's steps, a for loop yields one epoch (the rest of the one in
progress after a resume) and the next loop the next epoch in its own
shuffled order, next() runs on across epochs, and a state_dict taken
before the first batch, mid-epoch or at an epoch's edge resumes exactly,
at W = 1 and W = 2. The synthetic workload's tensors say which examples
they hold (ids, epochs, positions); ogbg train is a stream of packed rows,
whose epochs differ in length.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_epochs.py
"""

import math

import pytest

torch = pytest.importorskip("torch")

import batchd  # noqa: E402
from batchd_daemon import Daemon  # noqa: E402

EXAMPLES = 1000
G = 32
STEPS = EXAMPLES // G  # 31: a train epoch drops its last 8 examples
SYNTHETIC = {"examples": EXAMPLES, "payload_bytes": 8}


def loader(server, stream, world_size=1, rank=0, **kw):
    kw.setdefault("options", SYNTHETIC)
    return batchd.Loader(stream, G, server=server.address,
                         world_size=world_size, rank=rank, seed=11,
                         connect_timeout=10.0, timeout=60.0, **kw)


def ids(batch):
    return batch["ids"].tolist()


def epoch_loop(ld):
    """[(step, epoch, ids)] of one for loop over `ld`."""
    return [(ld.last_batch_info.step, ld.last_batch_info.epoch, ids(b))
            for b in ld]


def reference(server, first, count):
    """ids of global steps [first, first + count), drawn with next() at
    W = 1 from a stream of their own: the daemon's order."""
    with loader(server, f"ref-{first}-{count}", start_step=first) as ld:
        return [ids(next(ld)) for _ in range(count)]


def test_len_is_the_steps_of_an_epoch(server):
    for w in (1, 2):
        with loader(server, f"len-train-{w}", world_size=w) as ld:
            assert len(ld) == STEPS
        # Evaluation: one pass, its last batch padded.
        with loader(server, f"len-val-{w}", world_size=w,
                    split="validation") as ld:
            assert len(ld) == math.ceil(EXAMPLES / G) == 32
            assert sum(1 for _ in ld) == 32
            assert sum(1 for _ in ld) == 0  # one pass


def test_a_for_loop_is_one_epoch_and_the_next_loop_the_next(server):
    with loader(server, "epochs") as ld:
        first = epoch_loop(ld)
        info = ld.last_batch_info
        assert info.last_in_epoch and info.epoch_steps == STEPS
        second = epoch_loop(ld)
        # next() runs on into the third epoch.
        third = next(ld)
        assert ld.last_batch_info.step == 2 * STEPS
        assert ld.last_batch_info.epoch == 2
    assert [(s, e) for s, e, _ in first] == [(s, 0) for s in range(STEPS)]
    assert [(s, e) for s, e, _ in second] == [(STEPS + s, 1)
                                             for s in range(STEPS)]
    one = [i for _, _, b in first for i in b]
    two = [i for _, _, b in second for i in b]
    # Each epoch: STEPS * G distinct examples; shuffled anew: another order.
    assert len(set(one)) == len(one) == len(set(two)) == STEPS * G
    assert one != two
    # The daemon's second epoch, as a stream read by step gives it.
    assert [b for _, _, b in second] == reference(server, STEPS, STEPS)
    assert ids(third) == reference(server, 2 * STEPS, 1)[0]


def test_a_loop_left_early_goes_on_with_the_rest_of_its_epoch(server):
    with loader(server, "rest") as ld:
        for k, _ in enumerate(ld):
            if k == 9:
                break
        rest = epoch_loop(ld)
        assert [s for s, _, _ in rest] == list(range(10, STEPS))
        # next() mid-epoch, then a loop: the rest again.
        next(ld)
        assert [s for s, _, _ in epoch_loop(ld)] == list(
            range(STEPS + 1, 2 * STEPS))


def draw_until(ld, where):
    """Moves `ld` to `where`: "start" (nothing drawn), "mid" (10 batches of
    a loop, then left), "edge" (a whole first loop)."""
    if where == "mid":
        for k, _ in enumerate(ld):
            if k == 9:
                break
    elif where == "edge":
        for _ in ld:
            pass


@pytest.mark.parametrize("where", ["start", "mid", "edge"])
@pytest.mark.parametrize("saved_w,resumed_w", [(1, 1), (2, 2), (1, 2),
                                               (2, 1)])
def test_a_state_resumes_exactly_at_any_w(server, where, saved_w, resumed_w):
    # Every rank of the saving job moves to `where`; rank 0's state resumes
    # the job (every rank's is the same).
    saving = [loader(server, f"save-{where}-{saved_w}-{resumed_w}",
                     world_size=saved_w, rank=r) for r in range(saved_w)]
    for ld in saving:
        draw_until(ld, where)
    states = [ld.state_dict() for ld in saving]
    assert all(s == states[0] for s in states)
    first_step = {"start": 0, "mid": 10, "edge": STEPS}[where]
    assert states[0]["next_step"] == first_step
    for ld in saving:
        ld.close()
    # The resumed job: its first loop is the rest of the epoch in progress
    # (the whole next one after the edge), its second loop the epoch after.
    resumed = [loader(server, f"resume-{where}-{saved_w}-{resumed_w}",
                      world_size=resumed_w, rank=r, state=states[0])
               for r in range(resumed_w)]
    loops = [[epoch_loop(ld), epoch_loop(ld)] for ld in resumed]
    for ld in resumed:
        ld.close()
    end = (first_step // STEPS + 1) * STEPS
    want = reference(server, first_step, end + STEPS - first_step)
    for n, (lo, hi) in enumerate([(first_step, end), (end, end + STEPS)]):
        steps = [[s for s, _, _ in per_rank[n]] for per_rank in loops]
        assert steps == [list(range(lo, hi))] * resumed_w
        got = [sum((loops[r][n][k][2] for r in range(resumed_w)), [])
               for k in range(hi - lo)]
        assert got == want[lo - first_step:hi - first_step]


def test_an_epoch_whose_end_the_daemon_does_not_mark(tmp_path, monkeypatch):
    """Batches that do not say where their epoch ends (a daemon from
    before the slot's epoch fields, or a packed epoch still being counted):
    the loop ends on seeing the next epoch's first batch, which the next
    loop begins with, and a state taken there resumes at that batch."""
    monkeypatch.setenv("BATCHD_TEST_HIDE_EPOCH_STEPS", "1")
    (tmp_path / "data").mkdir()
    d = Daemon(tmp_path / "data", tmp_path / "batchd.log", hooks=True)
    try:
        with loader(d, "hidden") as ld:
            first = epoch_loop(ld)
            assert not ld.last_batch_info.last_in_epoch
            assert ld.last_batch_info.epoch_steps == 0
            state = ld.state_dict()
            assert state["next_step"] == STEPS
            assert len(ld) == STEPS  # from OpenStream: not a packed stream
            second = epoch_loop(ld)
        assert [s for s, _, _ in first] == list(range(STEPS))
        assert [s for s, _, _ in second] == list(range(STEPS, 2 * STEPS))
        with loader(d, "hidden-resumed", state=state) as ld:
            assert [b for _, _, b in epoch_loop(ld)] == [
                b for _, _, b in second]
        # next() is not bounded by epochs: the kept batch comes first.
        with loader(d, "hidden-next") as ld:
            epoch_loop(ld)
            assert [ld.next_batch()[1].step for _ in range(3)] == [
                STEPS, STEPS + 1, STEPS + 2]
    finally:
        d.stop()


# Packed rows: ogbg train in rows of 4 graph slots, 2 rows a global batch.
OGBG = {"graphs_per_row": 4}


@pytest.fixture(scope="module")
def ogbg_daemon(ogbg_data, tmp_path_factory):  # conftest.py
    d = Daemon(ogbg_data, tmp_path_factory.mktemp("epochs") / "batchd.log")
    yield d
    d.stop()


def ogbg_loader(daemon, stream, world_size=1, rank=0, **kw):
    return batchd.Loader(stream, 2, workload="ogbg", data="ogbg",
                         split="train", world_size=world_size, rank=rank,
                         seed=5, server=daemon.address, options=OGBG,
                         connect_timeout=10.0, timeout=120.0, **kw)


def rows(batch):
    return batch["n_node"].numpy().tolist()


def test_packed_epochs_len_and_loops(ogbg_daemon):
    with ogbg_loader(ogbg_daemon, "packed") as ld:
        # Not known before the daemon counted the epoch: TypeError, as len()
        # of an iterable without a length.
        with pytest.raises(TypeError, match="packs rows"):
            len(ld)
        # Truth asks whether there is a loader, never its length.
        assert ld and bool(ld) is True
        loops = []
        for _ in range(3):
            loop = []
            for batch in ld:
                info = ld.last_batch_info
                loop.append((info.step, info.epoch, info.epoch_steps,
                             rows(batch)))
                if len(loop) == 1:
                    assert len(ld) == info.epoch_steps
            loops.append(loop)
            assert ld.last_batch_info.last_in_epoch
    start = 0
    for e, loop in enumerate(loops):
        n = loop[0][2]
        assert n > 1
        assert [(s, ep, k) for s, ep, k, _ in loop] == [
            (start + i, e, n) for i in range(n)]
        start += n
    # Shuffled anew: the epochs' rows differ.
    assert [r for *_, r in loops[0]] != [r for *_, r in loops[1]]
    # The daemon's order: the same steps drawn with next() from the start.
    with ogbg_loader(ogbg_daemon, "packed-ref") as ld:
        want = [rows(next(ld)) for _ in range(start)]
    assert [r for loop in loops for *_, r in loop] == want


@pytest.mark.parametrize("where", ["mid", "edge"])
@pytest.mark.parametrize("saved_w,resumed_w", [(1, 2), (2, 1)])
def test_packed_state_resumes_exactly(ogbg_daemon, where, saved_w,
                                      resumed_w):
    saving = [ogbg_loader(ogbg_daemon, f"psave-{where}-{saved_w}",
                          world_size=saved_w, rank=r)
              for r in range(saved_w)]
    for ld in saving:
        draw_until(ld, where)
    state = saving[0].state_dict()
    for ld in saving:
        ld.close()
    resumed = [ogbg_loader(ogbg_daemon, f"presume-{where}-{saved_w}",
                           world_size=resumed_w, rank=r, state=state)
               for r in range(resumed_w)]
    loops = []
    for ld in resumed:
        got = []
        for _ in range(2):
            got.append([(ld.last_batch_info.step, rows(b)) for b in ld])
        loops.append(got)
        ld.close()
    first = state["next_step"]
    assert first == (10 if where == "mid" else loops[0][0][0][0])
    assert first == loops[-1][0][0][0]  # every rank begins there
    with ogbg_loader(ogbg_daemon, f"pref-{where}-{saved_w}") as ld:
        want = []
        while len(want) < first + len(loops[0][0]) + len(loops[0][1]):
            batch = next(ld)
            want.append((ld.last_batch_info.step, rows(batch),
                         ld.last_batch_info.last_in_epoch))
    # The first loop ends where the daemon's epoch ends, the second is the
    # whole next epoch; each global batch is the ranks' rows in rank order.
    flat = [s for loop in loops[0] for s, _ in loop]
    assert flat == list(range(first, first + len(flat)))
    assert want[loops[0][0][-1][0]][2]  # the first loop ended an epoch
    assert want[loops[0][1][-1][0]][2]
    assert where == "mid" or want[first - 1][2]  # the edge: a whole epoch
    for n in range(2):
        for k, (step, _) in enumerate(loops[0][n]):
            got = sum((loops[r][n][k][1] for r in range(resumed_w)), [])
            assert got == want[step][1], step
