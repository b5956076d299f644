"""criteo1tb through a real daemon: every split's rows against TensorFlow's
(tests/python/reference/criteo_ref.py, AlgoPerf's decode_csv + log +
to_hash_bucket_fast in the reference venv), train as a multiset over an
epoch, ranks, resume, damaged lines, and the AlgoPerf drop-in."""
import os
import shutil

import numpy as np
import pytest

# The drop-in checks need torch; the Debian and PyPI-torch runs have it.
torch = pytest.importorskip("torch")

import batchd  # noqa: E402
from helpers import REPO, run_reference  # noqa: E402

GEN = os.path.join(REPO, "workloads", "criteo1tb", "make_criteo1tb.py")
OPTS = {"block_kib": "64", "window_blocks": "2"}
EVAL_BATCH = 64


def _make(out, *args):
    import subprocess
    import sys
    subprocess.run([sys.executable, GEN, "--out", str(out), *map(str, args)],
                   check=True)


@pytest.fixture(scope="module")
def criteo(criteo_data, tmp_path_factory):
    """A Server whose data root holds criteo/ (conftest's criteo_data: train
    days 0, 1, 22 of two files each, 3000 lines in several 64 KiB blocks a
    file; day 23's 36 files of 40 lines) and the reference rows of every
    split."""
    from batchd_daemon import Server
    tmp = tmp_path_factory.mktemp("criteo")
    s = Server(tmp)
    data = tmp / "data" / "criteo"
    shutil.copytree(criteo_data, data)
    names = sorted(os.listdir(data),
                   key=lambda n: tuple(int(x) for x in n.split("_")[1:]))
    split_files = {
        "train": [n for n in names if int(n.split("_")[1]) <= 22],
        "test": [n for n in names if n.startswith("day_23_")
                 and int(n.split("_")[2]) <= 18],
        "validation": [n for n in names if n.startswith("day_23_")
                       and int(n.split("_")[2]) >= 19],
    }
    ref = {}
    for split, files in split_files.items():
        # AlgoPerf's pipeline at the evaluation tests' batch of 64; train's
        # lines, whose place in a batch is not AlgoPerf's, as away from a
        # batch's tail.
        out = tmp / f"{split}.npz"
        how = ["--vectorised"] if split == "train" else []
        run_reference("criteo_ref.py", out, EVAL_BATCH, *how,
                      *[data / f for f in files])
        ref[split] = dict(np.load(out))
    yield s, ref
    s.stop()


def _loaders(server, stream, split, batch, world=1, **kw):
    opts = dict(OPTS, **kw.pop("options", {}))
    return [batchd.Loader(stream, batch, workload="criteo1tb", data="criteo",
                          split=split, world_size=world, rank=r,
                          server=server.address, connect_timeout=10.0,
                          timeout=60.0, options=opts, **kw)
            for r in range(world)]


def _global(loaders, steps):
    """Rank-ordered rows of each global batch, and rank 0's infos."""
    out, infos = [], []
    for _ in range(steps):
        parts = [l.next_batch() for l in loaders]
        infos.append(parts[0][1])
        out.append({k: torch.cat([p[0][k] for p in parts]).numpy()
                    for k in parts[0][0]})
    for l in loaders:
        l.close()
    return out, infos


def test_reference_farmhash_agrees_with_tf(criteo):
    _, ref = criteo
    for r in ref.values():
        assert (r["ids"] == r["farmhash"]).all()


@pytest.mark.parametrize("split", ["validation", "test"])
def test_eval_splits_equal_tf_in_order(criteo, split):
    server, ref = criteo
    want = ref[split]
    n = len(want["targets"])
    batch = EVAL_BATCH
    loaders = _loaders(server, f"c-{split}", split, batch, world=2,
                       options={"ids": "int64"})
    got, _ = _global(loaders, -(-n // batch))
    rows = {k: np.concatenate([g[k] for g in got]) for k in got[0]}
    assert rows["inputs"].dtype == np.float32
    assert rows["inputs"].shape == (len(got) * batch, 39)
    assert rows["targets"].shape == (len(got) * batch,)
    assert (rows["weights"][:n] == 1).all() and (rows["weights"][n:] == 0).all()
    # Bit-exact: TF's float log, FarmHash buckets, the cast to float32.
    assert rows["inputs"][:n].tobytes() == want["inputs"].tobytes()
    assert rows["targets"][:n].tobytes() == want["targets"].tobytes()
    assert (rows["ids"][:n] == want["ids"]).all()
    assert not rows["inputs"][n:].any()


def test_eval_train_is_the_head_of_train(criteo):
    server, ref = criteo
    n = 150
    (l,) = _loaders(server, "c-et", "eval_train", 50,
                    options={"eval_train_examples": str(n)})
    got, _ = _global([l], 3)
    inputs = np.concatenate([g["inputs"] for g in got])
    assert inputs.tobytes() == ref["train"]["inputs"][:n].tobytes()


def _keys(inputs, targets):
    return sorted(inputs[i].tobytes() + targets[i].tobytes()
                  for i in range(len(targets)))


def test_train_epoch_is_a_permutation_of_tf_rows_and_world_independent(criteo):
    server, ref = criteo
    want = ref["train"]
    n = len(want["targets"])  # 3000
    g = 200
    one, info1 = _global(_loaders(server, "c-t1", "train", g, seed=3), 30)
    two, info2 = _global(_loaders(server, "c-t2", "train", g, world=2,
                                  seed=3), 30)
    for a, b in zip(one, two):
        for k in a:
            assert a[k].tobytes() == b[k].tobytes()
    assert [i.cursor for i in info1] == [i.cursor for i in info2]
    want_keys = _keys(want["inputs"], want["targets"])
    for epoch in range(2):
        batches = one[epoch * 15:(epoch + 1) * 15]
        inputs = np.concatenate([b["inputs"] for b in batches])
        targets = np.concatenate([b["targets"] for b in batches])
        assert _keys(inputs, targets) == want_keys
        assert all((b["weights"] == 1).all() for b in batches)
    # Shuffled: not file order, and a different order in epoch 1.
    first = np.concatenate([b["inputs"] for b in one[:15]])
    assert first.tobytes() != want["inputs"].tobytes()
    second = np.concatenate([b["inputs"] for b in one[15:30]])
    assert first.tobytes() != second.tobytes()


def test_train_resumes_from_step_and_cursor(criteo):
    server, _ = criteo
    g = 200
    full, infos = _global(_loaders(server, "c-r0", "train", g, seed=9), 24)
    by_step, _ = _global(_loaders(server, "c-r1", "train", g, world=2, seed=9,
                                  start_step=19), 5)
    by_cursor, _ = _global(_loaders(server, "c-r2", "train", g, world=2,
                                    seed=9, start_step=19,
                                    start_cursor=infos[19].cursor), 5)
    for got in (by_step, by_cursor):
        for a, b in zip(got, full[19:]):
            assert a["inputs"].tobytes() == b["inputs"].tobytes()


def test_damaged_lines_are_weight_zero_and_logged(tmp_path):
    from batchd_daemon import Server
    s = Server(tmp_path)
    try:
        data = tmp_path / "data" / "criteo"
        _make(data, "--lines", 10, "--train-days", "0", "--files-per-day", 1)
        good = open(data / "day_23_19", "rb").read().split(b"\n")[0]
        fields = good.split(b"\t")
        bad_lines = [b"\t".join(fields[:12]),                 # 12 fields
                     b"\t".join([b"1", b"x7"] + fields[2:]),  # not a number
                     b"\t".join(fields[:39] + [b"a" * 900])]  # too long
        with open(data / "day_23_20", "wb") as f:
            f.write(b"\n".join([good] + bad_lines + [good]))  # no final '\n'
        open(data / "day_23_21", "wb").close()  # empty file
        for k in range(22, 36):
            os.remove(data / f"day_23_{k:02d}")
        n = 10 + 5  # day_23_19 and day_23_20
        (l,) = _loaders(s, "c-bad", "validation", 8,
                        options={"max_line_bytes": "800"})
        got, _ = _global([l], 2)
        w = np.concatenate([b["weights"] for b in got])
        x = np.concatenate([b["inputs"] for b in got])
        assert list(w[:n]) == [1.0] * 11 + [0.0] * 3 + [1.0]
        assert not x[11:14].any() and not x[n:].any()
        # Rows 8..14 are AlgoPerf's short last batch of 7 rows, whose dense
        # values TF computes with the scalar log1pf: there the good line is
        # the same row twice, with row 0's ids.
        assert (x[10][13:] == x[0][13:]).all()
        assert (x[14] == x[10]).all()  # no final newline
        log = open(tmp_path / "batchd.log").read()
        assert "day_23_20" in log and "offset" in log
    finally:
        s.stop()


# Dense spellings beyond the generator's counts: what decode_csv takes
# (signs, exponents, hexadecimal, white space, infinities, NaNs,
# subnormals, out of range) and the counts around the log's table.
ODD_DENSE = ["", "-1", "0", "-0", "20", "21", "159", "65535", "65536",
             "616556339", "99999999", "123456789", "16777217", "4294967296",
             "-2", "-3", "+5", "007", "1e3", "3.5", "1e-40", "1e-50",
             "3.4e38", "1e39", "-1e39", "inf", "-inf", "nan", "-nan", "0x10",
             " 5", "5 ", "1.17549435e-38", "1e-30"]


@pytest.mark.parametrize("batch,world", [(60, 1), (64, 2)])
def test_every_dense_value_is_algoperfs_at_its_place_in_the_batch(
        tmp_path, batch, world):
    """Validation through the daemon against AlgoPerf's _parse_example_fn
    run by tf.data at the same batch size (criteo_ref.py), every value bit
    for bit: the vectorised log1p for most rows, the scalar log1pf for the
    last (rows mod 8) rows of each batch (at 60, four rows of every batch;
    at 64, the short last batch's)."""
    from batchd_daemon import Server
    import random
    rng = random.Random(batch)
    s = Server(tmp_path)
    try:
        data = tmp_path / "data" / "criteo"
        _make(data, "--lines", 30, "--train-days", "0", "--files-per-day", 1,
              "--seed", 5)
        lines = open(data / "day_23_19", "rb").read().split(b"\n")[:-1]
        odd = []
        for k in range(1505):  # 1,975 lines: a last batch of 64 ends in 7
            fields = lines[k % len(lines)].split(b"\t")
            for j in range(1, 14):
                r = rng.random()
                fields[j] = (rng.choice(ODD_DENSE) if r < 0.5 else
                             str(rng.randrange(200000) if r < 0.8 else
                                 rng.randrange(10 ** 9))).encode()
            if k % 50 == 0:
                fields[0] = rng.choice([b"-0", b"1e-40", b"nan", b"1"])
            odd.append(b"\t".join(fields))
        with open(data / "day_23_19", "wb") as f:
            f.write(b"\n".join(odd) + b"\n")
        files = [data / f"day_23_{k}" for k in range(19, 36)]
        out = tmp_path / "want.npz"
        run_reference("criteo_ref.py", out, batch, *files)
        want = dict(np.load(out))
        n = len(want["targets"])
        got, _ = _global(_loaders(s, f"c-odd{batch}", "validation", batch,
                                  world=world), -(-n // batch))
        inputs = np.concatenate([g["inputs"] for g in got])[:n]
        targets = np.concatenate([g["targets"] for g in got])[:n]
        assert inputs.tobytes() == want["inputs"].tobytes()
        assert targets.tobytes() == want["targets"].tobytes()
    finally:
        s.stop()


def test_algoperf_drop_in(criteo):
    from batchd import algoperf
    server, ref = criteo
    q = algoperf.input_queue("criteo1tb", "validation", 64,
                             data="criteo", server=server.address,
                             num_batches=3, repeat_final_dataset=True,
                             device="cpu", options=OPTS)
    batches = [next(q) for _ in range(6)]
    b = batches[0]
    assert set(b) == {"inputs", "targets", "weights"}
    assert b["inputs"].dtype == torch.float32 and b["inputs"].shape == (64, 39)
    assert b["targets"].shape == (64,) and b["weights"].shape == (64,)
    for a, c in zip(batches[:3], batches[3:]):  # take(3).repeat()
        assert torch.equal(a["inputs"], c["inputs"])
    assert b["inputs"].numpy().tobytes() == \
        ref["validation"]["inputs"][:64].tobytes()
    t = algoperf.input_queue("criteo1tb", "train", 100, data="criteo",
                             server=server.address, device="cpu",
                             options=OPTS, seed=1)
    tb = next(t)
    assert tb["weights"].shape == (100,) and (tb["weights"] == 1).all()
    state = t.state_dict()
    after = [next(t)["inputs"] for _ in range(2)]
    t2 = algoperf.input_queue("criteo1tb", "train", 100, data="criteo",
                              server=server.address, device="cpu",
                              options=OPTS, seed=1)
    t2.load_state_dict(state)
    assert all(torch.equal(a, next(t2)["inputs"]) for a in after)


def _counted_blocks(cache_dir):
    """Blocks whose lines a daemon counted, from its --cache-dir entry of
    criteo1tb's line counts (cache_dir.h's entry layout: a 32-byte header,
    kind, key, then 4 bytes a block, 0xffffffff where not counted)."""
    import glob
    import struct
    counted = 0
    for path in glob.glob(os.path.join(cache_dir, "criteo-block-lines-*.entry")):
        raw = open(path, "rb").read()
        kind_len, key_len, value_len = struct.unpack_from("<IQQ", raw, 12)
        value = raw[32 + kind_len + key_len:][:value_len]
        counted += sum(c != 0xFFFFFFFF for c in
                       struct.unpack(f"<{value_len // 4}I", value))
    return counted


def test_resume_from_a_cursor_counts_no_earlier_window(criteo, criteo_data,
                                                       tmp_path):
    """A cursor carries the rows before its window: a daemon with an empty
    --cache-dir resumes from it counting only the windows it serves, while
    a bare step needs every earlier window counted."""
    from batchd_daemon import Server
    server, _ = criteo
    g, step = 8, 250  # row 2000 of 3000: a late window of one block
    opts = {"window_blocks": "1"}
    full, infos = _global(_loaders(server, "c-far", "train", g, seed=5,
                                   start_step=step, options=opts), 2)
    cursor = infos[0].cursor
    window = cursor.window // (1 * (64 * 1024 // 2 + 1))
    assert window >= 6 and cursor.row == 2000
    for by_cursor in (True, False):
        root = tmp_path / ("cursor" if by_cursor else "step")
        root.mkdir()
        fresh = Server(root)
        try:
            shutil.copytree(criteo_data, root / "data" / "criteo")
            kw = {"start_cursor": cursor} if by_cursor else {}
            got, _ = _global(_loaders(fresh, "c-fresh", "train", g, seed=5,
                                      start_step=step, options=opts, **kw), 2)
            for a, b in zip(got, full):
                assert a["inputs"].tobytes() == b["inputs"].tobytes()
            fresh.proc.terminate()  # the counts are stored as it stops
            fresh.proc.wait(timeout=30)
            counted = _counted_blocks(os.path.join(fresh.dir, "cache"))
        finally:
            fresh.stop()
        if by_cursor:
            assert 0 < counted <= 3, counted  # the cursor's window and next
        else:
            assert counted > window, counted  # every window before it too


def test_resume_from_another_ranks_cursor_in_a_later_window(criteo):
    """Rank 1's cursor of a batch that began in an earlier window resumes
    that whole batch: the window before the cursor's is learnt too."""
    server, _ = criteo
    g, m = 400, 64 * 1024 // 2 + 1
    opts = {"window_blocks": "1"}
    loaders = _loaders(server, "c-any", "train", g, world=2, seed=7,
                       options=opts)
    batches, straddle = [], None
    for step in range(7):
        parts = [l.next_batch() for l in loaders]
        batches.append(np.concatenate([p[0]["inputs"].numpy()
                                       for p in parts]))
        c0, c1 = parts[0][1].cursor, parts[1][1].cursor
        if straddle is None and c0.window // m != c1.window // m:
            straddle = (step, c1)
    for l in loaders:
        l.close()
    assert straddle is not None  # ~260 lines a window, 200 rows a rank
    step, cursor = straddle
    got, _ = _global(_loaders(server, "c-any2", "train", g, world=2, seed=7,
                              start_step=step, start_cursor=cursor,
                              options=opts), 2)
    for a, b in zip(got, batches[step:]):
        assert a["inputs"].tobytes() == b.tobytes()
