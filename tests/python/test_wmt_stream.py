"""The wmt eval streams end to end: a batchd daemon, two ranks reading the
validation split of generated data, rows equal to python3-sentencepiece's
tokens, the last global batch padded with weight-0 rows.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_wmt_stream.py
"""


import pytest

torch = pytest.importorskip("torch")
spm = pytest.importorskip("sentencepiece")

import batchd  # noqa: E402
from batchd_daemon import Server  # noqa: E402
from helpers import make_wmt, python_tokens  # noqa: E402

GLOBAL_BATCH = 16


@pytest.fixture
def wmt_server(tmp_path):
    s = Server(tmp_path)
    data = tmp_path / "data" / "wmt"
    make_wmt(data, train=300, validation=90, test=10, shards=2, seed=5,
             vocab_size=600)
    yield s, data
    s.stop()


def test_validation_stream_is_padded_tokens_with_weights(wmt_server):
    server, data = wmt_server
    kept, _ = python_tokens(data, "validation")
    loaders = [batchd.Loader("wmt-eval", GLOBAL_BATCH, workload="wmt",
                             data="wmt", split="validation", world_size=2,
                             rank=rank, server=server.address,
                             connect_timeout=10.0, timeout=60.0,
                             options={"index_threads": 1})
               for rank in range(2)]
    rows = {"inputs": [], "targets": [], "weights": []}
    valid = []
    for step in range(-(-len(kept) // GLOBAL_BATCH)):
        for loader in loaders:
            batch, info = loader.next_batch()
            assert info.step == step
            assert batch["inputs"].dtype == torch.int32
            assert batch["weights"].dtype == torch.float32
            assert tuple(batch["inputs"].shape) == (GLOBAL_BATCH // 2, 256)
            for k in rows:
                rows[k] += batch[k].tolist()
            valid.append(info.valid_count)
    for loader in loaders:
        with pytest.raises(StopIteration):
            next(loader)
    assert sum(valid) == len(kept)
    for i, (inputs, targets) in enumerate(kept):
        assert rows["inputs"][i] == inputs + [0] * (256 - len(inputs))
        assert rows["targets"][i] == targets + [0] * (256 - len(targets))
        assert rows["weights"][i] == ([1.0 if t > 0 else 0.0 for t in targets]
                                      + [0.0] * (256 - len(targets)))
    for i in range(len(kept), len(rows["inputs"])):  # padding rows
        assert rows["inputs"][i] == [0] * 256
        assert rows["weights"][i] == [0.0] * 256


TRAIN_KEYS = ("inputs", "targets", "inputs_position", "inputs_segmentation",
              "targets_position", "targets_segmentation")


def _train_rows(server, stream, world, steps, start_step=0, start_cursor=None):
    """Global batches (rank-ordered rows) and each batch's cursor."""
    loaders = [batchd.Loader(stream, GLOBAL_BATCH, workload="wmt", data="wmt",
                             split="train", world_size=world, rank=rank,
                             seed=11, start_step=start_step,
                             start_cursor=start_cursor,
                             server=server.address, connect_timeout=10.0,
                             timeout=120.0, options={"index_threads": 1})
               for rank in range(world)]
    batches, cursors = [], []
    for step in range(steps):
        rows = {k: [] for k in TRAIN_KEYS}
        for rank, loader in enumerate(loaders):
            batch, info = loader.next_batch()
            assert info.step == start_step + step
            assert set(batch) == set(TRAIN_KEYS)
            assert tuple(batch["inputs"].shape) == (GLOBAL_BATCH // world, 256)
            if rank == 0:
                cursors.append(info.cursor)
            for k in TRAIN_KEYS:
                rows[k] += batch[k].tolist()
        batches.append(rows)
    for loader in loaders:
        loader.close()
    return batches, cursors


def test_train_stream_packs_rows_independent_of_world_and_resumes(wmt_server):
    server, _ = wmt_server
    # 300 pairs pack into a few dozen rows an epoch: 12 steps cross epochs.
    one, cursors = _train_rows(server, "wmt-train-w1", 1, 12)
    two, cursors2 = _train_rows(server, "wmt-train-w2", 2, 12)
    assert one == two
    assert cursors == cursors2
    assert len({c[0] for c in cursors}) >= 2, "expected to cross an epoch"
    resumed, _ = _train_rows(server, "wmt-train-resume", 2, 5, start_step=7)
    assert resumed == one[7:12]
    # From the cursor of step 7 (rank 0's), without replaying earlier epochs.
    by_cursor, cursors3 = _train_rows(server, "wmt-train-cursor", 2, 5,
                                      start_step=7, start_cursor=cursors[7])
    assert by_cursor == one[7:12]
    assert cursors3 == cursors[7:12]
    # A cursor inside a global batch is refused, naming the problem.
    inside = cursors[7][:2] + (cursors[7][2] + 1,)
    with pytest.raises(batchd.Error, match="not the first row of a global batch"):
        _train_rows(server, "wmt-train-bad-cursor", 1, 1, start_step=7,
                    start_cursor=inside)
    # Segments and positions agree with the tokens in every row.
    for rows in one:
        for inp, seg, pos in zip(rows["inputs"], rows["inputs_segmentation"],
                                 rows["inputs_position"]):
            for t, s, p in zip(inp, seg, pos):
                assert (s == 0) == (t == 0)
                assert p >= 0
