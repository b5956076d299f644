"""batchd.algoperf.input_queue("ogbg", split, B) with no options against
AlgoPerf's pipeline for W devices (tests/python/reference/
ogbg_algoperf_ref.py: TensorFlow's parsing, jraph's dynamic batching with
AlgoPerf's per-device budget, W batches a global batch), at B = 32 on one
device and B = 512 on four: every rank's batch has AlgoPerf's per-device
shapes, dtypes and values. Validation and test in order; train one epoch,
its graphs each once and its batches AlgoPerf's batching of them in
batchd's order (AlgoPerf's own shuffle is another).

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_ogbg_algoperf.py
"""

import collections
import os

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import batchd.algoperf  # noqa: E402
from batchd_daemon import Daemon  # noqa: E402
from helpers import REPO, run_generator, run_reference  # noqa: E402

FIELDS = ("nodes", "edges", "senders", "receivers", "n_node", "n_edge",
          "targets", "weights")
DTYPES = {"nodes": torch.float32, "edges": torch.float32,
          "senders": torch.int64, "receivers": torch.int64,
          "n_node": torch.int64, "n_edge": torch.int64,
          "targets": torch.float32, "weights": torch.bool}
# (B, W): AlgoPerf's target-setting batch on 4 devices, and a small batch
# on one.
CONFIGS = [(32, 1), (512, 4)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Enough graphs for a few global batches of 4 x 128 graph slots."""
    root = tmp_path_factory.mktemp("ogbg-algoperf")
    run_generator(os.path.join(REPO, "workloads", "ogbg", "make_ogbg.py"),
                  root / "ogbg", "--train", 1800, "--validation", 1300,
                  "--test", 500, "--seed", 9)
    return root


@pytest.fixture(scope="module")
def daemon(data, tmp_path_factory):
    d = Daemon(data, tmp_path_factory.mktemp("ogbg-algoperf-log") /
               "batchd.log")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """AlgoPerf's batches of every split at each (B, W), computed at once
    (one TensorFlow start): {(split, B, W): arrays}."""
    out = tmp_path_factory.mktemp("ogbg-algoperf-ref")
    jobs = [(split, b, w) for split in ("validation", "test", "train")
            for b, w in CONFIGS]
    run_reference("ogbg_algoperf_ref.py", data / "ogbg", out,
                  *[f"{s}:{b}:{w}" for s, b, w in jobs])
    return {job: dict(np.load(out / "{}-{}-{}.npz".format(*job)))
            for job in jobs}


def reference_in_order(data, tmp_path, b, w, order):
    """AlgoPerf's batching of the train graphs at file-order indices
    `order`, in that order."""
    np.save(tmp_path / "order.npy", np.array(order, dtype=np.int64))
    run_reference("ogbg_algoperf_ref.py", data / "ogbg", tmp_path,
                  f"train:{b}:{w}:{tmp_path / 'order.npy'}")
    return dict(np.load(tmp_path / f"train-{b}-{w}.npz"))


def queues(daemon, split, b, w):
    """Every rank's queue of one job (one stream), with no options."""
    return [batchd.algoperf.input_queue(
        "ogbg", split, b, data="ogbg", seed=3, world_size=w, rank=r,
        server=daemon.address, timeout=120, device="cpu",
        stream=f"q-{split}-{b}-{w}") for r in range(w)]


def fields(batch):
    g = batch["inputs"]
    out = {name: getattr(g, name) for name in FIELDS[:6]}
    out["targets"], out["weights"] = batch["targets"], batch["weights"]
    return out


def assert_algoperfs(got, want, what):
    """One rank's batch against AlgoPerf's device batch: shapes, dtypes,
    values."""
    for name in FIELDS:
        t = got[name]
        assert t.dtype == DTYPES[name], (what, name, t.dtype)
        assert tuple(t.shape) == want[name].shape, (what, name)
        np.testing.assert_array_equal(t.numpy(), want[name],
                                      err_msg=f"{what} {name}")


def shapes_of(b, w):
    n = b // w
    return {"nodes": (26 * n + 1, 9), "edges": (56 * n, 3),
            "n_node": (n + 1,), "targets": (n + 1, 128)}


@pytest.mark.parametrize("b,w", CONFIGS)
@pytest.mark.parametrize("split", ["validation", "test"])
def test_eval_batches_are_algoperfs(daemon, reference, split, b, w):
    want = reference[(split, b, w)]
    n = len(want["n_node"])
    assert n >= 2 or split == "test"
    qs = queues(daemon, split, b, w)
    try:
        got = [[fields(next(q)) for _ in range(n + 1)] for q in qs]
    finally:
        for q in qs:
            q.close()
    for k in range(n):
        for r in range(w):
            batch = got[r][k]
            assert {name: tuple(batch[name].shape)
                    for name in shapes_of(b, w)} == shapes_of(b, w)
            assert_algoperfs(batch, {f: want[f][k, r] for f in FIELDS},
                             (split, k, r))
    # AlgoPerf drops the device batches after the last whole group; batchd
    # serves them in one more global batch, the other ranks' rows padding
    # (no graph, weights 0), then starts the pass again.
    rest = len(want.get("rest_n_node", []))
    if rest:
        for r in range(w):
            batch = got[r][n]
            if r < rest:
                assert_algoperfs(batch, {f: want["rest_" + f][r]
                                         for f in FIELDS}, (split, "rest", r))
            else:
                assert not batch["weights"].any()
                assert batch["n_node"][1:].sum() == 0
    else:
        for r in range(w):
            assert torch.equal(got[r][n]["nodes"], got[r][0]["nodes"])


def graph_keys(batch):
    """Each real graph of a device batch: (node count, node features,
    labels with NaN as -1), in order. Real graphs are the slots before the
    padding graph (the last with nodes)."""
    n_node = batch["n_node"].numpy()
    nodes = batch["nodes"].numpy()
    targets = batch["targets"].numpy()
    weights = batch["weights"].numpy()
    padding = int(np.nonzero(n_node)[0][-1])
    keys, at = [], 0
    for s in range(padding):
        n = int(n_node[s])
        labels = np.where(weights[s], targets[s], np.float32(-1.0))
        keys.append((n, nodes[at:at + n].tobytes(),
                     labels.astype(np.float32).tobytes()))
        at += n
    return keys


@pytest.mark.parametrize("b,w", CONFIGS)
def test_train_epoch_is_algoperfs_batching_of_its_graphs(
        daemon, data, reference, tmp_path, b, w):
    split = reference[("train", b, w)]
    index = collections.defaultdict(list)
    at = 0
    for i, (n, labels) in enumerate(zip(split["graph_nodes"],
                                        split["graph_labels"])):
        feats = split["graph_node_feat"][at:at + n]
        index[(int(n), feats.astype(np.float32).tobytes(),
               labels.astype(np.float32).tobytes())].append(i)
        at += n
    # One epoch of every rank's queue (the epoch's global batches).
    qs = queues(daemon, "train", b, w)
    got = [[] for _ in range(w)]
    try:
        for r, q in enumerate(qs):
            while True:
                batch = fields(next(q))
                if q.last_batch_info.epoch != 0:
                    break
                got[r].append(batch)
    finally:
        for q in qs:
            q.close()
    steps = len(got[0])
    assert steps > 1 and all(len(g) == steps for g in got)
    # The graphs of the epoch, global batch by global batch, device by
    # device: each a graph of the split, none twice.
    order = []
    for k in range(steps):
        for r in range(w):
            for key in graph_keys(got[r][k]):
                assert index[key], "a graph that is not in the split"
                order.append(index[key].pop())
    assert len(order) == len(set(order))
    left = sum(len(v) for v in index.values())
    if w == 1:
        assert left == 0  # one device batch a step: no remainder dropped
    else:
        assert left <= (w - 1) * (b // w)  # < W device batches dropped
    # Shuffled: not the file order.
    assert order != sorted(order)
    want = reference_in_order(data, tmp_path, b, w, order)
    assert len(want["n_node"]) == steps
    for k in range(steps):
        for r in range(w):
            assert_algoperfs(got[r][k], {f: want[f][k, r] for f in FIELDS},
                             ("train", k, r))


def test_rows_of_the_callers_choice_stay_w_independent(daemon):
    """graphs_per_row set: the same global batches at W = 1 and W = 2."""
    one = queues_with_rows(daemon, 1)
    two = queues_with_rows(daemon, 2)
    try:
        for _ in range(3):
            whole = fields(next(one[0]))
            parts = [fields(next(q)) for q in two]
            for name in ("n_node", "n_edge", "targets", "weights"):
                assert torch.equal(torch.cat([p[name] for p in parts]),
                                   whole[name]), name
            assert torch.equal(torch.cat([p["nodes"] for p in parts]),
                               whole["nodes"])
    finally:
        for q in one + two:
            q.close()


def queues_with_rows(daemon, w):
    return [batchd.algoperf.input_queue(
        "ogbg", "train", 64, data="ogbg", seed=3, world_size=w, rank=r,
        server=daemon.address, timeout=120, device="cpu",
        options={"graphs_per_row": 16}, stream=f"rows-{w}")
        for r in range(w)]


def test_a_state_resumed_at_another_w_keeps_its_rows(daemon):
    """AlgoPerf's per-device rows depend on W: a queue resumed from a state
    at another W keeps the state's rows (B // W of the W saved), so the
    batches go on exactly, each rank's rows concatenated."""
    def queue(w, r, name, state=None):
        return batchd.algoperf.input_queue(
            "ogbg", "train", 64, data="ogbg", seed=4, world_size=w, rank=r,
            server=daemon.address, timeout=120, device="cpu", stream=name,
            state=state)

    two = [queue(2, r, "resume-two") for r in range(2)]
    try:
        for q in two:
            first = fields(next(q))
            assert tuple(first["nodes"].shape) == (26 * 32 + 1, 9)
        state = two[0].state_dict()
        assert state["loader"]["options"]["graphs_per_row"] == "32"
        after = [[fields(next(q)) for _ in range(2)] for q in two]
    finally:
        for q in two:
            q.close()
    one = queue(1, 0, "resume-one", state=state)
    try:
        for k in range(2):
            got = fields(next(one))
            assert tuple(got["n_node"].shape) == (2 * 33,)
            for name in ("nodes", "n_node", "n_edge", "targets", "weights"):
                assert torch.equal(got[name], torch.cat(
                    [after[0][k][name], after[1][k][name]])), (k, name)
    finally:
        one.close()
