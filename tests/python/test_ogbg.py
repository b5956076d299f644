"""The ogbg workload against TensorFlow + jraph, end to end through a
daemon: tests/python/reference/ogbg_ref.py reads the generated TFDS shards
with tf.data and batches them with jraph.dynamically_batch in batchd's row
budget; evaluation splits must equal it row by row, train (one epoch) as a
multiset of graphs. Then the drop-in's keys, dtypes and shapes, resuming
from a state_dict, 2 ranks, and damaged graphs.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_ogbg.py
"""

import collections
import json
import os
import shutil
import struct

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import batchd  # noqa: E402
import batchd.algoperf  # noqa: E402
from batchd_daemon import Daemon, free_port, metrics  # noqa: E402
from helpers import run_reference  # noqa: E402

R = 4  # graphs per row
KEYS = ("nodes", "edges", "senders", "receivers", "n_node", "n_edge",
        "targets", "weights")
SHARDS = os.path.join("ogbg_molpcba", "0.1.3")


@pytest.fixture(scope="module")
def daemon(ogbg_data, tmp_path_factory):  # conftest.py
    d = Daemon(ogbg_data, tmp_path_factory.mktemp("ogbg") / "batchd.log")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def reference(ogbg_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("ogbg-ref")
    refs = {}
    for split, count in (("validation", None), ("test", None),
                         ("eval_train", 100), ("train", None)):
        path = out / f"{split}.npz"
        run_reference("ogbg_ref.py", ogbg_data / "ogbg", split, R, path,
                      *([count] if count else []))
        refs[split] = dict(np.load(path))
    return refs


def rows_of(daemon, split, g, stream, world_size=1, rank=0, steps=None,
            options=None, **kw):
    """Every row of a pass (or `steps` batches), as numpy, [rows, ...]."""
    opts = {"graphs_per_row": R, "eval_train_examples": 100}
    opts.update(options or {})
    loader = batchd.Loader(stream=stream, global_batch_size=g, workload="ogbg",
                           data="ogbg", split=split, world_size=world_size,
                           rank=rank, seed=3, server=daemon.address,
                           options=opts, timeout=120, **kw)
    try:
        return read_rows(loader, steps)
    finally:
        loader.close()


def read_rows(loader, steps=None):
    """The rows of the loader's batches to the end of its pass (or of
    `steps` batches), as numpy, {key: [rows, ...]}."""
    out = collections.defaultdict(list)
    n = 0
    while steps is None or n < steps:
        try:
            host, _ = loader.next_batch()
        except StopIteration:
            break
        for k in KEYS:
            out[k].append(host[k].numpy().copy())
        n += 1
    return {k: np.concatenate(v) for k, v in out.items()}


def real_rows(rows):
    """Rows holding at least one real graph (the padding rows of the last
    global batch hold none)."""
    keep = rows["weights"].reshape(len(rows["weights"]), -1).any(1) | (
        rows["n_node"][:, 1:].sum(1) > 0)
    return {k: v[keep] for k, v in rows.items()}


@pytest.mark.parametrize("split", ["validation", "test", "eval_train"])
def test_eval_rows_equal_jraph_in_order(daemon, reference, split):
    rows = rows_of(daemon, split, 2, f"eval-{split}")
    ref = reference[split]
    n = len(ref["n_node"])
    assert len(rows["n_node"]) == n + (n % 2)  # last batch padded to 2 rows
    for k in KEYS:
        np.testing.assert_array_equal(rows[k][:n], ref[k].astype(rows[k].dtype),
                                      err_msg=k)
    if n % 2:  # an all-padding row: one padding graph, weights 0
        pad = {k: v[n] for k, v in rows.items()}
        assert pad["n_node"].tolist() == [26 * R + 1] + [0] * R
        assert pad["n_edge"].tolist() == [56 * R] + [0] * R
        assert not pad["weights"].any() and not pad["nodes"].any()


def graphs_of(rows):
    """Each real graph's (node count, labels with NaN as -1), from rows: a
    row's real graphs are its slots before the padding graph, the last
    slot with nodes (a row always has at least one padding node)."""
    out = collections.Counter()
    for n_node, targets, weights in zip(rows["n_node"], rows["targets"],
                                        rows["weights"]):
        padding = int(np.nonzero(n_node)[0][-1])
        for s in range(padding):
            labels = np.where(weights[s] > 0, targets[s], np.float32(-1.0))
            out[(int(n_node[s]), labels.astype(np.float32).tobytes())] += 1
    return out


def test_train_epoch_is_the_multiset_of_graphs(daemon, reference):
    ref = reference["train"]
    expected = collections.Counter(
        (int(n), lab.astype(np.float32).tobytes())
        for n, lab in zip(ref["graph_nodes"], ref["graph_labels"]))
    # G = 1 row: no row of the epoch is dropped. Rows are read until the
    # epoch's graphs have come; the epoch ends at a row's end.
    loader_rows = rows_of(daemon, "train", 1, "train-epoch",
                          steps=2 * len(ref["n_node"]) + 8)
    seen = collections.Counter()
    for i in range(len(loader_rows["n_node"])):
        seen += graphs_of({k: v[i:i + 1] for k, v in loader_rows.items()})
        if sum(seen.values()) >= sum(expected.values()):
            break
    assert seen == expected
    # Shuffled: not the file order's rows.
    assert not np.array_equal(loader_rows["n_node"][:len(ref["n_node"])],
                              ref["n_node"][:len(loader_rows["n_node"])])


def test_train_is_w_independent_and_ranks_disjoint_complete(daemon):
    one = rows_of(daemon, "train", 4, "w1", steps=6)
    two = [rows_of(daemon, "train", 4, "w2", world_size=2, rank=r, steps=6)
           for r in range(2)]
    for k in KEYS:
        merged = np.concatenate([np.concatenate([two[0][k][s:s + 2],
                                                 two[1][k][s:s + 2]])
                                 for s in range(0, 12, 2)])
        np.testing.assert_array_equal(merged, one[k], err_msg=k)


def test_drop_in_keys_dtypes_shapes_and_resume(daemon):
    def queue(rank, state=None, world=2):
        return batchd.algoperf.input_queue(
            "ogbg", "train", 4 * R, data="ogbg", seed=5, world_size=world,
            rank=rank, server=daemon.address, timeout=120, device="cpu",
            options={"graphs_per_row": R}, state=state)

    q = queue(0)
    batch = next(q)
    g = batch["inputs"]
    k = 2  # rows per rank: 4 rows / 2 ranks
    assert type(g).__name__ == "GraphsTuple"
    assert g._fields == ("nodes", "edges", "receivers", "senders", "globals",
                         "n_node", "n_edge")
    assert g.globals == {}
    expect = {"nodes": (torch.float32, (k * (26 * R + 1), 9)),
              "edges": (torch.float32, (k * 56 * R, 3)),
              "receivers": (torch.int64, (k * 56 * R,)),
              "senders": (torch.int64, (k * 56 * R,)),
              "n_node": (torch.int64, (k * (R + 1),)),
              "n_edge": (torch.int64, (k * (R + 1),))}
    for name, (dtype, shape) in expect.items():
        t = getattr(g, name)
        assert t.dtype == dtype and tuple(t.shape) == shape, name
    assert batch["targets"].dtype == torch.float32
    assert batch["weights"].dtype == torch.bool
    assert tuple(batch["weights"].shape) == (k * (R + 1), 128)
    # The GraphsTuple is consistent: n_node sums to the nodes, every edge
    # within its graph's nodes.
    assert int(g.n_node.sum()) == g.nodes.shape[0]
    assert int(g.n_edge.sum()) == g.edges.shape[0]
    graph_of_node = torch.repeat_interleave(torch.arange(len(g.n_node)),
                                            g.n_node)
    graph_of_edge = torch.repeat_interleave(torch.arange(len(g.n_edge)),
                                            g.n_edge)
    assert torch.equal(graph_of_node[g.senders], graph_of_edge)
    assert torch.equal(graph_of_node[g.receivers], graph_of_edge)
    next(q)
    state = q.state_dict()
    after = [next(q) for _ in range(3)]
    q.close()
    again = queue(0, state=state)
    for want in after:
        got = next(again)
        assert torch.equal(got["inputs"].nodes, want["inputs"].nodes)
        assert torch.equal(got["inputs"].senders, want["inputs"].senders)
        assert torch.equal(got["weights"], want["weights"])
    again.close()


def test_eval_queue_cycles(daemon):
    q = batchd.algoperf.input_queue(
        "ogbg", "test", 2 * R, data="ogbg", world_size=1, rank=0,
        server=daemon.address, timeout=120, device="cpu",
        options={"graphs_per_row": R})
    first = [next(q)["targets"] for _ in range(3)]
    while q.passes == 0:
        last = next(q)
    assert torch.equal(last["targets"], first[0])  # the pass began again
    q.close()


def damage(path, record, mutate):
    """Rewrites record `record` of a TFRecord file with mutate(bytes),
    re-framed with valid CRCs (the graph, not the framing, is bad)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                    "workloads", "common"))
    from records import tfrecord
    data = open(path, "rb").read()
    records, at = [], 0
    while at < len(data):
        (n,) = struct.unpack("<Q", data[at:at + 8])
        records.append(data[at + 12:at + 12 + n])
        at += 16 + n
    records[record] = mutate(records[record])
    with open(path, "wb") as f:
        f.write(tfrecord(records))


def test_damaged_graphs_are_counted_not_fatal(ogbg_data, reference,
                                              tmp_path):
    root = tmp_path / "data"
    shutil.copytree(ogbg_data / "ogbg", root / "ogbg")
    val = (root / "ogbg" / SHARDS /
           "ogbg_molpcba-validation.tfrecord-00000-of-00001")

    def bad_index(b):
        # The first value of the packed edge_index list becomes 127 (every
        # graph has at most 60 nodes): Feature.int64_list (0x1a, len),
        # Int64List.value (0x0a, len), then the varints.
        i = b.index(b"edge_index") + len(b"edge_index")
        j = b.index(b"\x1a", i) + 4
        return b[:j] + b"\x7f" + b[j + 1:]

    damage(val, 0, bad_index)
    damage(val, 1, lambda b: b[:len(b) // 2])  # truncated: no message
    d = Daemon(root, tmp_path / "batchd.log")
    try:
        loader = batchd.Loader(
            stream="bad", global_batch_size=1, workload="ogbg", data="ogbg",
            split="validation", world_size=1, rank=0, server=d.address,
            options={"graphs_per_row": R}, timeout=120)
        rows = read_rows(loader)
        text = json.dumps(d.status())
        loader.close()
    finally:
        d.stop()
    ref = reference["validation"]
    want = collections.Counter(
        (int(n), lab.astype(np.float32).tobytes())
        for n, lab in zip(ref["graph_nodes"][2:], ref["graph_labels"][2:]))
    assert graphs_of(rows) == want  # the 58 others, each once
    assert '"decode_errors": 2' in text, text
    log = open(tmp_path / "batchd.log").read()
    assert "record 0 of" in log and "record 1 of" in log
    assert "names node 127" in log


@pytest.mark.parametrize("split,steps", [("train", 5), ("validation", 4)])
def test_same_rows_with_and_without_readahead(ogbg_data, tmp_path, split,
                                              steps):
    """Train rows read their graphs through the read-ahead (ExamplesOfRows),
    eval rows as one stored example each: the same bytes with it off, on,
    and with a budget of one byte."""
    got = {}
    for budget in (0, 256 << 20, 1):
        port = free_port()
        d = Daemon(ogbg_data, tmp_path / f"ra-{budget}.log",
                   args=["--readahead-bytes", str(budget),
                         "--metrics-listen", f"127.0.0.1:{port}"])
        try:
            rows = [rows_of(d, split, 4, "s", world_size=2, rank=r,
                            steps=steps) for r in range(2)]
            m = metrics(port)
        finally:
            d.stop()
        got[budget] = rows
        stream = f'{{stream="s",owner="{os.getuid()}"}}'
        if budget == 0:
            assert m.get("batchd_readahead_reads_total" + stream, 0) == 0
        elif split == "train":
            assert m["batchd_readahead_reads_total" + stream] > 0
    for budget in (256 << 20, 1):
        for r in range(2):
            for k in KEYS:
                np.testing.assert_array_equal(got[budget][r][k], got[0][r][k],
                                              err_msg=(budget, r, k))
