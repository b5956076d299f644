"""finewebedu_lm through a real daemon: every split's windows against
`datasets.load_from_disk` + numpy (tests/python/reference/lm_ref.py, in the
reference venv), train as a multiset over an epoch, ranks, resume, the
AlgoPerf drop-in, and a truncated Arrow file refused naming file and
offset."""
import os
import shutil

import numpy as np
import pytest

# The drop-in checks need torch; the Debian and PyPI-torch runs have it.
torch = pytest.importorskip("torch")

import batchd  # noqa: E402
from helpers import run_reference  # noqa: E402

SEQ = 1024


@pytest.fixture(scope="module")
def lm(lm_data, tmp_path_factory):
    """A Server whose data root holds lm/ (conftest's lm_data: 119 train
    windows in 3 shards, 27 validation windows in 3) and the reference
    windows of train/ and val/."""
    from batchd_daemon import Server
    tmp = tmp_path_factory.mktemp("lm")
    s = Server(tmp)
    s.lm_root = tmp / "data"
    data = tmp / "data" / "lm"
    shutil.copytree(lm_data, data)
    ref = {}
    for split in ("train", "val"):
        out = tmp / f"{split}.npz"
        run_reference("lm_ref.py", out, data / split)
        ref[split] = dict(np.load(out))
    yield s, ref
    s.stop()


def _loaders(server, stream, split, batch, world=1, data="lm", **kw):
    return [batchd.Loader(stream, batch, workload="finewebedu_lm", data=data,
                          split=split, world_size=world, rank=r,
                          server=server.address, connect_timeout=10.0,
                          timeout=60.0, **kw)
            for r in range(world)]


def _global(loaders, steps):
    out = []
    for _ in range(steps):
        parts = [l.next_batch()[0] for l in loaders]
        out.append({k: torch.cat([p[k] for p in parts]).numpy()
                    for k in parts[0]})
    for l in loaders:
        l.close()
    return out


@pytest.mark.parametrize("split,folder,world", [("validation", "val", 1),
                                                ("validation", "val", 2),
                                                ("eval_train", "train", 2)])
def test_eval_splits_equal_datasets_in_order(lm, split, folder, world):
    server, ref = lm
    want = ref[folder]
    n = len(want["targets"])
    if split == "eval_train":
        n = 50
    batch = 8
    loaders = _loaders(server, f"lm-{split}-{world}", split, batch, world,
                       options={"eval_train_examples": str(n)}
                       if split == "eval_train" else {})
    got = _global(loaders, -(-n // batch))
    rows = {k: np.concatenate([g[k] for g in got]) for k in got[0]}
    assert rows["inputs"].dtype == np.int32
    assert rows["inputs"].shape == (len(got) * batch, SEQ)
    assert rows["targets"].shape == (len(got) * batch, SEQ)
    assert rows["weights"].dtype == np.float32
    assert (rows["inputs"][:n] == want["inputs"][:n]).all()
    assert (rows["targets"][:n] == want["targets"][:n]).all()
    assert (rows["weights"][:n] == 1).all() and (rows["weights"][n:] == 0).all()
    assert (rows["inputs"][n:] == -1).all() and (rows["targets"][n:] == -1).all()
    assert len(rows["inputs"]) > n  # the last batch is padded


def _keys(inputs, targets):
    return sorted(inputs[i].tobytes() + targets[i].astype(np.int32).tobytes()
                  for i in range(len(inputs)))


def test_train_epoch_is_a_permutation_and_ranks_disjoint(lm):
    server, ref = lm
    want = ref["train"]
    n = len(want["targets"])  # 119
    batch = 17  # 7 steps an epoch, no remainder
    assert n % batch == 0
    one = _global(_loaders(server, "lm-t1", "train", batch, seed=5), n // batch)
    assert set(one[0]) == {"inputs", "targets"}
    got = {k: np.concatenate([g[k] for g in one]) for k in one[0]}
    assert _keys(got["inputs"], got["targets"]) == \
        _keys(want["inputs"], want["targets"])
    assert not (got["inputs"] == want["inputs"]).all()  # shuffled


def test_two_ranks_are_disjoint_and_complete(lm):
    server, ref = lm
    want = ref["train"]
    batch = 34  # 3 steps an epoch, 17 windows dropped
    ls = _loaders(server, "lm-r2", "train", batch, world=2, seed=9)
    parts = {0: [], 1: []}
    for _ in range(3):
        for r, l in enumerate(ls):
            parts[r].append(l.next_batch()[0]["inputs"].numpy())
    for l in ls:
        l.close()
    r0 = {a.tobytes() for a in np.concatenate(parts[0])}
    r1 = {a.tobytes() for a in np.concatenate(parts[1])}
    assert len(r0) == len(r1) == 51 and not r0 & r1
    every = {a.tobytes() for a in want["inputs"]}
    assert r0 | r1 <= every and len(r0 | r1) == 102


def test_algoperf_drop_in_and_resume(lm):
    from batchd import algoperf
    server, ref = lm
    q = algoperf.input_queue("finewebedu_lm", "validation", 8, data="lm",
                             server=server.address, num_batches=2,
                             repeat_final_dataset=True, device="cpu")
    batches = [next(q) for _ in range(4)]
    b = batches[0]
    assert set(b) == {"inputs", "targets", "weights"}
    assert b["inputs"].dtype == torch.int32 and b["inputs"].shape == (8, SEQ)
    assert b["targets"].dtype == torch.int64 and b["targets"].shape == (8, SEQ)
    assert b["weights"].dtype == torch.float32 and b["weights"].shape == (8, SEQ)
    for a, c in zip(batches[:2], batches[2:]):  # take(2).repeat()
        assert torch.equal(a["inputs"], c["inputs"])
    assert (b["inputs"].numpy() == ref["val"]["inputs"][:8]).all()
    assert (b["targets"].numpy() == ref["val"]["targets"][:8]).all()
    whole = algoperf.input_queue("finewebedu_lm", "validation", 8, data="lm",
                                 server=server.address, device="cpu")
    last = list(whole)[-1]  # 27 windows: 4 batches, the last 3 real rows
    assert (last["weights"][:3] == 1).all() and (last["weights"][3:] == 0).all()
    assert (last["inputs"][3:] == -1).all()
    t = algoperf.input_queue("finewebedu_lm", "train", 16, data="lm",
                             server=server.address, device="cpu", seed=1)
    tb = next(t)
    assert tb["weights"] is None and tb["targets"].dtype == torch.int64
    state = t.state_dict()
    after = [next(t)["inputs"] for _ in range(3)]
    t2 = algoperf.input_queue("finewebedu_lm", "train", 16, data="lm",
                              server=server.address, device="cpu", seed=1)
    t2.load_state_dict(state)
    assert all(torch.equal(a, next(t2)["inputs"]) for a in after)


def test_truncated_arrow_file_is_refused_naming_file_and_offset(lm, lm_data):
    server, _ = lm
    dest = os.path.join(server.lm_root, "lm-cut")
    shutil.copytree(lm_data, dest)
    name = sorted(n for n in os.listdir(os.path.join(dest, "val"))
                  if n.endswith(".arrow"))[1]
    shard = os.path.join(dest, "val", name)
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:
        f.truncate(size - 100)
    with pytest.raises(Exception) as e:
        (l,) = _loaders(server, "lm-cut", "validation", 4, data="lm-cut")
        l.next_batch()
    msg = str(e.value)
    assert f"val/{name}" in msg and "byte" in msg, msg
